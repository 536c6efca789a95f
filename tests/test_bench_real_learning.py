"""``bench/real_learning.py``'s data and commands, without models: every family's splits
are deterministic and share no question, the held-out file marks each problem's split in
its task, and every arm's command line is a config ``vlcohort train`` accepts."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.real_learning import ARMS, FAMILIES, family_items, train_args, write_pair
from vlcohort.config import load_config
from vlcohort.data.problems import load_problems_from


@pytest.mark.parametrize("family", list(FAMILIES))
def test_splits_are_deterministic_and_disjoint(family):
    items = family_items(family)
    assert items == family_items(family)
    seen = [{(r["question"], tuple(r.get("options") or ())) for r in items[s]} for s in ("train", "dev", "test")]
    assert all(seen) and not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    ids = [r["id"] for s in items.values() for r in s]
    assert len(ids) == len(set(ids))


def test_the_pair_files_and_every_arms_command_line(tmp_path):
    train, held = write_pair(tmp_path, ["next", "larger"])
    problems, report = load_problems_from(str(held))
    assert not report.skipped
    assert {p.meta["task"] for p in problems} == {"next/dev", "next/test", "larger/dev", "larger/test"}
    held_q = {p.text for p in problems}
    assert not held_q & {json.loads(line)["question"] for line in train.read_text().splitlines()}
    args = argparse.Namespace(eval_every=5, max_new_tokens=16, prompts=4, rollouts=4, lr=3e-5, steps=20)
    for method in ARMS:
        argv = train_args(method, 0, tmp_path, train, held, args)
        assert argv[0] == "train"
        cfg = load_config(None, argv[1:])
        assert cfg.method == method and cfg.eval.data.path == str(held)
        assert [a.prompt_format for a in cfg.agents] == ["chat", "plain"]
