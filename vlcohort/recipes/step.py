"""One cohort step as a straight pipeline of phases, each returning immutable records
(:class:`Generated`, :class:`Answered`, :class:`Rewarded`, gathered in one :class:`Round`),
and the :class:`Run` state it reads (built by ``cohort.setup``).

    next_prompts      P problems every agent can render; each agent's rendering   rendered [P]
    generate          local agents sample G completions per prompt              rollouts [P_r x G]
    exchange_answers  answers cross between agents (one all-gather)              answers [P][G]
    vote              every agent's own plurality vote, on every rank           votes [P]
    reward            local agents: teacher labels / intrinsic rewards, GRPO    rewards, advantages [P, G]
    dynamic_sampling  (rollout.dynamic_sampling) groups of one outcome dropped;  P grows by P per round
                      rounds of the five stages above refill each agent up to B groups
    update            local agents: one GRPO update each, then the LR schedule  update metrics
    step_record       per-agent and cohort metrics, one record on every rank

Each agent's reward source (``training/reward_sources.py``) takes part through its hooks,
never by name: its work at the start of a step (``before_step``: Co-rewarding-II's EMA
update), its extra rollouts per round before the policies generate (``round_inputs``:
the EMA teacher's samples and vote, whose result its ``reward`` reads), and the prompts
it needs (``wordings``: with ``both``, ``next_prompts`` puts each problem in the round
twice, as asked and in each agent's rephrasing, P = 2B, paired by
``reward_sources.cross_view_partners``; Co-rewarding-I, ``training/co_rewarding.py``).

All generation and answer extraction finishes before any agent updates, so a step's
rewards never depend on a half-updated peer (``docs/design.md``, the cohort step). P = B
prompts (2B where a source needs both wordings), or A x B with ``data.decouple``; which
prompts a rank generates and an agent trains on is the distributed layer's
:class:`~vlcohort.training.distributed.StepPlan`.
What an answer is (math, code) is the run's :class:`~vlcohort.training.rewards.AnswerKind`.
The phases that can take minutes (rendering, each agent's generation, answers and rewards,
each agent's update) report themselves to the driver's progress line (``driver.phase``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from vlcohort.answers.grading import Grader
from vlcohort.config_schema import Config, agent_reward_source
from vlcohort.data.problems import Problem
from vlcohort.data.stream import ProblemStream
from vlcohort.data.views import view_of
from vlcohort.monitoring.metrics import MetricsLogger
from vlcohort.monitoring.monitor import Monitor, answer_diversity, group_reward_std
from vlcohort.processors import ProblemInputError, RenderedPrompt
from vlcohort.recipes.driver import TrainingError, phase, step_schedules
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.seeds import step_rollout_seed
from vlcohort.training import grpo, reward_sources
from vlcohort.training.agent import Agent
from vlcohort.training.distributed import Layout, StepPlan, step_plan
from vlcohort.training.reward_sources import cross_view_partners, sources_of, wordings_of
from vlcohort.training.rewards import (
    AnswerKind,
    Reward,
    RewardInputs,
    answer_kind,
    gold_match,
    vote_all,
    with_overlong_penalty,
)
from vlcohort.training.update import kl_reward, token_stats, trains_without_advantage, update_agent


@dataclass
class Run:
    """One training run. ``agents`` are the agents trained in *this process* (all of them in
    a single process; the rank's own agent in an agent group); ``adapters`` and ``names``
    cover the whole cohort, so every rank renders and votes for every agent."""

    cfg: Config
    dir: Path
    agents: list[Agent]
    stream: ProblemStream
    logger: MetricsLogger
    grader: Grader
    layout: Layout  # one process: a Layout of W = 1
    adapters: list = field(default_factory=list)  # [A] every agent's adapter (rendering)
    local: list[int] = field(default_factory=list)  # cohort indices of ``agents``
    eval_problems: list[Problem] = field(default_factory=list)
    shards: list[ProblemStream] = field(default_factory=list)  # data.decouple: [A]
    step: int = 0  # last completed step
    bad_steps_in_row: int = 0
    skipped_records: dict[str, int] = field(default_factory=dict)
    no_signal_steps: int = 0
    monitor: Monitor | None = None  # collapse / divergence watch (monitor.enable)
    owns_layout: bool = True  # shut the process groups down at cleanup
    progress: Any = None  # the driver's Progress while its loop runs: where phase() reports

    @property
    def names(self) -> list[str]:
        return [mc.name for mc in self.cfg.agents]

    @property
    def talks(self) -> bool:
        """Whether this process prints and logs (the layout's logger rank)."""
        return self.layout.is_logger

    @property
    def answer_kind(self) -> AnswerKind:
        return answer_kind(self.cfg.reward.answer_kind)

    def cohort(self) -> Cohort:
        """What the step's phases read of the run, as one frozen view."""
        return Cohort(cfg=self.cfg, layout=self.layout, agents=tuple(self.agents),
                      local=tuple(self.local), adapters=tuple(self.adapters),
                      names=tuple(self.names), grader=self.grader,
                      streams=tuple(self.shards or [self.stream]), progress=self.progress)


@dataclass(frozen=True, eq=False)
class Cohort:
    """What a step's phases read, fixed for the step: the config, the process layout, the
    agents trained here (``local`` their cohort indices), every agent's adapter and name,
    the grader, the problem streams (one, or one per agent under ``data.decouple``) and the
    driver's progress line (``console.phase``). Nothing here is written by a phase: each
    phase takes this and the records it reads, and returns the records it makes; the run's
    counters are updated by :func:`train_step` alone. The agents' models and optimizers
    and the streams' positions are the state the phases act on, as a step must."""

    cfg: Config
    layout: Layout
    agents: tuple[Agent, ...]
    local: tuple[int, ...]
    adapters: tuple
    names: tuple[str, ...]
    grader: Grader
    streams: tuple[ProblemStream, ...]
    progress: Any = None

    @property
    def talks(self) -> bool:
        """Whether this process prints and logs (the layout's logger rank)."""
        return self.layout.is_logger

    @property
    def answer_kind(self) -> AnswerKind:
        return answer_kind(self.cfg.reward.answer_kind)


# ------------------------------------------------------------------ the phases' records


@dataclass(frozen=True)
class Generated:
    """One agent's prompts of a round: its rendering of every prompt [P] and, for an agent
    trained in this process, this rank's rollouts [P_r x G] (rows in ``plan.generated``
    order; None for an agent trained elsewhere)."""

    rendered: tuple[RenderedPrompt, ...]  # [P]
    rollouts: Rollouts | None = None  # [P_r x G]

    def concat(self, other: Generated) -> Generated:
        rollouts = None if self.rollouts is None else self.rollouts.concat(other.rollouts)
        return Generated(self.rendered + other.rendered, rollouts)


@dataclass(frozen=True, eq=False)
class Answered:
    """One agent's answers, held by every rank for every agent: answers [P][G] (None:
    unparseable), completion lengths [P x G] in tokens, finished flags [P x G] (stopped
    before ``max_new_tokens``) and its own plurality votes [P] (empty before ``vote``)."""

    answers: tuple  # [P][G]
    lengths: torch.Tensor  # [P x G]
    finished: tuple[bool, ...]  # [P x G]
    votes: tuple = ()  # [P]

    def concat(self, other: Answered) -> Answered:
        return Answered(self.answers + other.answers, torch.cat([self.lengths, other.lengths]),
                        self.finished + other.finished, self.votes + other.votes)


@dataclass(frozen=True)
class Selection:
    """What a local agent trains on: its prompts whose rollouts this rank holds (indices
    into the round's P), their rollouts [n x G] and renderings [n]."""

    prompts: tuple[int, ...]  # [n]
    rollouts: Rollouts  # [n x G]
    rendered: tuple[RenderedPrompt, ...]  # [n]

    @classmethod
    def of(cls, gen: Generated, plan: StepPlan, prompts: list[int]) -> Selection:
        """The selection of ``prompts`` from an agent's round ``gen`` under ``plan``."""
        same = list(prompts) == list(plan.generated)
        rollouts = gen.rollouts if same else gen.rollouts.select_prompts(plan.positions(list(prompts)))
        return cls(tuple(prompts), rollouts, tuple(gen.rendered[b] for b in prompts))

    def concat(self, other: Selection, offset: int) -> Selection:
        """``self`` then ``other``, whose prompts are numbered after the first ``offset``."""
        return Selection(self.prompts + tuple(offset + b for b in other.prompts),
                         self.rollouts.concat(other.rollouts), self.rendered + other.rendered)


@dataclass(frozen=True, eq=False)
class Rewarded:
    """A local agent's rewards of a round: what it trains on, its reward source's
    :class:`~vlcohort.training.rewards.Reward` (labels [P], scored rewards [P, G], the old
    log-probs an earlier pass made for ``selection``, metrics), the group-normalised
    advantages [P, G], the seconds of an intrinsic source's no-grad pass (None: none), and
    the two other rewards dynamic sampling can filter on: ``shaped`` [P, G], the rewards the
    advantages were normalised from (scored, less a reward-side KL penalty; None: the
    scored rewards), and ``task`` [P, G], the source's own verdict before any shaping
    (correctness against the label; an intrinsic source's reward; None: correctness)."""

    selection: Selection
    reward: Reward
    advantages: torch.Tensor  # [P, G]
    pass_s: float | None = None
    shaped: torch.Tensor | None = None  # [P, G]
    task: torch.Tensor | None = None  # [P, G]

    @property
    def final_rewards(self) -> torch.Tensor:
        """[P, G] the rewards the advantages come from (verl's ``seq_final_reward``)."""
        return self.reward.scored.rewards if self.shaped is None else self.shaped

    @property
    def task_rewards(self) -> torch.Tensor:
        """[P, G] the source's verdict before the format term, the overlong penalty and a
        reward-side KL (verl's ``acc``)."""
        return self.reward.scored.correct.float() if self.task is None else self.task

    def concat(self, other: Rewarded, offset: int) -> Rewarded:
        return Rewarded(self.selection.concat(other.selection, offset),
                        self.reward.concat(other.reward),
                        torch.cat([self.advantages, other.advantages]), self.pass_s,
                        torch.cat([self.final_rewards, other.final_rewards]),
                        torch.cat([self.task_rewards, other.task_rewards]))


@dataclass(frozen=True, eq=False)
class Round:
    """The first five phases over P prompts: the problems [P], the plan, every agent's
    :class:`Generated` and :class:`Answered` [A], and the local agents' :class:`Rewarded`
    by cohort index. A dynamic-sampling refill is another round, joined by :meth:`concat`."""

    problems: tuple[Problem, ...]  # [P]
    plan: StepPlan
    generated: tuple[Generated, ...]  # [A]
    answered: tuple[Answered, ...]  # [A]
    rewarded: dict[int, Rewarded]  # local agents
    skipped: dict[str, int] = field(default_factory=dict)  # records skipped to fill it, by reason

    def concat(self, other: Round) -> Round:
        """``self`` then ``other``: P + P' prompts, ``other``'s numbered after ``self``'s."""
        off = self.plan.n_prompts

        def shift(prompts) -> tuple[int, ...]:
            return tuple(off + b for b in prompts)

        plan = StepPlan(n_prompts=off + other.plan.n_prompts,
                        generated=self.plan.generated + shift(other.plan.generated),
                        owned=tuple(own + shift(more)
                                    for own, more in zip(self.plan.owned, other.plan.owned)))
        return Round(self.problems + other.problems, plan,
                     tuple(a.concat(b) for a, b in zip(self.generated, other.generated)),
                     tuple(a.concat(b) for a, b in zip(self.answered, other.answered)),
                     {i: r.concat(other.rewarded[i], off) for i, r in self.rewarded.items()},
                     merged_counts(self.skipped, other.skipped))


@dataclass(frozen=True)
class Updated:
    """A local agent's update: whether its own prompts carried a signal (over its agent
    group) and the update's metrics (loss, lr, ...)."""

    has_signal: bool
    metrics: dict


# ------------------------------------------------------------------------------ the step


def train_step(run: Run, step: int) -> dict[str, Any]:
    """One cohort step (module docstring): P prompts -> every agent's rollouts, answers and
    votes -> each local agent's rewards and update -> the step's metrics record, the same
    on every rank."""
    t_step = time.perf_counter()
    cohort = run.cohort()
    timing = {"timing/rollout": 0.0, "timing/grading": 0.0}
    started: dict[int, dict[str, float]] = {}  # each source's start of the step, by agent
    for name in sources_of(run.cfg):
        for i, m in reward_sources.source(name).before_step(cohort, step, timing).items():
            started[i] = {**started.get(i, {}), **m}
    batch = sample_round(cohort, step, 0, timing)  # next_prompts .. reward
    dyn: dict[int, dict[str, int]] = {}
    if run.cfg.rollout.dynamic_sampling:  # DAPO: flat groups out, refill rounds in
        batch, dyn = dynamic_sampling(cohort, step, batch, timing)
    for i, m in started.items():
        dyn[i] = {**dyn.get(i, {}), **m}
    t0 = time.perf_counter()
    updated, timing["timing/weight_push"] = update(cohort, batch)
    timing["timing/update"] = time.perf_counter() - t0
    passes = [r.pass_s for r in batch.rewarded.values() if r.pass_s is not None]
    if passes:
        timing["timing/intrinsic"] = sum(passes)
    record = step_record(cohort, step, batch, updated, dyn, timing, t_step)
    # the run's counters, written here only
    run.skipped_records = merged_counts(run.skipped_records, batch.skipped)
    if record["cohort/no_signal"]:
        run.no_signal_steps += 1
    return record


def take_prompts(run: Run) -> Prompts:
    """:func:`next_prompts` for a recipe holding the run (CoMAS, MAPoRL): the records it
    skipped are counted in the run's ``skipped_records``."""
    prompts = next_prompts(run.cohort())
    run.skipped_records = merged_counts(run.skipped_records, prompts.skipped)
    return prompts


def merged_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Counts by reason, ``a`` plus ``b`` (a new dict)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def sample_round(cohort: Cohort, step: int, round_: int, timing: dict[str, float]) -> Round:
    """The first five phases on the stream's next P prompts: next_prompts -> generate ->
    exchange_answers -> vote -> reward; their seconds are added to ``timing``'s rollout
    and grading."""
    with phase(cohort, "next prompts" + _round_note(round_)):
        prompts = next_prompts(cohort)
    problems, rendered = prompts.problems, prompts.rendered  # [P], [A][P]
    plan = step_plan(cohort.layout, len(problems), cohort.cfg.data.decouple)
    extras: dict[int, Any] = {}  # each source's extra rollouts of the round, by local agent
    for name in sources_of(cohort.cfg):  # every rank: a source's work may hold collectives
        extras.update(reward_sources.source(name).round_inputs(cohort, step, prompts, plan,
                                                               round_, timing))
    t0 = time.perf_counter()
    generated = generate(cohort, step, rendered, plan, round_)
    timing["timing/rollout"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    with phase(cohort, "answers, votes and rewards" + _round_note(round_)):
        answered = vote(cohort, exchange_answers(cohort, generated, plan, problems), problems)
        rewarded = reward(cohort, generated, answered, problems, plan, extras, prompts.partners)
    timing["timing/grading"] += time.perf_counter() - t0
    return Round(tuple(problems), plan, tuple(generated), tuple(answered), rewarded,
                 dict(prompts.skipped))


def _round_note(round_: int) -> str:
    """A phase's label suffix naming a dynamic-sampling refill round (none for the first)."""
    return f" (refill round {round_})" if round_ else ""


@dataclass(frozen=True)
class Prompts:
    """A round's prompts: the problems [P], each agent's rendering of them for its policy
    [A][P] and for a source's extra rollouts [A][P] (``teacher_rendered``: the same objects
    unless those answer the other wording), and each prompt's other wording [P] where a
    round holds both (empty otherwise)."""

    problems: list[Problem]  # [P]
    rendered: list[list[RenderedPrompt]]  # [A][P]
    teacher_rendered: list[list[RenderedPrompt]]  # [A][P]
    partners: tuple[int, ...] = ()  # [P]
    skipped: dict[str, int] = field(default_factory=dict)  # records that failed to render, by reason


def next_prompts(cohort: Cohort) -> Prompts:
    """P problems that every agent can render, and each agent's rendering of them [A][P].

    A problem that fails to render for any agent (missing or corrupt image, placeholder
    mismatch, empty question, a prompt over ``data.max_prompt_tokens``) is skipped for all
    agents, counted by reason (``Prompts.skipped``), and replaced.
    Each agent renders its own view of the problem (``agents.N.view``; the same text by
    default); the problems, options and gold are shared, so votes compare like with like.
    With ``data.decouple`` the P = A x B problems come B from each agent's shard, in agent
    order (prompt b is owned by agent b // B); every agent answers all of them.

    Where a source needs both wordings (``Wordings.both``: Co-rewarding-I), each problem is
    rendered as asked and in each agent's rephrasing (``agents.N.view``), and the round
    holds the B originals then the B rephrasings, P = 2B, paired by
    ``reward_sources.cross_view_partners``. Where a source's extra rollouts answer the
    other wording (``Wordings.teacher_other``: ``reward.ema.teacher_view=rephrased``), the
    policy answers the original and those the rephrasing. A problem either wording fails
    to render is skipped.
    """
    B = cohort.cfg.rollout.prompts_per_step
    w = wordings_of(cohort.cfg)
    cross, teacher_other = w.both, w.teacher_other
    problems: list[Problem] = []
    rendered: list[list[RenderedPrompt]] = [[] for _ in cohort.names]
    rephrased: list[list[RenderedPrompt]] = [[] for _ in cohort.names]
    sources = cohort.streams
    skipped: dict[str, int] = {}
    attempts = 0
    while len(problems) < B * len(sources):
        stream = sources[len(problems) // B]
        attempts += 1
        if attempts > 10 * B * len(sources) + sum(len(s.problems) for s in sources):
            raise TrainingError("could not find renderable problems: every record fails; "
                                f"skipped in this round: {skipped}")
        p = stream.next()
        pr, max_tokens = cohort.cfg.prompt, cohort.cfg.data.max_prompt_tokens
        try:
            if cross or teacher_other:  # the question as asked, and its rephrasings
                r = [ad.render(p, pr.system_prompt, pr.instruction, max_tokens=max_tokens)
                     for ad in cohort.adapters]
                v = [ad.render(view_of(p, name), pr.system_prompt, pr.instruction,
                               max_tokens=max_tokens)
                     for ad, name in zip(cohort.adapters, cohort.names)]
            else:
                r = [ad.render(view_of(p, name), pr.system_prompt, pr.instruction,
                               max_tokens=max_tokens)
                     for ad, name in zip(cohort.adapters, cohort.names)]
                v = r
        except ProblemInputError as e:
            reason = getattr(e, "reason", type(e).__name__)
            skipped[reason] = skipped.get(reason, 0) + 1
            if cohort.talks:
                print(f"skipped record: {e}", file=sys.stderr)
            continue
        problems.append(p)
        for mine, ra in zip(rendered, r):
            mine.append(ra)
        for mine, va in zip(rephrased, v):
            mine.append(va)
    if cross:  # per block of B (one per data shard): B originals, then their B rephrasings
        n = len(sources)
        blocks = [range(k * B, (k + 1) * B) for k in range(n)]
        problems = [problems[b] for blk in blocks for b in (*blk, *blk)]  # [2B x n]
        rendered = [[x for blk in blocks for x in ([ra[b] for b in blk] + [va[b] for b in blk])]
                    for ra, va in zip(rendered, rephrased)]  # [A][2B x n]
        partners = tuple(cross_view_partners(len(problems), n))
        # the EMA teacher (teacher_view=rephrased) answers each prompt's other wording
        teacher = ([[ra[partners[b]] for b in range(len(problems))] for ra in rendered]
                   if teacher_other else rendered)
        return Prompts(problems, rendered, teacher, partners, skipped)
    return Prompts(problems, rendered, rephrased if teacher_other else rendered, (), skipped)


def generate(cohort: Cohort, step: int, rendered: list[list[RenderedPrompt]], plan: StepPlan,
             round_: int = 0) -> list[Generated]:
    """Every local agent samples G completions for each prompt this rank generates; the
    seed is a pure function of (run seed, step, agent, group rank, dynamic-sampling round),
    so a resumed run samples what the straight run did. Returns [A] records (no rollouts
    for an agent trained in another process)."""
    cfg = cohort.cfg
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    rollouts: dict[int, Rollouts] = {}
    for i, agent in zip(cohort.local, cohort.agents):
        seed = step_rollout_seed(cfg.run.seed, step, i, cohort.layout.group_rank, round_)
        with phase(cohort, f"generate {agent.name}" + _round_note(round_)), agent.generation_context():
            rollouts[i] = agent.engine.generate(
                [rendered[i][b] for b in plan.generated], cfg.rollout.rollouts_per_prompt,
                sampling, seed=seed)
    return [Generated(tuple(r), rollouts.get(i)) for i, r in enumerate(rendered)]


def exchange_answers(cohort: Cohort, generated: list[Generated], plan: StepPlan,
                     problems: list[Problem]) -> list[Answered]:
    """Every agent's answers [P][G], lengths and finished flags [P x G] on every rank: one
    all-gather of each rank's pieces ``{agent: {"prompts", "answers", "lengths",
    "finished"}}``, reassembled in prompt order. An answer is what the run's answer kind
    says (``AnswerKind.answers``); for code, the sandbox runs here, once per program, on
    the rank that generated it, and only the short keys cross."""
    cfg, G, P = cohort.cfg, cohort.cfg.rollout.rollouts_per_prompt, plan.n_prompts
    mine = cohort.answer_kind.answers(
        {i: generated[i].rollouts.texts_by_prompt() for i in cohort.local},
        [problems[b] for b in plan.generated], cfg.reward.answer_style,
        workers=cfg.reward.code_workers or None)  # {agent: [P_r][G]}
    local = {i: {"prompts": list(plan.generated), "lengths": generated[i].rollouts.lengths().tolist(),
                 "finished": generated[i].rollouts.finished, "answers": mine[i]}
             for i in cohort.local}
    answers = [[None] * P for _ in generated]
    lengths = [[0] * (P * G) for _ in generated]
    finished = [[False] * (P * G) for _ in generated]
    for piece in cohort.layout.gather(local, "the step's answers"):
        for i, part in piece.items():
            for j, b in enumerate(part["prompts"]):
                answers[i][b] = part["answers"][j]
                lengths[i][b * G:(b + 1) * G] = part["lengths"][j * G:(j + 1) * G]
                finished[i][b * G:(b + 1) * G] = part["finished"][j * G:(j + 1) * G]
    missing = [name for name, a in zip(cohort.names, answers) if any(x is None for x in a)]
    if missing:
        raise TrainingError(f"answers of agent(s) {missing} are missing after the exchange")
    return [Answered(tuple(a), torch.tensor(n), tuple(f))
            for a, n, f in zip(answers, lengths, finished)]


def vote(cohort: Cohort, answered: list[Answered], problems: list[Problem]) -> list[Answered]:
    """Each agent's plurality vote [P] over its G answers (the same on every rank), compared
    by the answer kind's grader (code keys: exactly)."""
    r = cohort.cfg.reward
    grader = cohort.answer_kind.grader(cohort.grader)
    return [replace(a, votes=tuple(vote_all(a.answers, problems, r.tie, r.min_share, grader,
                                            r.min_share_of)))
            for a in answered]


def reward(cohort: Cohort, generated: list[Generated], answered: list[Answered],
           problems: list[Problem], plan: StepPlan, extras: dict[int, Any] | None = None,
           partners: tuple[int, ...] = ()) -> dict[int, Rewarded]:
    """Each local agent's reward (its source: ``agents.N.reward_source`` or the method's)
    and group-normalised advantages [P, G] over its own prompts on this rank
    (``extras``: {agent: what its source's ``round_inputs`` made}; ``partners`` [P]: each
    prompt's other wording where the round holds both)."""
    return {i: reward_agent(cohort, i, agent, generated[i], answered, problems, plan,
                            (extras or {}).get(i), partners)
            for i, agent in zip(cohort.local, cohort.agents)}


def reward_agent(cohort: Cohort, i: int, agent: Agent, gen: Generated, answered: list[Answered],
                 problems: list[Problem], plan: StepPlan, extra: Any = None,
                 partners: tuple[int, ...] = ()) -> Rewarded:
    """Local agent ``i``'s :class:`Rewarded`: the source's rewards (plus DAPO's soft
    overlong penalty and the reward-side KL, where set), then the advantages. The batch
    std of ``grpo.adv_scale=batch`` is over the agent's own prompts (``plan.owned``), not
    the step's other shards under ``data.decouple``: the batch it is updated on."""
    cfg, kind = cohort.cfg, cohort.answer_kind
    source = reward_sources.source(agent_reward_source(cfg, i))
    sel = Selection.of(gen, plan, plan.trained(i))
    spent: list[float] = []

    def stats():
        t0 = time.perf_counter()
        out = token_stats(agent, sel.rendered, sel.rollouts, cfg.grpo, cfg.rollout.temperature,
                          cfg.reward.intrinsic_temperature_scaled)
        spent.append(time.perf_counter() - t0)
        return out

    got = source.reward(RewardInputs(
        agent=i, answers=answered[i].answers, votes=[a.votes for a in answered],
        problems=problems, trained=list(sel.prompts), token_stats=stats,
        group_size=cfg.rollout.rollouts_per_prompt, grader=kind.grader(cohort.grader),
        topology=cfg.reward.topology, tie=cfg.reward.tie,
        format_weight=cfg.reward.format_weight, ring=cfg.reward.ring, answer_kind=kind.name,
        trained_texts=kind.texts_for_reward(sel.rollouts), code_workers=cfg.reward.code_workers or None,
        partners=partners, extra=extra))
    # the verdict before shaping: an intrinsic source has no correctness, its reward is its verdict
    task = got.scored.rewards.float() if source.intrinsic else got.scored.correct.float()  # [P, G]
    if cfg.reward.overlong_buffer:  # DAPO's soft overlong penalty, before normalisation
        got = replace(got, scored=with_overlong_penalty(
            got.scored, answered[i].lengths, cfg.rollout.max_new_tokens,
            cfg.reward.overlong_buffer, cfg.reward.overlong_penalty))
    rewards = got.scored.rewards
    if cfg.grpo.kl_in_reward:
        rewards, got = kl_penalised(agent, sel, got, cfg)
    advantages = grpo.group_advantages(rewards, scale=cfg.grpo.adv_scale, valid=got.scored.valid,
                                       batch=prompt_mask(plan.n_prompts, plan.owned[i]))  # [P, G]
    return Rewarded(sel, got, advantages, sum(spent) if spent else None, rewards.float(), task)


def prompt_mask(n_prompts: int, prompts) -> torch.Tensor:
    """bool [n_prompts]: True at ``prompts``."""
    mask = torch.zeros(n_prompts, dtype=torch.bool)
    mask[torch.tensor(list(prompts), dtype=torch.long)] = True
    return mask


def kl_penalised(agent: Agent, sel: Selection, got: Reward, cfg: Config) -> tuple[torch.Tensor, Reward]:
    """``grpo.kl_in_reward``: the rewards [P, G] less the KL penalty of the rollouts the
    agent trains on (``update.kl_reward``), before the advantages, and the reward with the
    penalty's no-grad old log-probs for the update (no second pass) and its mean k1 logged
    as ``kl``. The scored rewards (``reward/mean``) stay the task's."""
    if not sel.prompts:  # nothing of this agent's on this rank
        return got.scored.rewards, got
    kr = kl_reward(agent, sel.rendered, sel.rollouts, cfg.grpo, cfg.rollout.temperature, got.old)
    rewards = got.scored.rewards.float().clone()  # [P, G]
    G = rewards.shape[1]
    rows = torch.tensor(sel.prompts, dtype=torch.long)
    rewards[rows] -= kr.penalty.reshape(-1, G).to(rewards.dtype)  # [n, G]
    return rewards, replace(got, old=kr.old, metrics={**got.metrics, "kl": kr.kl})


# ------------------------------------------------------------------ dynamic sampling (DAPO)


def dynamic_sampling(cohort: Cohort, step: int, batch: Round,
                     timing: dict[str, float]) -> tuple[Round, dict[int, dict[str, int]]]:
    """DAPO's dynamic sampling (Yu et al., arXiv 2503.14476, sec. 3.2; verl's
    ``filter_groups``), ``rollout.dynamic_sampling``: each agent's groups whose G values of
    ``rollout.dynamic_sampling_metric`` are all equal (:func:`filter_values`; by default
    the task verdict: all right or all wrong) are dropped from its update, and extra
    rounds refill it until it holds B groups with a signal or
    ``rollout.dynamic_sampling_max_rounds`` extra rounds have cohort. A group of one outcome
    teaches nothing about the task, but its tokens count in the loss's denominator (and
    in a KL term), so it dilutes every other group's step; filtering on the shaped reward
    instead would keep it whenever the overlong penalty or a reward-side KL splits it.

    A refill round is the step's pipeline again on the stream's next prompts
    (:func:`sample_round`, seeds offset by ``seeds.ROUND_SEED_STRIDE`` x round). Every
    agent generates in every round, full or not: a peer-vote agent needs its teacher's
    votes on the same prompts. Each round is joined to the step (:meth:`Round.concat`:
    problems, every agent's records and the plan grow by its P prompts), so the step's
    metrics cover every prompt it generated; each agent then keeps its first B groups
    with a signal, in stream order, as the prompts it trains on. An agent with no signal
    in any round keeps its first-round selection, as without dynamic sampling (the update
    then skips, or takes a KL-only step). Returns the grown round and each local agent's
    ``dyn/*`` counts; the refill rounds' seconds are added to ``timing``'s rollout and
    grading. Old log-probs are not reused once the groups change (the update recomputes
    them where it needs them). Under ``grpo.adv_scale=batch`` the advantages are
    normalised again over the groups each agent keeps, the batch it is updated on.

    Agent groups (distributed): another round is run when any agent of the cohort, by the
    signal counts gathered from every rank, still lacks groups, so every rank runs the
    same rounds (the answer exchange is a collective). With one rank per agent this is the
    single-process algorithm exactly; with R > 1 ranks per agent the ranks of a group
    would keep unequal numbers of groups, which ZeRO's collectives cannot take, so that
    combination is refused (``config_checks``, and ``cohort.setup`` for
    ``ranks_per_agent=0``).
    """
    first = batch
    target = [len(own) for own in first.plan.owned]  # [A] B groups each (its block under decouple)
    metric = cohort.cfg.rollout.dynamic_sampling_metric
    signal = signal_groups(cohort, batch.rewarded, len(cohort.names), metric)
    rounds = 0
    while rounds < cohort.cfg.rollout.dynamic_sampling_max_rounds and any(
            len(found) < want for found, want in zip(signal, target)):
        rounds += 1
        batch = batch.concat(sample_round(cohort, step, rounds, timing))
        signal = signal_groups(cohort, batch.rewarded, len(cohort.names), metric)
    generated = set(batch.plan.generated)
    rewarded, dyn = {}, {}
    for i, grown in batch.rewarded.items():
        trained = list(first.rewarded[i].selection.prompts)
        has = set(signal[i])
        kept = signal[i][:target[i]]
        dyn[i] = {"dyn/dropped": sum(b not in has for b in trained),
                  "dyn/refilled": sum(b >= first.plan.n_prompts for b in kept),
                  "dyn/groups": len(kept), "dyn/rounds": rounds}
        kept = [b for b in kept if b in generated] or trained  # this rank's rows
        if kept == trained:  # nothing dropped: the first round's selection as it was
            sel, old = first.rewarded[i].selection, first.rewarded[i].reward.old
            advantages = grown.advantages
        else:
            sel, old = Selection.of(batch.generated[i], batch.plan, kept), None  # [n x G]
            advantages = kept_advantages(grown, kept, cohort.cfg.grpo.adv_scale)
        rewarded[i] = replace(grown, selection=sel, reward=replace(grown.reward, old=old),
                              advantages=advantages)
    return replace(batch, rewarded=rewarded), dyn


def kept_advantages(r: Rewarded, kept: list[int], scale: str) -> torch.Tensor:
    """The advantages [P, G] once ``kept`` are the groups an agent trains on: as they were
    for a scale within each group; for ``scale=batch`` the batch std is taken again over
    ``kept`` alone (each round's was over that round's prompts)."""
    if scale != "batch":
        return r.advantages
    return grpo.group_advantages(r.final_rewards, scale=scale, valid=r.reward.scored.valid,
                                 batch=prompt_mask(r.advantages.shape[0], kept))


#: ``rollout.dynamic_sampling_metric`` -> the values [P, G] of a :class:`Rewarded` whose
#: spread within a group decides whether it is kept, named as verl's ``filter_groups.metric``.
FILTER_METRICS: dict[str, Callable[[Rewarded], torch.Tensor]] = {
    "acc": lambda r: r.task_rewards,  # the verdict: correct or not (an intrinsic reward)
    "seq_reward": lambda r: r.reward.scored.rewards,  # + format term + overlong penalty
    "seq_final_reward": lambda r: r.final_rewards,  # + reward-side KL: what the advantages see
}


def filter_values(r: Rewarded, metric: str) -> torch.Tensor:
    """The values [P, G] of ``r`` that dynamic-sampling metric ``metric`` filters on."""
    try:
        return FILTER_METRICS[metric](r)
    except KeyError:
        raise ValueError(f"unknown dynamic-sampling metric {metric!r}; allowed: "
                         + ", ".join(FILTER_METRICS)) from None


def signal_groups(cohort: Cohort, rewarded: dict[int, Rewarded], n_agents: int,
                  metric: str = "acc") -> list[list[int]]:
    """[A] each agent's trained prompts whose group has a signal (a reward and G values of
    ``metric`` not all equal: :func:`~vlcohort.training.grpo.varied_groups`), in prompt
    order, gathered from every rank, so each rank decides on refills alike."""
    local = {}
    for i, r in rewarded.items():
        varied = grpo.varied_groups(filter_values(r, metric), r.reward.scored.valid)  # [P]
        local[i] = [b for b in r.selection.prompts if bool(varied[b])]
    found: list[set[int]] = [set() for _ in range(n_agents)]
    for piece in cohort.layout.gather(local, "the groups with a learning signal"):
        for i, prompts in piece.items():
            found[i].update(prompts)
    return [sorted(s) for s in found]


# -------------------------------------------------------------------- update and metrics


def update(cohort: Cohort, batch: Round) -> tuple[dict[int, Updated], float]:
    """Each local agent's GRPO update from its selection and advantages; the LR schedule
    follows RL steps, updated or not. The whole agent group takes the update (DeepSpeed
    collectives) or the whole group skips it. Returns the updates and the seconds spent
    pushing updated weights into the rollout engines (part of the update's time)."""
    cfg = cohort.cfg
    pushed = 0.0
    out: dict[int, Updated] = {}
    for i, agent in zip(cohort.local, cohort.agents):
        with phase(cohort, f"update {agent.name}"):
            r = batch.rewarded[i]
            own = torch.tensor(batch.plan.owned[i], dtype=torch.long)
            has_signal = cohort.layout.group_any(bool((r.advantages[own] != 0).any()),
                                              "whether the group has a signal")
            if has_signal or trains_without_advantage(cfg.grpo):  # KL term alone: still a step
                sel = r.selection
                adv = r.advantages[torch.tensor(sel.prompts, dtype=torch.long)].reshape(-1)  # [n x G]
                groups = r.reward.loss_groups  # [P] (Co-rewarding-I's wordings) or ()
                metrics = update_agent(agent, sel.rendered, sel.rollouts, adv, cfg.grpo,
                                       cfg.rollout.temperature, length_norm=cfg.rollout.max_new_tokens,
                                       old=r.reward.old,
                                       groups=[groups[b] for b in sel.prompts] if groups else None)
                pushed += metrics.pop("weight_push_s", 0.0)
            else:
                metrics = {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0}
        out[i] = Updated(has_signal, metrics)
    step_schedules(cohort.agents)
    return out, pushed


def step_record(cohort: Cohort, step: int, batch: Round, updated: dict[int, Updated],
                dyn: dict[int, dict[str, int]], timing: dict[str, float],
                t_step: float) -> dict[str, Any]:
    """The step's metrics: each local agent's from its group's leader, gathered into one
    record on every rank (so every rank takes the same decisions from it), plus the
    cohort's agreement and whether anything learned."""
    parts: dict[str, Any] = dict(timing)
    if cohort.layout.group_rank == 0:
        for i in cohort.local:
            name = cohort.names[i]
            parts.update(agent_metrics(f"agent/{name}/", batch, i, cohort.grader, cohort.answer_kind))
            parts.update({f"agent/{name}/{k}": v for k, v in updated[i].metrics.items()})
            parts.update({f"agent/{name}/{k}": v for k, v in dyn.get(i, {}).items()})
            parts.update({f"agent/{name}/{k}": v for k, v in batch.rewarded[i].reward.metrics.items()})
            parts[f"_signal/{name}"] = updated[i].has_signal
    record: dict[str, Any] = {"step": step}
    for piece in cohort.layout.gather(parts, "the step's metrics"):
        for k, v in piece.items():
            record[k] = max(record.get(k, v), v) if k.startswith("timing/") else v
    # every flag popped (a bare any() over the pops stopped at the first True and left the
    # later agents' "_signal/<a>" keys in metrics.jsonl)
    any_signal = any([record.pop(f"_signal/{n}") for n in cohort.names])
    record["cohort/agreement"] = agreement([a.votes for a in batch.answered], batch.problems,
                                           cohort.answer_kind.grader(cohort.grader))
    record["cohort/no_signal"] = 0.0 if any_signal else 1.0
    record["timing/step"] = time.perf_counter() - t_step
    return record


def agent_metrics(p: str, batch: Round, i: int, grader, kind: AnswerKind) -> dict[str, Any]:
    """``agent/<name>/...`` (``p``) of local agent ``i`` over the prompts it trains on
    (``plan.owned``, [B] of them; under ``rollout.dynamic_sampling`` its prompts of every
    round of the step). For code answers (behaviour keys) ``parse_rate`` is the share of
    programs that ran on the public inputs, and accuracy against gold is the tests' pass
    rate, which only the ``ground_truth`` source runs (its ``acc``); a key is never
    compared with a gold string."""
    own, a, r = batch.plan.owned[i], batch.answered[i], batch.rewarded[i]
    G = r.advantages.shape[1]
    rows = torch.tensor([b * G + g for b in own for g in range(G)], dtype=torch.long)  # [B x G]
    scored = r.reward.scored.select(list(own))
    rewards = scored.rewards  # [B, G]
    out: dict[str, Any] = {
        p + "reward/mean": float(rewards.mean()), p + "reward/std": float(rewards.std(unbiased=False)),
        p + "reward/group_std": group_reward_std(rewards),
        p + "answer_diversity": answer_diversity([a.votes[b] for b in own]),
        p + "teacher_abstain": float((~scored.valid).float().mean()),
        p + "parse_rate": float(np.mean([x is not None for b in own for x in a.answers[b]])),
        p + "completion_len": float(a.lengths[rows].float().mean()),
        p + "truncated": float(np.mean([not a.finished[n] for n in rows.tolist()])),
        p + "zero_adv_groups": float((r.advantages[list(own)] == 0).all(dim=1).float().mean()),
    }
    if kind.has_gold:
        out.update(gold_metrics(p, a, r.reward.labels, own, batch.problems, grader))
    return out


def gold_metrics(p: str, a: Answered, labels: list, own: tuple[int, ...],
                 problems: tuple[Problem, ...], grader) -> dict[str, float]:
    """Accuracies against gold, where problems have it (never used by a label-free reward):
    of the teacher labels, of the agent's own votes, of its answers, per task family."""
    with_gold = [b for b in own if problems[b].gold is not None]
    if not with_gold:
        return {}
    out: dict[str, float] = {}
    labelled = [b for b in with_gold if labels[b] is not None]
    if labelled:
        out[p + "pseudo_label/acc"] = float(np.mean(
            [gold_match(labels[b], problems[b], grader) for b in labelled]))
    out[p + "vote/acc"] = float(np.mean([gold_match(a.votes[b].label, problems[b], grader)
                                         for b in with_gold]))
    hits = {b: [gold_match(x, problems[b], grader) for x in a.answers[b]] for b in with_gold}
    out[p + "acc"] = float(np.mean([h for b in with_gold for h in hits[b]]))
    by_task: dict[str, list[bool]] = {}
    for b in with_gold:
        task = problems[b].meta.get("task")
        if task:
            by_task.setdefault(task, []).extend(hits[b])
    out.update({f"{p}acc/{t}": float(np.mean(v)) for t, v in by_task.items()})
    return out


def agreement(votes, problems, grader) -> float:
    """Share of prompts where all agents' votes are one equivalence class (abstain: no);
    ``votes`` [A][P]."""
    if len(votes) < 2:
        return float("nan")
    agree = []
    for b, prob in enumerate(problems):
        labs = [v[b].label for v in votes]
        agree.append(all(lab is not None for lab in labs)
                     and all(grader.is_equivalent(lab, labs[0], prob.options) for lab in labs[1:]))
    return float(np.mean(agree))
