"""Metrics: one JSON line per step in ``metrics.jsonl``, TensorBoard when installed, plots.

Keys are namespaced (DESIGN.md rule 7): ``agent/<name>/...``, ``cohort/...``,
``timing/...``. Their meanings are listed in :data:`METRIC_DOCS` (and the README).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# name pattern -> meaning. ``<a>`` is an agent name.
METRIC_DOCS: dict[str, str] = {
    "step": "RL step (1-based)",
    "agent/<a>/reward/mean": "mean reward over the agent's B x G rollouts",
    "agent/<a>/reward/std": "std of those rewards",
    "agent/<a>/pseudo_label/acc": "share of the agent's teacher labels equal to gold "
                                 "(prompts with gold and a non-abstaining teacher)",
    "agent/<a>/vote/acc": "share of the agent's own majority votes equal to gold",
    "agent/<a>/acc": "share of the agent's rollouts whose answer equals gold",
    "agent/<a>/acc/<t>": "the same, on the step's prompts of task family <t> (when "
                         "problems carry a task name)",
    "agent/<a>/teacher_abstain": "share of prompts where the agent's teacher abstained "
                                 "(no learning signal from them)",
    "agent/<a>/parse_rate": "share of rollouts with an extractable answer",
    "agent/<a>/completion_len": "mean completion length in tokens",
    "agent/<a>/truncated": "share of completions cut at max_new_tokens",
    "agent/<a>/zero_adv_groups": "share of prompts whose G advantages are all zero",
    "agent/<a>/loss": "policy loss (mean over PPO epochs)",
    "agent/<a>/clip_frac": "share of tokens where the clipped surrogate was active",
    "agent/<a>/kl": "mean KL estimate to the reference (when kl_coef > 0)",
    "agent/<a>/is/mean": "mean importance weight policy/rollout over valid tokens",
    "agent/<a>/is/min": "smallest importance weight",
    "agent/<a>/is/max": "largest importance weight (before truncation)",
    "agent/<a>/is/applied_mean": "mean importance weight after truncation / masking",
    "agent/<a>/is/nonfinite_tokens": "completion tokens whose rollout log-prob was NaN / inf "
                                     "(masked out of the loss)",
    "agent/<a>/is/frac_truncated": "share of tokens whose weight was truncated at the cap",
    "agent/<a>/is/frac_masked": "share of tokens masked (mask mode, or non-finite log-probs)",
    "agent/<a>/is/rollout_k3": "k3 divergence between rollout and policy log-probs",
    "agent/<a>/grad_norm": "gradient norm before clipping (mean over optimizer steps)",
    "agent/<a>/lr": "learning rate",
    "agent/<a>/skipped_updates": "updates skipped this step for a NaN / inf loss",
    "agent/<a>/self_certainty": "mean per token, over the agent's completions, of KL(U || p) of "
                                "the policy's next-token distribution (agents with an "
                                "intrinsic reward source)",
    "agent/<a>/entropy": "mean per token, over the agent's completions, of the entropy of "
                         "the policy's next-token distribution (agents with an intrinsic "
                         "reward source)",
    "eval/<a>/<t>/acc": "held-out greedy accuracy of agent <a> on task family <t> (and "
                        "<t> = all); logged at step 0, every eval.every steps and at the end",
    "cohort/agreement": "share of prompts where all agents' majority votes agree "
                        "(abstentions count as disagreement)",
    "cohort/no_signal": "1 when no agent had a non-zero advantage this step (nothing trained)",
    "timing/rollout": "seconds generating, all agents",
    "timing/grading": "seconds extracting answers, voting and computing rewards",
    "timing/update": "seconds in log-prob passes and optimizer steps, all agents",
    "timing/intrinsic": "seconds of timing/grading spent in the no-grad pass of intrinsic "
                        "rewards (its log-probs are reused as the update's old log-probs)",
    "timing/step": "seconds for the whole step",
}


def documented(key: str) -> bool:
    """Whether a logged key matches a documented pattern (README table = this dict)."""
    import re

    for pattern in METRIC_DOCS:
        regex = "^" + re.escape(pattern).replace(re.escape("<a>"), "[^/]+").replace(
            re.escape("<t>"), "[^/]+") + "$"
        if re.match(regex, key):
            return True
    return False


class MetricsLogger:
    """Appends one JSON object per step; mirrors to TensorBoard if it is installed."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except Exception:  # tensorboard not installed: jsonl only
                self._tb = None

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps after ``step`` (a resumed run rewrites them)."""
        if not self.path.is_file():
            return
        if step == 0:  # a fresh run: nothing to keep
            self.path.unlink()
            return
        keep = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= step]
        tmp = self.path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(self.path)

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in record.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._tb is not None:
            for k, v in clean.items():
                if k != "step" and isinstance(v, (int, float)) and v is not None:
                    self._tb.add_scalar(k, v, clean["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def summary_line(record: dict[str, Any], agent_names: list[str]) -> str:
    """One line per step for the progress display."""
    parts = [f"step {record['step']}"]
    for a in agent_names:
        r = record.get(f"agent/{a}/reward/mean")
        acc = record.get(f"agent/{a}/acc")
        parse = record.get(f"agent/{a}/parse_rate")
        bits = [f"r={r:.2f}" if r is not None else "r=-"]
        if acc is not None:
            bits.append(f"acc={acc:.2f}")
        if parse is not None:
            bits.append(f"parse={parse:.2f}")
        parts.append(f"{a}: " + " ".join(bits))
    agree = record.get("cohort/agreement")
    if agree is not None:
        parts.append(f"agree={agree:.2f}")
    parts.append(f"{record.get('timing/step', 0):.1f}s")
    return " | ".join(parts)
