"""YAML 1.1's boolean words (yes / no / on / off) in a config: a string setting keeps the
word, a boolean setting takes it as true / false. PyYAML reads those words as booleans, so
``grpo.is_mode: off`` (the documented way to turn IS off) and ``self_play.images: on`` were
refused as "expected a string, got False"."""

from __future__ import annotations

import pytest

from vlcohort.config import load_config
from vlcohort.typed_yaml import ConfigError, load_strict


@pytest.mark.parametrize("how", ["override", "file"])
def test_string_settings_keep_the_words(tmp_path, how):
    settings = {"grpo.is_mode": "off", "self_play.images": "on", "run.name": "no"}
    if how == "override":
        cfg = load_config(None, [f"{k}={v}" for k, v in settings.items()])
    else:
        f = tmp_path / "recipe.yaml"
        f.write_text("grpo:\n  is_mode: off\nself_play:\n  images: on\nrun:\n  name: no\n")
        cfg = load_config(f)
    assert (cfg.grpo.is_mode, cfg.self_play.images, cfg.run.name) == ("off", "on", "no")


@pytest.mark.parametrize("word, value", [("yes", True), ("On", True), ("no", False), ("OFF", False),
                                         ("true", True), ("False", False)])
def test_boolean_settings_still_take_them(word, value):
    cfg = load_config(None, [f"log.plot={word}", f"rollout.vllm.sleep_mode={word}"])
    assert cfg.log.plot is value and cfg.rollout.vllm.sleep_mode is value


def test_only_true_and_false_are_booleans_and_other_words_are_still_errors():
    assert load_strict("a: yes\nb: TRUE\nc: off\nd: false") == {"a": "yes", "b": True, "c": "off", "d": False}
    with pytest.raises(ConfigError, match="log.plot: expected true or false, got 'maybe'"):
        load_config(None, ["log.plot=maybe"])
    with pytest.raises(ConfigError, match="grpo.is_mode: 'yes' is not one of"):
        load_config(None, ["grpo.is_mode=yes"])
