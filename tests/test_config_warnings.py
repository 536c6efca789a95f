"""Settings that run but quietly defeat themselves are said at load, one line each: the KL
penalty in the reward under per-group scaling, and top-p sampling under the IS correction."""

from __future__ import annotations

import pytest

from vlcohort.config import load_config

KL_GROUP = ["grpo.kl_in_reward=true", "grpo.kl_coef=0.01", "grpo.kl_kind=k1"]


@pytest.mark.parametrize("overrides, said", [
    (KL_GROUP, "grpo.kl_in_reward=true with grpo.adv_scale=group"),
    (["rollout.top_p=0.9"], "rollout.top_p=0.9 with grpo.is_mode=truncate"),
])
def test_each_pitfall_is_one_warning_line(capsys, overrides, said):
    load_config(None, overrides)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and said in lines[0], lines


@pytest.mark.parametrize("overrides", [
    [],
    [*KL_GROUP, "grpo.adv_scale=none"],  # the penalty keeps its scale
    ["grpo.kl_in_reward=true", "grpo.kl_coef=0", "grpo.kl_kind=k1"],  # no penalty at all
    ["rollout.top_p=0.9", "grpo.is_mode=off"],  # no IS weights
])
def test_no_warning_where_nothing_defeats_itself(capsys, overrides):
    load_config(None, overrides)
    assert "warning:" not in capsys.readouterr().err


def test_the_options_page_says_both():
    from vlcohort.docs_pages import ROOT

    page = (ROOT / "docs" / "options.md").read_text()
    assert "whatever kl_coef is" in page and "every weight is <= 1" in page
