"""Collapse and divergence detection: a per-agent watch over the training dynamics.

Label-free RL fails in a few recognisable ways long before held-out accuracy says so
(measured on a tiny VLM and the synthetic shape tasks: with ungated peer votes and no KL
anchor both agents agreed on one constant answer within 40-125 RL steps, reward ~1 at
accuracy ~0.25 over four options). The
monitor reads each step's metrics record and, per agent, watches three signals:

``reward_collapse``
    ``agent/<a>/reward/group_std`` (mean within-group reward std) divided by its reference
    stays below ``monitor.collapse_threshold`` for ``monitor.collapse_patience`` steps in a
    row. The reference is the first step's value; when that is 0 (no group had differing
    rewards) the first non-zero value later becomes the reference. Until a reference
    exists, a zero std counts as below the threshold: an agent that never had a learning
    signal (e.g. made confidently wrong by warm-up) is warned about, not ignored. A
    collapsed std also follows a *successful* convergence (every sample agrees with a
    right label), so the warning says look at the accuracies, not that the run is broken.
``degeneration``
    ``agent/<a>/completion_len`` leaves [ref / ``length_factor``, ref x ``length_factor``]
    for ``monitor.length_patience`` steps in a row; ref is the first step's (first
    non-zero) mean completion length.
``divergence``
    ``agent/<a>/loss`` or ``agent/<a>/kl`` is non-finite, or its magnitude exceeds
    ``monitor.spike_factor`` x the median magnitude of its previous ``spike_window``
    finite values (checked once that many exist) *and* an absolute floor
    (``loss_floor`` / ``kl_floor``): the KL grows from exactly 0 at step 1, and the policy
    loss wanders around 0, so a ratio alone would fire on noise.

A warning is emitted on the step a condition *starts* to hold (after its patience), not
again while it persists; the flag ``monitor/<a>/<signal>`` is 1 on every step it holds.
All state (references, streaks, windows) is a small JSON dict that goes into the
checkpoint, so a resumed run warns exactly as the straight run does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Any, Sequence

import torch

from vlcohort.config_schema import MonitorConfig

#: What the monitor watches for (``monitor.stop_on`` names them; the config checks read it).
SIGNALS = ("reward_collapse", "degeneration", "divergence")
DIVERGENCE_KEYS = ("loss", "kl")  # agent/<a>/<key> values watched for spikes

#: What to try, per signal, in the message of a run stopped by ``monitor.stop_on``.
STOP_HINTS = {
    "reward_collapse": "Against a collapse: a vote gate (reward.min_share), a KL anchor "
                       "(grpo.kl_coef) or a lower learning rate; if the accuracies are high, "
                       "the run has converged and may simply end.",
    "degeneration": "Against degeneration: a KL anchor (grpo.kl_coef), a lower learning "
                    "rate, or check rollout.max_new_tokens and the answer instruction.",
    "divergence": "Against divergence: a lower learning rate, gradient clipping "
                  "(grpo.max_grad_norm) or a tighter IS cap (grpo.is_cap).",
}


# ============================================================================ pure functions


def group_reward_std(rewards: torch.Tensor) -> float:
    """Mean over prompts of the std of each prompt's G rewards (population std).

    ``rewards`` [B, G]. This is the learning signal GRPO sees: a group whose G rewards are
    equal gives zero advantages. It differs from the std over all B x G rewards, which
    stays high when every group is internally uniform but groups differ from each other.
    Prompts whose teacher abstained have all-zero rewards and so count as 0.
    """
    if rewards.numel() == 0:
        return 0.0
    return float(rewards.float().std(dim=1, unbiased=False).mean())  # [B] -> scalar


def distinct_answers(vote) -> int:
    """Distinct answers in one group: the vote's equivalence classes (the grader's), so
    "C" and "C. 45°" are one answer. Unparseable samples (None) are not an answer and are
    not counted; a group with nothing parsed has 0 (``parse_rate`` tells those apart)."""
    return len(vote.counts)


def answer_diversity(votes: Sequence) -> float:
    """Mean number of distinct answers per group over the step's prompts (see
    :func:`distinct_answers`); 1.0 means every group's parsed samples agree."""
    if not votes:
        return float("nan")
    return sum(distinct_answers(v) for v in votes) / len(votes)


def spike_ratio(value: float, history: Sequence[float]) -> float:
    """|value| over the median |value| of ``history`` (a robust running baseline: one
    earlier spike does not move a median); inf when that median is 0 and value is not."""
    base = median(abs(h) for h in history)
    if base == 0:
        return math.inf if value != 0 else 0.0
    return abs(value) / base


def _number(v: Any) -> float | None:
    """A record value as a float; None when missing (or stored as null)."""
    if v is None or isinstance(v, (list, str, dict)):
        return None
    return float(v)


# ============================================================================ the monitor


@dataclass(frozen=True)
class MonitorWarning:
    """One warning: which agent, which signal, at which step, and the sentence for people."""

    agent: str
    signal: str
    step: int
    message: str

    def __str__(self) -> str:
        return self.message


def _fresh_state() -> dict[str, Any]:
    return {"reward_ref": None, "reward_ref_step": None, "collapse_streak": 0,
            "length_ref": None, "length_ref_step": None, "length_streak": 0,
            "history": {k: [] for k in DIVERGENCE_KEYS}, "diverging": False}


class Monitor:
    """Per-agent collapse / degeneration / divergence watch over step records.

    ``check(record, step)`` updates the state from one step's record and returns the
    warnings that start at this step; ``flags`` then holds ``monitor/<a>/<signal>`` (1.0
    while a condition holds). ``state()`` / ``load_state()`` round-trip through JSON.
    """

    def __init__(self, cfg: MonitorConfig, agent_names: Sequence[str]):
        self.cfg = cfg
        self.names = list(agent_names)
        self.agents: dict[str, dict[str, Any]] = {n: _fresh_state() for n in self.names}
        self.flags: dict[str, float] = {}

    # ------------------------------------------------------------------ checkpointing

    def state(self) -> dict[str, Any]:
        """JSON-able state (references, streaks, windows) for the checkpoint."""
        import copy

        return {"agents": copy.deepcopy(self.agents)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`. Agents absent from it start fresh; windows are cut to
        the current ``spike_window`` (a resume may change the config)."""
        for name, st in (state or {}).get("agents", {}).items():
            if name not in self.agents:
                continue
            fresh = _fresh_state()
            fresh.update({k: v for k, v in st.items() if k in fresh})
            fresh["history"] = {k: list(fresh["history"].get(k, []))[-self.cfg.spike_window:]
                                for k in DIVERGENCE_KEYS}
            self.agents[name] = fresh

    # ------------------------------------------------------------------ the check

    def check(self, record: dict[str, Any], step: int) -> list[MonitorWarning]:
        """Update every agent's state from ``record`` (one step's metrics) and return the
        warnings that start at ``step``, in agent order then :data:`SIGNALS` order."""
        out: list[MonitorWarning] = []
        self.flags = {}
        for name in self.names:
            st, p = self.agents[name], f"agent/{name}/"
            for signal, fn in (("reward_collapse", self._collapse),
                               ("degeneration", self._degeneration),
                               ("divergence", self._divergence)):
                held, message = fn(st, record, p, name, step)
                self.flags[f"monitor/{name}/{signal}"] = 1.0 if held else 0.0
                if message:
                    out.append(MonitorWarning(name, signal, step, message))
        return out

    def annotate(self, record: dict[str, Any], step: int) -> list[MonitorWarning]:
        """:meth:`check`, then write the flags (and ``monitor/warnings`` when there are
        any) into ``record``, so they land in ``metrics.jsonl``."""
        found = self.check(record, step)
        record.update(self.flags)
        if found:
            record["monitor/warnings"] = [w.message for w in found]
        return found

    def _collapse(self, st, record, p, name, step) -> tuple[bool, str | None]:
        v = _number(record.get(p + "reward/group_std"))
        c = self.cfg
        if v is None or not math.isfinite(v):
            return st["collapse_streak"] >= c.collapse_patience, None
        if st["reward_ref"] is None and v > 0:
            st["reward_ref"], st["reward_ref_step"] = v, step
        ratio = v / st["reward_ref"] if st["reward_ref"] else 0.0  # no reference yet: v == 0
        st["collapse_streak"] = st["collapse_streak"] + 1 if ratio < c.collapse_threshold else 0
        n = st["collapse_streak"]
        if n != c.collapse_patience:
            return n >= c.collapse_patience, None
        if st["reward_ref"] is None:
            msg = (f"reward_collapse: agent {name} at step {step}: group reward std 0 in every "
                   f"step so far ({n} steps): no group has differing rewards, so nothing is "
                   "learned (every sample agrees, or no label)")
        else:
            msg = (f"reward_collapse: agent {name} at step {step}: group reward std {v:.3g} = "
                   f"{ratio:.2g} of its step-{st['reward_ref_step']} value "
                   f"{st['reward_ref']:.3g} for {n} steps (< {c.collapse_threshold:g}); "
                   "converged or collapsed: check pseudo-label and held-out accuracy")
        return True, msg

    def _degeneration(self, st, record, p, name, step) -> tuple[bool, str | None]:
        v = _number(record.get(p + "completion_len"))
        c = self.cfg
        if v is None or not math.isfinite(v):
            return st["length_streak"] >= c.length_patience, None
        if st["length_ref"] is None and v > 0:
            st["length_ref"], st["length_ref_step"] = v, step
        ref = st["length_ref"]
        outside = ref is not None and not (ref / c.length_factor <= v <= ref * c.length_factor)
        st["length_streak"] = st["length_streak"] + 1 if outside else 0
        n = st["length_streak"]
        if n != c.length_patience:
            return n >= c.length_patience, None
        how = "shrank" if v < ref else "grew"
        return True, (f"degeneration: agent {name} at step {step}: mean completion length "
                      f"{how} to {v:.1f} tokens = {v / ref:.2g}x its step-"
                      f"{st['length_ref_step']} value {ref:.1f} for {n} steps (allowed: "
                      f"1/{c.length_factor:g} to {c.length_factor:g}x)")

    def _divergence(self, st, record, p, name, step) -> tuple[bool, str | None]:
        c = self.cfg
        reasons = []
        for key in DIVERGENCE_KEYS:
            v = _number(record.get(p + key))
            if v is None:
                continue
            hist = st["history"][key]
            floor = c.loss_floor if key == "loss" else c.kl_floor
            if not math.isfinite(v):
                reasons.append(f"{key} is {v}")
                continue  # a non-finite value never enters the baseline
            if len(hist) >= c.spike_window and abs(v) > floor:
                ratio = spike_ratio(v, hist)
                if ratio > c.spike_factor:
                    reasons.append(f"{key} {v:.3g} is {ratio:.3g}x the median |{key}| "
                                   f"{median(abs(h) for h in hist):.3g} of the last "
                                   f"{len(hist)} steps (> {c.spike_factor:g}x, |{key}| > "
                                   f"{floor:g})")
            hist.append(v)
            del hist[:-c.spike_window]
        held = bool(reasons)
        started = held and not st["diverging"]
        st["diverging"] = held
        if not started:
            return held, None
        return True, f"divergence: agent {name} at step {step}: " + "; ".join(reasons)
