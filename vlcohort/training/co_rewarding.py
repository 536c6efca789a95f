"""Co-rewarding (Zhang et al., arXiv 2508.00410) as two reward sources, everything each
needs in this one module (``training/reward_sources.py`` says what a source declares).

* **II, the model side** (``ema_teacher_vote``, ``method: co_rewarding_ii`` or its alias
  ``co_rewarding``): each agent keeps an EMA teacher of its own trained weights
  (``training/ema.py``; :class:`TeacherState`, saved with every full checkpoint). At the
  start of a step the teacher moves towards the policy (:func:`update_teachers`); before
  the policies generate, it samples G completions of the same prompts from the policy
  module with its weights swapped in (:func:`teacher_generate`), and its vote
  (:func:`teacher_vote`, one all-gather every rank takes part in) labels its agent's
  rollouts. ``reward.ema.teacher_view=rephrased``: the teacher answers the rephrasing of
  the policy's question.
* **I, the data side** (``cross_view_vote``, ``method: co_rewarding_i``): the round holds
  every question as asked and in each agent's rephrasing (``agents.N.view``), and each
  wording's rollouts are rewarded by the agent's own vote on the other
  (``reward_sources.cross_view_partners``).

Both also measure their teacher against the agent's own vote (``teacher/agreement``,
``cross_view/agreement``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from vlcohort.answers.voting import Vote
from vlcohort.console import phase
from vlcohort.errors import RunError
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.seeds import TEACHER_SEED_OFFSET, step_rollout_seed
from vlcohort.training.checkpoint import CheckpointError
from vlcohort.training.ema import EMA_DEVICES, EMA_FILE, EMATeacher, cosine_alpha
from vlcohort.training.reward_sources import AgentState, RewardSource, Wordings, register
from vlcohort.training.rewards import Reward, RewardInputs, labelled, vote_agreement, vote_all
from vlcohort.typed_yaml import ConfigError, quote_value

#: ``reward.ema.teacher_view`` values: the teacher answers the policy's prompt, or its
#: other wording.
TEACHER_VIEWS = ("same", "rephrased")


def ema_rank_file(group_rank: int) -> str:
    """The EMA teacher file of one rank of an agent group (its own partition under ZeRO-3)."""
    return f"ema_teacher-rank{group_rank}.safetensors"


class TeacherState(AgentState):
    """An agent's EMA teacher as the state its source keeps: ``<agent>/ema_teacher.safetensors``
    in a checkpoint (an agent group: each rank's ``ema_teacher-rank<r>.safetensors``)."""

    def __init__(self, teacher: EMATeacher, device: str):
        self.teacher, self.device = teacher, device

    @staticmethod
    def _file(layout) -> str:
        distributed = layout is not None and layout.distributed
        return ema_rank_file(layout.group_rank) if distributed else EMA_FILE

    def save(self, folder: Path, layout) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.teacher.save(folder / self._file(layout))

    def load(self, folder: Path, layout) -> None:
        path = folder / self._file(layout)
        if not path.is_file():
            raise CheckpointError(
                f"{path}: missing; this checkpoint holds no EMA teacher for agent "
                f"{folder.name!r} (saved by a run of another method, or another launch mode). "
                "Start a new Co-rewarding-II run from its weights (agents.N.path=<that agent "
                "folder>) instead")
        try:
            self.teacher.load(path)
        except ValueError as e:
            raise CheckpointError(str(e)) from e

    def describe(self, agent: str) -> str:
        t = self.teacher
        return (f"EMA teacher of {agent}: {t.nbytes} bytes (float32 copy of "
                f"{sum(v.numel() for v in t.shadow.values())} trained weights on {self.device})")


def _teacher(agent) -> EMATeacher | None:
    state = getattr(agent, "source_state", None)
    return state.teacher if isinstance(state, TeacherState) else None


@register
class EMATeacherVote(RewardSource):
    """Co-rewarding-II: 1 if in the winning class of the agent's EMA teacher's vote."""

    name, methods, keeps_teacher = "ema_teacher_vote", ("co_rewarding_ii", "co_rewarding"), True
    metrics = {
        "agent/<a>/teacher/agreement": "co_rewarding_ii: share of prompts where the EMA "
                                       "teacher's vote and the agent's own vote are one "
                                       "answer class",
        "agent/<a>/teacher/alpha": "co_rewarding_ii: the policy's weight in this step's EMA "
                                   "update of the teacher (reward.ema.alpha_start -> "
                                   "alpha_end, half cosine)",
        "agent/<a>/teacher/bytes": "co_rewarding_ii: the EMA teacher's memory on this rank "
                                   "(float32 copy of the trained weights; a LoRA agent: the "
                                   "adapter), step 1 only",
        "timing/teacher": "co_rewarding_ii: seconds of the EMA teachers' sampling, weight "
                          "swaps, engine pushes and vote, all agents",
    }

    def check(self, cfg, agents: list[int]) -> None:
        e = cfg.reward.ema
        for key, allowed in (("device", EMA_DEVICES), ("teacher_view", TEACHER_VIEWS)):
            if getattr(e, key) not in allowed:
                raise ConfigError(f"reward.ema.{key}: {quote_value(getattr(e, key))} is not "
                                  "one of: " + ", ".join(allowed))
        for key in ("alpha_start", "alpha_end"):
            if not 0 < getattr(e, key) <= 1:
                raise ConfigError(f"reward.ema.{key}: the policy's weight in an EMA update must "
                                  f"be in (0, 1], got {getattr(e, key)} (published: 0.01 and 1e-5)")
        if e.every < 1:
            raise ConfigError(f"reward.ema.every: must be >= 1 (update the teacher every this "
                              f"many steps), got {e.every}")
        if cfg.grpo.kl_reference == "teacher":
            _all_agents_use(cfg, self.name, "grpo.kl_reference=teacher: the KL reference is "
                                            "each agent's EMA teacher")

    def wordings(self, cfg) -> Wordings:
        return Wordings(teacher_other=cfg.reward.ema.teacher_view == "rephrased",
                        why="reward.ema.teacher_view=rephrased has the teacher answer the "
                            "rephrasing")

    def new_state(self, agent, cfg) -> TeacherState:
        # after DeepSpeed: under ZeRO-3 the teacher keeps the EMA of this rank's partitions
        return TeacherState(EMATeacher(agent.model, cfg.reward.ema.device), cfg.reward.ema.device)

    def before_step(self, cohort, step: int, timing: dict[str, float]) -> dict[int, dict[str, float]]:
        timing.setdefault("timing/teacher", 0.0)
        return update_teachers(cohort, step)

    def round_inputs(self, cohort, step: int, prompts, plan, round_: int,
                     timing: dict[str, float]) -> dict[int, Any]:
        # before the policies generate: a vllm engine then ends on the policy's own
        # generate, asleep as always
        t0 = time.perf_counter()
        sampled = teacher_generate(cohort, step, prompts.teacher_rendered, plan, round_)
        votes = teacher_vote(cohort, sampled, plan, prompts.problems)  # {agent: [P]}
        timing["timing/teacher"] = timing.get("timing/teacher", 0.0) + time.perf_counter() - t0
        return votes

    def reward(self, x: RewardInputs) -> Reward:
        teachers = list(x.extra or ())
        if len(teachers) != len(x.problems):
            raise ValueError(f"ema_teacher_vote: {len(teachers)} teacher votes for "
                             f"{len(x.problems)} prompts; the agent's EMA teacher did not sample "
                             "this round (is reward.source set on an agent built without one?)")
        return labelled(x, teachers, {"teacher/agreement": vote_agreement(
            teachers, x.votes[x.agent], x.problems, x.trained, x.grader)})


@register
class CrossViewVote(RewardSource):
    """Co-rewarding-I: 1 if in the winning class of the agent's vote on the other wording."""

    name, methods = "cross_view_vote", ("co_rewarding_i",)
    metrics = {
        "agent/<a>/cross_view/agreement": "co_rewarding_i: share of prompts where the agent's "
                                          "votes on the question and on its rephrasing are "
                                          "one answer class",
    }

    def check(self, cfg, agents: list[int]) -> None:
        if cfg.grpo.view_loss == "sum":
            _all_agents_use(cfg, self.name, "grpo.view_loss=sum: the loss sums each wording's "
                                            "aggregation")

    def wordings(self, cfg) -> Wordings:
        return Wordings(both=True, why="cross_view_vote (method=co_rewarding_i) rewards each "
                                       "question by the vote on its rephrasing")

    def reward(self, x: RewardInputs) -> Reward:
        if len(x.partners) != len(x.problems):
            raise ValueError(f"cross_view_vote: {len(x.partners)} partner indices for "
                             f"{len(x.problems)} prompts; each prompt needs its rephrasing in "
                             "the round")
        own: Sequence[Vote] = x.votes[x.agent]
        teachers = [own[x.partners[b]] for b in range(len(x.problems))]
        got = labelled(x, teachers, {"cross_view/agreement": vote_agreement(
            teachers, own, x.problems, x.trained, x.grader)})
        # each prompt's wording, for grpo.view_loss=sum: an original's partner comes after it
        return replace(got, loss_groups=wording_groups(x.partners))


def wording_groups(partners: Sequence[int]) -> tuple[int, ...]:
    """[P] each prompt's wording in a round of both (``reward_sources.cross_view_partners``):
    0 the question as asked (its rephrasing comes after it), 1 the rephrasing.

    >>> wording_groups([2, 3, 0, 1])
    (0, 0, 1, 1)
    """
    return tuple(0 if p > b else 1 for b, p in enumerate(partners))


def _all_agents_use(cfg, name: str, why: str) -> None:
    """A cohort-wide setting ``why`` only ``name``'s agents can run: every agent's source
    must be it (a mixed cohort's other agents would be left without)."""
    from vlcohort.training.reward_sources import sources_of

    others = [cfg.agents[i].name for src, agents in sources_of(cfg).items() if src != name
              for i in agents]
    if others:
        raise ConfigError(f"{why}, and agent(s) {others} are rewarded by another source than "
                          f"{name}; give them reward_source={name} or unset the option")


# ------------------------------------------------------------------ the EMA teachers' step


def update_teachers(cohort, step: int) -> dict[int, dict[str, float]]:
    """Each local EMA teacher's update of step ``step`` (every ``reward.ema.every`` steps,
    before it samples; ``training/ema.py``), and its ``teacher/*`` metrics: the policy's
    weight ``alpha`` in the update (absent on a step without one) and, on step 1, the
    teacher's memory in bytes (logged once)."""
    e = cohort.cfg.reward.ema
    out: dict[int, dict[str, float]] = {}
    for i, agent in zip(cohort.local, cohort.agents):
        teacher = _teacher(agent)
        if teacher is None:
            continue
        m: dict[str, float] = {}
        if step % e.every == 0:
            m["teacher/alpha"] = cosine_alpha(step, cohort.cfg.run.steps, e.alpha_start, e.alpha_end)
            teacher.update(m["teacher/alpha"])
        if step == 1:
            m["teacher/bytes"] = float(teacher.nbytes)
        out[i] = m
    return out


def teacher_generate(cohort, step: int, rendered, plan, round_: int = 0) -> dict[int, Rollouts]:
    """Each local agent's EMA teacher samples G completions of each prompt this rank
    generates, with the policy's sampling settings and a seed of its own
    (``seeds.TEACHER_SEED_OFFSET``): its weights swapped into the policy module for the call
    and restored after it (``EMATeacher.swapped_in``, the engine's ``generate_with``), so
    no second model or engine exists. ``rendered`` [A][P]: what each teacher answers."""
    cfg = cohort.cfg
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    out: dict[int, Rollouts] = {}
    for i, agent in zip(cohort.local, cohort.agents):
        teacher = _teacher(agent)
        if teacher is None:
            continue
        seed = (step_rollout_seed(cfg.run.seed, step, i, cohort.layout.group_rank, round_)
                + TEACHER_SEED_OFFSET) % (2**31 - 1)
        # the teacher's (ZeRO-3: partitions) in first, then gathered for the engine
        weights = contextlib.ExitStack()
        weights.enter_context(teacher.swapped_in())
        weights.enter_context(agent.generation_context())
        note = f" (refill round {round_})" if round_ else ""
        with phase(cohort, f"EMA teacher of {agent.name} generates{note}"):
            out[i] = agent.engine.generate_with(
                weights, agent.model, [rendered[i][b] for b in plan.generated],
                cfg.rollout.rollouts_per_prompt, sampling, seed=seed)
    return out


def teacher_vote(cohort, sampled: dict[int, Rollouts], plan, problems) -> dict[int, list]:
    """Each EMA teacher's plurality vote [P] over its G answers to each prompt, by the run's
    answer kind, grader and vote rules (``vote_all``, as every other vote): its answers
    to the prompts each rank generated are gathered (one all-gather, every rank takes
    part) and voted where its agent trains. Returns {agent: [P] votes} for local agents."""
    cfg, G, P = cohort.cfg, cohort.cfg.rollout.rollouts_per_prompt, plan.n_prompts
    mine = cohort.answer_kind.answers(
        {i: r.texts_by_prompt() for i, r in sampled.items()},
        [problems[b] for b in plan.generated], cfg.reward.answer_style,
        workers=cfg.reward.code_workers or None) if sampled else {}  # {agent: [P_r][G]}
    local = {i: {"prompts": list(plan.generated), "answers": a} for i, a in mine.items()}
    answers: dict[int, list] = {}
    for piece in cohort.layout.gather(local, "the EMA teachers' answers"):
        for i, part in piece.items():
            row = answers.setdefault(i, [None] * P)
            for j, b in enumerate(part["prompts"]):
                row[b] = part["answers"][j]
    r = cfg.reward
    grader = cohort.answer_kind.grader(cohort.grader)
    out = {}
    for i in cohort.local:
        if i not in answers:
            continue
        if any(a is None or len(a) != G for a in answers[i]):
            raise RunError(f"the EMA teacher of agent {cohort.names[i]!r} lacks answers to "
                           "some prompts after the exchange")
        out[i] = vote_all(answers[i], problems, r.tie, r.min_share, grader, r.min_share_of)
    return out
