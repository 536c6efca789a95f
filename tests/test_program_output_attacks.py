"""What a program prints never crashes the host: the policy writes these programs, so each
attack here is one a model being trained can find.

The host reads two things a program controls: its stdout (compared with the expected
output, as LiveCodeBench's ``Decimal`` rule does) and the driver's result channel, which
the program shares (it can find the channel's file object by walking its frames). Each
attack runs for real in the sandbox, through ``vlcohort eval score`` and through the
training step (keys, vote and ``ground_truth`` rewards), and must end as a failed case,
never as an exception out of the host:

* ``sNaN`` printed where a number is due: Decimal's comparison of a signalling NaN raises
  ``InvalidOperation``;
* a 5,000-digit number as a result line: ``json.loads`` raises ``ValueError`` (Python's
  integer-digits limit), which is not a ``JSONDecodeError``;
* a result line nested 100,000 deep;
* 64 MiB of newlines on the channel: splitting it held 64 million strings at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.replay import ReplayEngine
from vlcohort.cli import main
from vlcohort.config import load_config

pytestmark = pytest.mark.sandbox

LCB = Path(__file__).parent / "data" / "text_benchmarks" / "livecodebench"


def on_channel(payload: str) -> str:
    """A program that writes ``payload`` on the driver's result channel, found by walking
    its frames to the driver's ``side`` file; at load time for a functional program, in
    its first case for a stdin one."""
    return ("import sys\nf = sys._getframe()\n"
            "while f is not None and not hasattr(f.f_locals.get('side'), 'write'):\n"
            "    f = f.f_back\n"
            f"f.f_locals['side'].write({payload})\nf.f_locals['side'].flush()\n")


SNAN = "print('sNaN')\n"
BIG_NUMBER = on_channel("'1' * 5000 + '\\n'")
DEEP = on_channel("'[' * 100000 + '\\n'")
FLOOD = on_channel("'\\n' * (64 << 20)")
#: abc999_a: n, then n numbers; print their sum (the expected output is 6)
HONEST_STDIN = "input()\nprint(sum(map(int, input().split())))\n"
#: 9001, two-sum (functional)
FUNCTIONAL_TAIL = ("class Solution:\n    def twoSum(self, nums, target):\n"
                   "        seen = {}\n        for i, x in enumerate(nums):\n"
                   "            if target - x in seen:\n                return [seen[target - x], i]\n"
                   "            seen[x] = i\n")


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def _responses(path: Path, pid: str, programs: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": pid, "sample": s, "response": fenced(p)}) + "\n"
                            for s, p in enumerate(programs)))
    return path


def _score(tmp_path: Path, data: Path, pid: str, programs: list[str]) -> list[bool]:
    out = tmp_path / "out"
    rc = main(["eval", "score", "--benchmark", "livecodebench", "--data", str(data),
               "--responses", str(_responses(tmp_path / "r.jsonl", pid, programs)),
               "--out", str(out), "--json"])
    assert rc == 0
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    return [i["passed"] for i in sorted(items, key=lambda i: i["sample"])]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def test_stdin_attacks_fail_their_case_through_eval_score(tmp_path, capsys):
    assert _score(tmp_path, LCB / "test.jsonl", "abc999_a",
                  [HONEST_STDIN, SNAN, BIG_NUMBER, DEEP]) == [True, False, False, False]


def test_functional_attacks_fail_their_case_through_eval_score(tmp_path, capsys):
    assert _score(tmp_path, LCB / "test2.jsonl", "9001",
                  [FUNCTIONAL_TAIL, BIG_NUMBER + FUNCTIONAL_TAIL, DEEP + FUNCTIONAL_TAIL,
                   FUNCTIONAL_TAIL.replace("return [", "return float('nan') or [")]
                  ) == [True, False, False, False]


def _peak_rss_mb(tmp_path: Path, program: str) -> float:
    """The host's peak RSS (MiB) scoring one response in a fresh process."""
    resp = _responses(tmp_path / "flood.jsonl", "abc999_a", [program])
    script = ("import resource, sys\nfrom vlcohort.cli import main\n"
              f"rc = main(['eval', 'score', '--benchmark', 'livecodebench', '--data', "
              f"{str(LCB / 'test.jsonl')!r}, '--responses', {str(resp)!r}, '--json'])\n"
              "print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    rc, kib = done.stdout.strip().splitlines()[-1].split()
    assert rc == "0", done.stderr[-2000:]
    return int(kib) / 1024


def test_a_newline_flood_on_the_channel_costs_the_host_little_memory(tmp_path):
    """64 MiB on the channel is the cap: the host holds it a few times over (the pipe's
    buffer, the bytes, the text), never 64 million lines at once (about 1 GB more)."""
    honest = _peak_rss_mb(tmp_path, HONEST_STDIN)
    flood = _peak_rss_mb(tmp_path, FLOOD)
    assert flood - honest < 400, (honest, flood)


# ------------------------------------------------------------------- the training step

TESTS = {"kind": "stdin", "cases": [["3 4\n", "7\n"], ["-1 1\n", "0\n"]]}
PUBLIC = {"kind": "stdin", "cases": [["1 2\n", "3\n"], ["10 5\n", "15\n"]]}
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_attacks_earn_nothing_and_stop_nothing_in_a_training_step(tmp_path):
    """The real step: B is rewarded by the tests (``ground_truth``: the Decimal compare),
    A by B's vote over behaviour keys (the channel read with no gold). Each attack scores
    0, the honest programs 1, and the update runs."""
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import train_step

    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps({"id": "c0", "question": "Read two integers, print their sum.",
                                "public_tests": PUBLIC, "tests": json.dumps(TESTS)}) + "\n")
    cfg = load_config(None, [
        "method=co_rl", "agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2'}]",
        "agents.1.reward_source=ground_truth", "reward.answer_kind=code", "data.source=file",
        f"data.path={data}", "arms=[]", "eval.every=0", "rollout.prompts_per_step=1",
        "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=200", "grpo.kl_coef=0",
        "grpo.micro_batch_seqs=4", "optim.warmup_ratio=0", "log.plot=false",
        "log.tensorboard=false", "reward.min_share=0", "reward.code_workers=2",
        "grpo.is_mode='off'", "run.steps=1", f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    script = [fenced(SUM), fenced(SNAN), fenced(BIG_NUMBER), fenced(SUM.replace("a + b", "b + a"))]
    for agent in run.agents:
        agent.engine = ReplayEngine(agent.engine, agent.adapter, {"c0": script})
    rec = train_step(run, 1)
    # B by the tests: SUM and its twin pass, sNaN and the channel attack fail
    assert rec["agent/B/reward/mean"] == pytest.approx(2 / 4)
    # A by B's vote: the sum's behaviour wins (2 of the 3 programs with a key)
    assert rec["agent/A/reward/mean"] == pytest.approx(2 / 4)
    assert "agent/A/loss" in rec and "agent/B/loss" in rec
