"""``bench/real_step.py`` (vlcohort vs TRL on the real SmolLM2-135M): its arguments and its
own problem file. Cheap checks only; the benchmark itself is run by hand, not timed here."""

from __future__ import annotations

import pytest

from tests.helpers.bench import load_script

pytest.importorskip("trl")  # the peer; not a vlcohort dependency



@pytest.fixture(scope="module")
def bench():
    return load_script("real_step")


def test_arguments(bench):
    args = bench.parse_args([])
    assert (args.steps, args.warmup, args.threads, args.new_tokens) == (6, 1, 1, 48)
    assert not args.sequential and not args.no_baselines and not args.profile
    args = bench.parse_args(["--steps", "3", "--warmup", "0", "--new-tokens", "8",
                             "--sequential", "--no-baselines"])
    assert (args.steps, args.warmup, args.new_tokens) == (3, 0, 8)
    for bad in (["--steps", "1", "--warmup", "1"], ["--new-tokens", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_own_problems_load_as_math_rows_with_their_gold(bench, tmp_path):
    """The benchmark's problems go through the ``math`` preset as a user's file would: each
    gold is the solution's last \\boxed{} and is the right sum / product / quotient."""
    from vlcohort.data.problems import load_problems_from

    problems, _ = load_problems_from(bench.write_problems(str(tmp_path)), preset="math",
                                     require_answer=True)
    assert [p.gold for p in problems] == ["42", "60", "180", "32", "7", "39", "63", "7"]
    assert all(not p.images for p in problems)
