"""Metrics: one JSON line per step in ``metrics.jsonl``, mirrored to the trackers the config
asks for (TensorBoard, Weights & Biases: ``vlcohort/monitoring/trackers.py``), plots.

Keys are namespaced (docs/design.md, rule 7): ``agent/<name>/...``, ``cohort/...``,
``timing/...``. Their meanings are listed in :data:`METRIC_DOCS` (and the README).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from vlcohort import bounded_json, run_folder
from vlcohort.errors import json_error_text

# name pattern -> meaning. ``<a>`` is an agent name.
METRIC_DOCS: dict[str, str] = {
    "step": "RL step (1-based)",
    "agent/<a>/reward/mean": "mean reward over the agent's B x G rollouts (with the soft "
                             "overlong penalty when reward.overlong_buffer > 0; every "
                             "round's prompts under rollout.dynamic_sampling)",
    "agent/<a>/reward/std": "std of those rewards",
    "agent/<a>/reward/group_std": "mean over prompts of the std of each prompt's G rewards "
                                  "(the signal GRPO learns from; abstained prompts count 0)",
    "agent/<a>/answer_diversity": "mean number of distinct answers per group, by the "
                                  "grader's equivalence classes (unparseable answers are "
                                  "not counted; a group with none parsed counts 0)",
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
    "agent/<a>/dyn/dropped": "rollout.dynamic_sampling: the agent's groups of the step's "
                             "first B whose G rollouts all score alike on "
                             "rollout.dynamic_sampling_metric (acc: all right or all "
                             "wrong), dropped from its update",
    "agent/<a>/dyn/refilled": "rollout.dynamic_sampling: groups with a signal from the "
                              "step's extra generation rounds taken into the update",
    "agent/<a>/dyn/groups": "rollout.dynamic_sampling: groups with a signal in the update "
                            "(B - dropped + refilled; below B when the round cap was reached)",
    "agent/<a>/dyn/rounds": "rollout.dynamic_sampling: extra generation rounds the step ran "
                            "(cohort-wide: every agent generates in each; at most "
                            "rollout.dynamic_sampling_max_rounds)",
    "agent/<a>/loss": "policy loss (mean over the optimizer steps applied: PPO epochs x "
                      "mini-batches, less any skipped for a NaN / inf loss; absent when none "
                      "was applied)",
    "agent/<a>/clip_frac": "share of tokens where the clipped surrogate was active",
    "agent/<a>/clip_frac_low": "share of tokens clipped at the lower bound (ratio < 1 - "
                               "clip_low with A < 0)",
    "agent/<a>/clip_frac_high": "share of tokens clipped at the upper bound (ratio > 1 + "
                                "clip_high with A > 0)",
    "agent/<a>/ppo_kl": "mean over tokens of old - new log-prob in the update's forwards "
                        "(verl's ppo_kl: how far the optimizer steps moved the policy; 0 "
                        "with one step in all)",
    "agent/<a>/policy_entropy": "mean over the agent's completion tokens of the entropy of "
                                "softmax(logits / temperature), from the update's own first-"
                                "epoch forwards (every agent that updates)",
    "agent/<a>/kl": "mean KL estimate to the reference (when kl_coef > 0; with "
                    "kl_in_reward, the mean per-token k1 of the reward penalty)",
    "agent/<a>/is/mean": "mean importance weight policy/rollout over valid tokens",
    "agent/<a>/is/min": "smallest importance weight",
    "agent/<a>/is/max": "largest importance weight (before truncation)",
    "agent/<a>/is/applied_mean": "mean importance weight after truncation / masking / "
                                 "rejection / batch normalisation",
    "agent/<a>/is/nonfinite_tokens": "completion tokens whose rollout log-prob was NaN / inf "
                                     "(masked out of the loss)",
    "agent/<a>/is/frac_truncated": "share of tokens whose weight was truncated at the cap "
                                   "(or raised to grpo.is_min)",
    "agent/<a>/is/frac_masked": "share of tokens given weight 0 (token_mask / rejection "
                                "modes, or non-finite log-probs)",
    "agent/<a>/is/frac_rejected": "is_mode=rejection: share of tokens dropped from the loss "
                                  "and its normaliser",
    "agent/<a>/is/rollout_k3": "k3 divergence between rollout and policy log-probs",
    "agent/<a>/grad_norm": "gradient norm before clipping (mean over the optimizer steps "
                           "applied)",
    "agent/<a>/lr": "learning rate",
    "agent/<a>/skipped_updates": "optimizer steps skipped this step for a NaN / inf loss",
    "agent/<a>/self_certainty": "mean per token, over the agent's completions, of KL(U || p) of "
                                "the policy's next-token distribution (agents with an "
                                "intrinsic reward source)",
    "agent/<a>/entropy": "mean per token, over the agent's completions, of the entropy of "
                         "the policy's next-token distribution (agents with an intrinsic "
                         "reward source)",
    "eval/<a>/<t>/acc": "held-out accuracy of agent <a> on task family <t> (and <t> = "
                        "all): greedy, or the mean over eval.samples sampled answers; logged "
                        "at step 0, every eval.every steps and at the end",
    "eval/<a>/<t>/pass_at_n": "eval.samples = n > 1: share of held-out problems where any of "
                              "the n answers is right",
    "eval/<a>/<t>/maj_at_n": "eval.samples = n > 1: share of held-out problems where the "
                             "plurality answer of the n (grader's classes; a tie: wrong) is right",
    "eval/<a>/all/parse_rate": "share of held-out answers from which an answer was extracted",
    "eval/<a>/all/length": "mean held-out answer length, in tokens",
    "cohort/agreement": "share of prompts where all agents' majority votes agree "
                        "(abstentions count as disagreement)",
    "cohort/no_signal": "1 when no agent had a non-zero advantage this step (nothing "
                        "trained, except a KL loss term alone when kl_coef > 0)",
    "monitor/<a>/reward_collapse": "1 while agent <a>'s group reward std has stayed below "
                                   "monitor.collapse_threshold of its step-1 value for "
                                   "monitor.collapse_patience steps",
    "monitor/<a>/degeneration": "1 while agent <a>'s mean completion length has stayed "
                                "outside start / monitor.length_factor .. start x factor for "
                                "monitor.length_patience steps",
    "monitor/<a>/divergence": "1 when agent <a>'s loss or KL is non-finite or above "
                              "monitor.spike_factor x its median of the last "
                              "monitor.spike_window steps",
    "monitor/warnings": "the warnings that start at this step (agent, signal, step, values), "
                        "as sentences; present only on such steps",
    "timing/rollout": "seconds generating, all agents",
    "timing/grading": "seconds extracting answers, voting and computing rewards",
    "timing/update": "seconds in log-prob passes and optimizer steps, all agents",
    "timing/weight_push": "seconds pushing updated weights into the rollout engines, all agents "
                          "(part of timing/update; vllm: vLLM's in-place reload, hf: ~0)",
    "timing/intrinsic": "seconds of timing/grading spent in the no-grad pass of intrinsic "
                        "rewards (its log-probs are reused as the update's old log-probs)",
    "timing/step": "seconds for the whole step",
    "timing/eval": "seconds of the held-out evaluation logged with the step (not in timing/step)",
}

#: Self-play (``method: self_play``, ``vlcohort/recipes/selfplay.py``): one line per step, of either
#: phase; the training role also logs its ``agent/<a>/...`` update metrics.
METRIC_DOCS.update({
    "selfplay/phase": "0 on a challenger step (only the challenger trains), 1 on a solver step",
    "selfplay/question_validity": "share of the step's challenger completions holding a "
                                  "parseable <question> the solver can take (the rest get -1)",
    "selfplay/p_hat_mean": "mean p_hat of the valid questions (share of the solver's m answers "
                           "in the largest equivalence class)",
    "selfplay/p_hat_hist/<bin>": "share of the valid questions whose p_hat falls in bin <bin> "
                                 "(lo-hi; self_play.hist_bins equal bins over [0, 1])",
    "selfplay/in_band": "share of the valid questions whose p_hat lies in the curriculum band",
    "selfplay/repetition_penalty": "mean repetition penalty of the valid questions (share of "
                                   "the step's questions in their BLEU near-duplicate cluster)",
    "selfplay/repetition_share": "share of the valid questions that have a near-duplicate in "
                                 "the step (cluster of 2 or more)",
    "selfplay/question_len": "mean length of the valid questions, in whitespace words",
    "selfplay/distinct2": "distinct-2 of the valid questions: distinct word bigrams / all "
                          "bigrams (diversity)",
    "selfplay/solver/anchor_acc": "solver steps: share of the solver's answers to anchor "
                                  "(labelled pool) questions equal to gold",
    "selfplay/solver/trained_questions": "solver steps: generated questions the solver "
                                         "trained on (in the band, with a majority label)",
})


#: A reward source documents the keys it logs when it registers (``RewardSource.metrics``,
#: ``vlcohort/training/reward_sources.py``): Co-rewarding's ``teacher/*`` and
#: ``cross_view/agreement`` are in ``vlcohort/training/co_rewarding.py``.

#: CoMAS (``method: comas``, ``vlcohort/recipes/comas.py``): solution / critique / judge turns.
METRIC_DOCS.update({
    "agent/<a>/comas/solution_reward": "mean reward of the agent's solution turns with a "
                                       "readable score: (s - score_min) / (score_max - score_min)",
    "agent/<a>/comas/critique_reward": "mean reward of the agent's critique turns with a "
                                       "readable score: 1 - the solution's reward",
    "agent/<a>/comas/judge_reward": "mean reward of the agent's judge turns: 0 readable, "
                                    "comas.malformed_penalty not",
    "agent/<a>/comas/judge_parse_rate": "share of the agent's judge turns whose score could be read",
    "agent/<a>/comas/turns": "turns of the agent in its update (unreadable-score solutions "
                             "and critiques left out)",
    "comas/judge_parse_rate": "share of the step's judge turns whose score could be read",
    "comas/judge_unparsed": "judge turns of the step whose score could not be read (reward "
                            "comas.malformed_penalty; their solution and critique untrained)",
    "comas/judge_unparsed/<reason>": "the same by reason: no_score | several_scores | "
                                     "not_integer | out_of_range",
    "comas/score_mean": "mean readable score of the step",
    "comas/skipped_turns": "turns not generated because their prompt did not render (too "
                           "long, an image for a text-only agent), with the turns that "
                           "depend on them",
})

#: MAPoRL (``method: maporl``, ``vlcohort/recipes/maporl.py``): labelled multi-round discussions.
METRIC_DOCS.update({
    "agent/<a>/maporl/turns": "turns of the agent in its update (threads with a skipped turn "
                              "or no gold left out)",
    "agent/<a>/maporl/influence": "mean influence-aware part of the agent's turn rewards: its "
                                  "V and the discounted mean V of later rounds",
    "agent/<a>/maporl/incentive": "mean incentive part (maporl.alpha) of the agent's turn rewards",
    "agent/<a>/maporl/verifier_score": "mean learned-verifier score of the agent's answers "
                                       "(maporl.verifier set)",
    "agent/<a>/maporl/acc_first": "share of the agent's round-1 answers equal to gold",
    "agent/<a>/maporl/acc_last": "share of the agent's last-round answers equal to gold",
    "maporl/round/<r>/acc": "share of all agents' answers of round r equal to gold",
    "maporl/changed": "share of answers (round >= 2) whose correctness differs from the same "
                      "agent's answer of the round before",
    "maporl/skipped_turns": "turns not generated because their prompt did not render (too "
                            "long, an image for a text-only agent)",
    "maporl/untrained_threads": "discussions left out of the update: a turn not generated, or "
                                "a problem without gold",
})


def documented(key: str) -> bool:
    """Whether a logged key matches a documented pattern (README table = this dict)."""
    import re

    for pattern in METRIC_DOCS:
        regex = "^" + re.sub(r"<[a-z_]+>", "[^/]+", re.escape(pattern)) + "$"
        if re.match(regex, key):
            return True
    return False


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl`` and hands the same record to
    the trackers ``log`` (a ``LogConfig``) asks for.

    ``enabled``: False on every rank but the logging one of a distributed launch (nothing
    is written or tracked there). ``run_name`` / ``run_config``: the W&B run's default name
    and its config (the resolved config as a dict). The tracker packages are imported here
    (a missing one is a :class:`~vlcohort.monitoring.trackers.TrackerError` now); the
    trackers start in :meth:`begin`, once the step the run continues from is known."""

    def __init__(self, run_dir: str | Path, log: Any = None, enabled: bool = True,
                 run_name: str | None = None, run_config: dict[str, Any] | None = None):
        from vlcohort.monitoring.trackers import check_trackers

        self.path = Path(run_dir) / "metrics.jsonl"
        self.enabled = enabled
        self.trackers: list = []
        self._log_cfg = log
        self._run_name = run_name or Path(run_dir).name
        self._run_config = run_config
        self._started = False
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if log is not None:
            check_trackers(log)

    def begin(self, step: int) -> None:
        """The run continues after ``step`` (0: a fresh run): drop later lines of
        ``metrics.jsonl`` and start the trackers there (each says where it logs)."""
        self.truncate_after(step)
        self._start_trackers(step)
        for tracker in self.trackers:
            where = getattr(tracker, "where", None)
            if where is not None:
                print(where())

    def _start_trackers(self, step: int) -> None:
        if self._started or not self.enabled or self._log_cfg is None:
            return
        from vlcohort.console import verbose
        from vlcohort.monitoring.trackers import TRACKER_STATE, start_trackers

        trackers_in(self.path.parent, TRACKER_STATE)
        self.trackers = start_trackers(self._log_cfg, self.path.parent, self._run_name,
                                       self._run_config, start_step=step, quiet=not verbose())
        self._started = True

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps after ``step`` (a resumed run rewrites them). The file is
        rewritten through a temporary without following links (``vlcohort/run_folder.py``)."""
        if not self.enabled:
            return
        if step == 0:  # a fresh run: nothing to keep (a link there goes, not its target)
            self.path.unlink(missing_ok=True)
            return
        if not run_folder.refuse_link(self.path).is_file():
            return
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        keep = []
        for i, line in enumerate(lines):
            try:
                rec = bounded_json.loads(line)
            except bounded_json.BadJSON:
                if i == len(lines) - 1:  # a run killed mid-write: the cut last line goes
                    break
                raise MetricsFileError(f"{self.path}, line {i + 1}: not valid JSON; fix or "
                                       "delete that line, then resume") from None
            if rec["step"] <= step:
                keep.append(line)
        run_folder.write_text(self.path, "".join(line + "\n" for line in keep))

    def log(self, record: dict[str, Any]) -> None:
        """One step's record: a line of ``metrics.jsonl``, then the same numbers to every
        tracker (x axis: the record's ``step``)."""
        if not self.enabled:
            return
        clean = {k: _jsonable(v) for k, v in record.items()}
        with run_folder.open_append(self.path) as f:
            f.write(json.dumps(clean) + "\n")
        self._start_trackers(0)  # a caller that never called begin(): a fresh run
        if self.trackers:
            from vlcohort.monitoring.trackers import scalars

            values = scalars(clean)
            for tracker in self.trackers:
                tracker.log(values, int(clean["step"]))

    def close(self, failed: bool = False) -> None:
        """Finish every tracker (W&B marks its run finished, or failed when ``failed``);
        safe to call twice (the second call does nothing)."""
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(failed=failed)


def trackers_in(run_dir: Path, state_file: str) -> None:
    """What the trackers write in a run folder, made safe before they start: TensorBoard
    and W&B write into ``tensorboard/`` and ``wandb/`` through their own code, which
    follows links, so a link planted there is refused; a link planted at the temporary of
    the tracker state file is removed (the link, not its target)."""
    for name in ("tensorboard", "wandb"):
        run_folder.refuse_link(run_dir / name)
    tmp = run_dir / f".{state_file}.tmp"
    if tmp.is_symlink():
        tmp.unlink()


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsFileError(ValueError):
    """A ``metrics.jsonl`` that cannot be read; the message names the file and line."""


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, one JSON object with a ``step`` per line."""
    path = Path(path)
    records = []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise MetricsFileError(f"{path}: not a text file; expected a metrics.jsonl") from None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = bounded_json.loads(line)
        except bounded_json.BadJSON as e:
            why = f"not valid JSON ({json_error_text(e.syntax)})" if e.syntax else str(e)
            raise MetricsFileError(
                f"{path}, line {i}: {why}; a run killed mid-write can leave a cut last "
                "line: delete that line") from None
        if not isinstance(rec, dict) or "step" not in rec:
            raise MetricsFileError(f"{path}, line {i}: expected a JSON object with a "
                                   f"\"step\" key, got {line[:80]!r}")
        records.append(rec)
    return records


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def summary_line(record: dict[str, Any], agent_names: list[str]) -> str:
    """One line per step for the progress display: each agent's reward, rollout accuracy
    and parse rate, the cohort's agreement, the step's seconds. A value the step has not
    (no gold, one agent: no agreement) is left out rather than shown as nan."""
    parts = [f"step {record['step']}"]
    for a in agent_names:
        r = record.get(f"agent/{a}/reward/mean")
        bits = [f"r={r:.2f}" if _finite(r) else "r=-"]
        for key, label in (("acc", "acc"), ("parse_rate", "parse")):
            v = record.get(f"agent/{a}/{key}")
            if _finite(v):
                bits.append(f"{label}={v:.2f}")
        held_out = record.get(f"eval/{a}/all/acc")  # steps with a held-out evaluation
        if _finite(held_out):
            bits.append(f"eval={held_out:.2f}")
        parts.append(f"{a}: " + " ".join(bits))
    agree = record.get("cohort/agreement")
    if _finite(agree):
        parts.append(f"agree={agree:.2f}")
    parts.append(f"{record.get('timing/step') or 0:.1f}s")
    if _finite(record.get("timing/eval")):
        parts[-1] += f" + eval {record['timing/eval']:.1f}s"
    return " | ".join(parts)


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if _finite(v)]
    return sum(values) / len(values) if values else None


def _first_last(records: list[dict[str, Any]], key: str, window: int) -> str:
    """``first -> last``: the key's mean over the first and the last ``window`` records
    that have it (one value: just it; none: ``-``)."""
    values = [r[key] for r in records if _finite(r.get(key))]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    k = min(window, len(values) // 2) or 1
    return f"{_mean(values[:k]):.2f} -> {_mean(values[-k:]):.2f}"


def final_summary(records: list[dict[str, Any]], agent_names: list[str],
                  window: int = 5) -> list[str]:
    """The end-of-run summary: one row per agent (reward, rollout accuracy, parse rate as
    the mean of the first -> last ``window`` steps; held-out accuracy at the first -> last
    evaluation), the cohort's agreement, the mean step time. A + 4 lines: it fits one
    screen whatever the run's length."""
    steps = [r for r in records if r.get("step", 0) > 0
             and any(f"agent/{a}/reward/mean" in r for a in agent_names)]
    if not steps:
        return []
    step_s = _mean([r.get("timing/step") for r in steps])
    lines = [f"summary, steps {steps[0]['step']}..{steps[-1]['step']}: first -> last (means of "
             f"up to {window} steps; held-out: first -> last evaluation)"
             + (f", {step_s:.1f}s per step" if step_s is not None else "")]
    cols = ("reward", "rollout acc", "parse rate", "held-out acc")
    name_w = max(5, *(len(a) for a in agent_names))
    lines.append(f"  {'agent':<{name_w}}  " + "  ".join(f"{c:<14}" for c in cols).rstrip())
    for a in agent_names:
        cells = [_first_last(steps, f"agent/{a}/reward/mean", window),
                 _first_last(steps, f"agent/{a}/acc", window),
                 _first_last(steps, f"agent/{a}/parse_rate", window),
                 _first_last(records, f"eval/{a}/all/acc", 1)]
        lines.append(f"  {a:<{name_w}}  " + "  ".join(f"{c:<14}" for c in cells).rstrip())
    agree = _first_last(steps, "cohort/agreement", window)
    if agree != "-":
        lines.append(f"  cohort agreement {agree}")
    return lines


#: The held-out scores of one agent that are not per task family (``eval/<a>/all/<key>``).
HELD_OUT_OVERALL = ("acc", "pass_at_n", "maj_at_n", "parse_rate", "length")


def held_out_tasks(records: list[dict[str, Any]], agent_names: list[str]) -> list[str]:
    """The task families the records' held-out scores name (``eval/<a>/<t>/acc``, t not
    ``all``), in first-seen order; none when the held-out problems carry no family."""
    tasks: dict[str, None] = {}
    for rec in records:
        for a in agent_names:
            prefix = f"eval/{a}/"
            for key in rec:
                if key.startswith(prefix) and key.endswith("/acc"):
                    task = key[len(prefix):-len("/acc")]
                    if task != "all":
                        tasks.setdefault(task)
    return list(tasks)


def held_out_table(record: dict[str, Any], agent_names: list[str],
                   tasks: list[str]) -> dict[str, dict[str, float]]:
    """``{agent: {task: acc, ..., "all": acc, "parse_rate": ..., "length": ...}}`` (and
    ``pass_at_n`` / ``maj_at_n`` when sampled) from one evaluation's record; a score the
    record lacks is left out."""
    table = {}
    for a in agent_names:
        row = {t: record[f"eval/{a}/{t}/acc"] for t in tasks if f"eval/{a}/{t}/acc" in record}
        for key in HELD_OUT_OVERALL:
            if f"eval/{a}/all/{key}" in record:
                row["all" if key == "acc" else key] = record[f"eval/{a}/all/{key}"]
        table[a] = row
    return table


def held_out_summary(records: list[dict[str, Any]], agent_names: list[str]) -> dict[str, Any]:
    """The held-out evaluations of a run, for its ``summary.json``: the families, and the
    first and last evaluation's :func:`held_out_table` with their steps (empty: none)."""
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    if not evals:
        return {}
    tasks = held_out_tasks(evals, agent_names)
    return {"tasks": tasks,
            "first": {"step": evals[0]["step"], **held_out_table(evals[0], agent_names, tasks)},
            "last": {"step": evals[-1]["step"], **held_out_table(evals[-1], agent_names, tasks)}}
