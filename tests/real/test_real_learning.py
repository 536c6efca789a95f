"""The loop makes a real pretrained model better on problems it never trained on.

GT-Reward (GRPO on the gold answer) on the real SmolLM2-135M-Instruct, through
``vlcohort train`` as a user runs it: a JSONL training file of one task family of
``bench/real_learning.py`` and a held-out JSONL file of the same family's dev and test
problems (never trained on), scored by the in-run held-out evaluation (``eval.data.*``)
before the first step and after the last. The held-out accuracy must rise by at least
:data:`MARGIN`: signs, masks, the importance-sampling correction, the optimizer and the
schedule all have to be right for that. Not a timing test (about two minutes on 2 cores);
the margin was checked over several seeds (docs/real_learning.md, "The CI test").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.real_learning import ANSWER_STYLE, FORMATS, INSTRUCTION, family_items, write_jsonl
from tests.real.conftest import SMOLLM2, checkpoint_folder
from vlcohort.cli import main
from vlcohort.monitoring.metrics import read_metrics

#: The family, its training steps and the required held-out gain (accuracy points / 100).
FAMILY, STEPS, MARGIN = "next", 12, 0.15


def learning_run(out: Path, seed: int) -> list[dict]:
    """A GT-Reward run of SmolLM2 on :data:`FAMILY`; its held-out evaluation records."""
    items = family_items(FAMILY)
    train = write_jsonl(out / "train.jsonl", items["train"])
    held = write_jsonl(out / "heldout.jsonl", items["dev"] + items["test"])
    assert main(["train", "method=gt_reward", f"agents=[{{name: smollm2, path: '{SMOLLM2}', "
                 f"prompt_format: {FORMATS['smollm2']}}}]", "arms=[]", "data.source=file",
                 f"data.path={train}", "eval.data.source=file", f"eval.data.path={held}",
                 f"eval.every={STEPS}", "eval.max_new_tokens=16", "eval.batch_size=50",
                 "prompt.system_prompt=", f"prompt.instruction={INSTRUCTION}",
                 f"reward.answer_style={ANSWER_STYLE}", "rollout.prompts_per_step=4",
                 "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=16",
                 "grpo.micro_batch_seqs=16", "optim.lr=3e-5",
                 "optim.warmup_ratio=0", "checkpoint.at_end=false", "log.plot=false",
                 f"run.steps={STEPS}", f"run.seed={seed}", f"run.output_dir={out / 'run'}"]) == 0
    return [r for r in read_metrics(out / "run" / "metrics.jsonl") if "eval/smollm2/all/acc" in r]


@pytest.mark.slow
def test_gt_reward_raises_held_out_accuracy_of_the_real_smollm2(tmp_path):
    checkpoint_folder(SMOLLM2)
    evals = learning_run(tmp_path, seed=0)
    assert [r["step"] for r in evals] == [0, STEPS]
    before, after = evals[0]["eval/smollm2/all/acc"], evals[-1]["eval/smollm2/all/acc"]
    assert after - before >= MARGIN, f"held-out accuracy {before:.2f} -> {after:.2f}"
