"""Short Co-RL runs of tiny agents through ``vlcohort train``, used by the per-family tests
(``tests/processors/test_<family>.py``) to show a family trains in a mixed cohort. A test
that runs one asks for ``tiny_cache`` (``tests/processors/conftest.py``), so the run builds
its tiny models into a private cache."""

from __future__ import annotations

from pathlib import Path

from vlcohort.cli import main
from vlcohort.monitoring.metrics import read_metrics


def cohort_run(run: Path, *agents: str, steps: int = 2, base: list[str] | None = None) -> list[dict]:
    """A short Co-RL run of tiny agents (peer vote, ring), no warm-up, no eval: metrics
    records. Rewards are read as the last letter, so a random tiny model gets some
    multiple-choice answers right by chance and updates really happen."""
    spec = ", ".join(f"{{name: {chr(65 + i)}, path: 'tiny:{a}'}}" for i, a in enumerate(agents))
    args = ["train", *(base or []), "method=co_rl", f"agents=[{spec}]",
            "reward.answer_style=last_letter", "reward.min_share=0", "grpo.kl_coef=0",
            "arms=[]", "eval.every=0", "data.tasks=[shape_colour]", "data.num_problems=8",
            "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
            "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=8", "optim.lr=1e-3",
            f"run.steps={steps}", "log.tensorboard=false", "log.plot=false",
            f"run.output_dir={run}"]
    assert main(args) == 0
    return read_metrics(run / "metrics.jsonl")


def assert_cohort_ran(recs: list[dict], names: str, steps: int = 2) -> None:
    assert [r["step"] for r in recs] == list(range(1, steps + 1))
    for n in names:
        assert f"agent/{n}/reward/mean" in recs[0] and f"agent/{n}/completion_len" in recs[0]
    assert "cohort/agreement" in recs[0]
