"""One cohort step as a straight pipeline over one :class:`AgentStep` record per agent,
and the :class:`Run` state it reads (built by ``cohort.setup``).

    next_prompts      P problems every agent can render; each agent's rendering   rendered [P]
    generate          local agents sample G completions per prompt              rollouts [P_r x G]
    exchange_answers  answers cross between agents (one all-gather)              answers [P][G]
    vote              every agent's own plurality vote, on every rank           votes [P]
    reward            local agents: teacher labels / intrinsic rewards, GRPO    rewards, advantages [P, G]
    dynamic_sampling  (rollout.dynamic_sampling) flat groups dropped; rounds    P grows by P per round
                      of the five stages above refill each agent up to B groups
    update            local agents: one GRPO update each, then the LR schedule  update metrics
    step_record       per-agent and cohort metrics, one record on every rank

All generation and answer extraction finishes before any agent updates, so a step's
rewards never depend on a half-updated peer (DESIGN.md). P = B prompts, or A x B with
``data.decouple``; which prompts a rank generates and an agent trains on is the
distributed layer's :class:`~vlcohort.training.distributed.StepPlan`.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlcohort.answers.grading import Grader
from vlcohort.config import Config
from vlcohort.config_checks import agent_reward_source
from vlcohort.data.problems import Problem
from vlcohort.data.stream import ProblemStream
from vlcohort.data.views import view_of
from vlcohort.monitoring.metrics import MetricsLogger
from vlcohort.monitoring.monitor import Monitor, answer_diversity, group_reward_std
from vlcohort.processors import ProblemInputError
from vlcohort.recipes.driver import TrainingError
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.seeds import step_rollout_seed
from vlcohort.training import grpo
from vlcohort.training.agent import Agent
from vlcohort.training.distributed import Layout, StepPlan, step_plan
from vlcohort.training.rewards import (
    Reward,
    RewardInputs,
    Scored,
    code_keys_all,
    extract_all,
    gold_match,
    grader_for,
    reward_of,
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

    @property
    def names(self) -> list[str]:
        return [mc.name for mc in self.cfg.agents]

    @property
    def talks(self) -> bool:
        return self.layout.is_logger


@dataclass
class AgentStep:
    """One agent's data through one step; rows of per-rollout tensors are prompt-major
    (b * G + g). Fields fill in pipeline order; the ones from ``rollouts`` on are set only
    for the agents trained in this process, except answers / lengths / finished / votes,
    which every rank holds for every agent."""

    index: int  # the agent's position in the cohort, 0..A-1
    name: str
    rendered: list = field(default_factory=list)  # [P] RenderedPrompt of every prompt
    rollouts: Rollouts | None = None  # [P_r x G] this rank's completions (P_r generated prompts)
    answers: list = field(default_factory=list)  # [P][G] answer spans (None: unparseable)
    lengths: torch.Tensor | None = None  # [P x G] completion lengths in tokens
    finished: list = field(default_factory=list)  # [P x G] stopped before max_new_tokens
    votes: list = field(default_factory=list)  # [P] the agent's own plurality votes
    trained: list = field(default_factory=list)  # [n] its prompts this rank trains on
    trained_rollouts: Rollouts | None = None  # [n x G] their rollouts
    trained_rendered: list = field(default_factory=list)  # [n] their renderings
    reward: Reward | None = None  # labels [P], scored rewards [P, G] (rewards.py)
    advantages: torch.Tensor | None = None  # [P, G] group-normalised
    has_signal: bool = False  # some advantage of its own prompts is non-zero
    dyn: dict = field(default_factory=dict)  # rollout.dynamic_sampling: dropped / refilled groups
    update: dict = field(default_factory=dict)  # the update's metrics (loss, lr, ...)


def train_step(run: Run, step: int) -> dict[str, Any]:
    """One cohort step (module docstring): P prompts -> every agent's rollouts, answers and
    votes -> each local agent's rewards and update -> the step's metrics record, the same
    on every rank."""
    t_step = time.perf_counter()
    problems, cohort = next_prompts(run)  # [P], [A] records with rendered [P]
    plan = step_plan(run.layout, len(problems), run.cfg.data.decouple)
    t0 = time.perf_counter()
    generate(run, step, cohort, plan)
    timing = {"timing/rollout": time.perf_counter() - t0}
    t0 = time.perf_counter()
    exchange_answers(run, cohort, plan, problems)
    vote(run, cohort, problems)
    t_intrinsic = reward(run, cohort, problems, plan)
    timing["timing/grading"] = time.perf_counter() - t0
    if run.cfg.rollout.dynamic_sampling:  # DAPO: flat groups out, refill rounds in
        problems, plan = dynamic_sampling(run, step, problems, cohort, plan, timing)
    t0 = time.perf_counter()
    timing["timing/weight_push"] = update(run, cohort, plan)
    timing["timing/update"] = time.perf_counter() - t0
    if t_intrinsic is not None:
        timing["timing/intrinsic"] = t_intrinsic
    return step_record(run, step, cohort, problems, plan, timing, t_step)


def next_prompts(run: Run) -> tuple[list[Problem], list[AgentStep]]:
    """P problems that every agent can render, and one record per agent holding its
    rendering of them.

    A problem that fails to render for any agent (missing or corrupt image, placeholder
    mismatch, empty question, a prompt over ``data.max_prompt_tokens``) is skipped for all
    agents, counted by reason, and replaced.
    Each agent renders its own view of the problem (``agents.N.view``; the same text by
    default); the problems, options and gold are shared, so votes compare like with like.
    With ``data.decouple`` the P = A x B problems come B from each agent's shard, in agent
    order (prompt b is owned by agent b // B); every agent answers all of them.
    """
    B = run.cfg.rollout.prompts_per_step
    problems: list[Problem] = []
    cohort = [AgentStep(index=i, name=name) for i, name in enumerate(run.names)]
    sources = run.shards or [run.stream]
    attempts = 0
    while len(problems) < B * len(sources):
        stream = sources[len(problems) // B]
        attempts += 1
        if attempts > 10 * B * len(sources) + len(run.stream.problems):
            raise TrainingError("could not find renderable problems: every record fails; "
                                f"skipped so far: {run.skipped_records}")
        p = stream.next()
        try:
            r = [ad.render(view_of(p, a.name), run.cfg.prompt.system_prompt,
                           run.cfg.prompt.instruction, max_tokens=run.cfg.data.max_prompt_tokens)
                 for ad, a in zip(run.adapters, cohort)]
        except ProblemInputError as e:
            reason = getattr(e, "reason", type(e).__name__)
            run.skipped_records[reason] = run.skipped_records.get(reason, 0) + 1
            if run.layout.is_logger:
                print(f"skipped record: {e}", file=sys.stderr)
            continue
        problems.append(p)
        for a, ra in zip(cohort, r):
            a.rendered.append(ra)
    return problems, cohort


def generate(run: Run, step: int, cohort: list[AgentStep], plan: StepPlan,
             round_: int = 0) -> None:
    """Every local agent samples G completions for each prompt this rank generates; the
    seed is a pure function of (run seed, step, agent, group rank, dynamic-sampling round),
    so a resumed run samples what the straight run did."""
    cfg = run.cfg
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    for i, agent in zip(run.local, run.agents):
        seed = step_rollout_seed(cfg.run.seed, step, i, run.layout.group_rank, round_)
        with agent.generation_context():
            cohort[i].rollouts = agent.engine.generate(
                [cohort[i].rendered[b] for b in plan.generated], cfg.rollout.rollouts_per_prompt,
                sampling, seed=seed)


def exchange_answers(run: Run, cohort: list[AgentStep], plan: StepPlan,
                     problems: list[Problem]) -> None:
    """Every agent's answers [P][G], lengths and finished flags [P x G] on every rank: one
    all-gather of each rank's pieces ``{agent: {"prompts", "answers", "lengths",
    "finished"}}``, reassembled in prompt order. An answer is what ``reward.answer_kind``
    says (:func:`answers_of`); for code, the sandbox runs here, once per program, on the
    rank that generated it, and only the short keys cross."""
    G, P = run.cfg.rollout.rollouts_per_prompt, plan.n_prompts
    mine = answers_of(run.cfg, {i: cohort[i].rollouts.texts_by_prompt() for i in run.local},
                      [problems[b] for b in plan.generated])  # {agent: [P_r][G]}
    local = {i: {"prompts": list(plan.generated), "lengths": cohort[i].rollouts.lengths().tolist(),
                 "finished": cohort[i].rollouts.finished, "answers": mine[i]}
             for i in run.local}
    answers = [[None] * P for _ in cohort]
    lengths = [[0] * (P * G) for _ in cohort]
    finished = [[False] * (P * G) for _ in cohort]
    for piece in run.layout.gather(local, "the step's answers"):
        for i, part in piece.items():
            for j, b in enumerate(part["prompts"]):
                answers[i][b] = part["answers"][j]
                lengths[i][b * G:(b + 1) * G] = part["lengths"][j * G:(j + 1) * G]
                finished[i][b * G:(b + 1) * G] = part["finished"][j * G:(j + 1) * G]
    missing = [a.name for a in cohort if any(x is None for x in answers[a.index])]
    if missing:
        raise TrainingError(f"answers of agent(s) {missing} are missing after the exchange")
    for a in cohort:
        a.answers, a.lengths, a.finished = answers[a.index], torch.tensor(lengths[a.index]), finished[a.index]


def answers_of(cfg: Config, texts: dict[int, list[list[str]]],
               problems: list[Problem]) -> dict[int, list[list[str | None]]]:
    """Each local agent's completion texts {agent: [P_r][G]} -> its answers [P_r][G]
    (None: an abstention) of ``reward.answer_kind``: math, the extracted span
    (``reward.answer_style``); code, the behaviour key of the completion's program on the
    prompt's public inputs (``rewards.code_keys_all``), every local agent's programs on
    one bounded sandbox pool, a program two agents wrote run once."""
    r = cfg.reward
    if r.answer_kind != "code":
        return {i: extract_all(t, r.answer_style) for i, t in texts.items()}
    order = list(texts)
    rows = [row for i in order for row in texts[i]]  # [n_local x P_r][G], agent-major
    keys = code_keys_all(rows, problems * len(order), **code_run_settings(cfg))
    P = len(problems)
    return {i: keys[k * P:(k + 1) * P] for k, i in enumerate(order)}


def code_run_settings(cfg: Config) -> dict[str, Any]:
    """The sandbox pool's size (``reward.code_workers``; None: every core) and the limits
    of one run (None: the sandbox's own, ``code.sandbox.Limits``)."""
    return {"workers": cfg.reward.code_workers or None, "limits": None}


def vote(run: Run, cohort: list[AgentStep], problems: list[Problem]) -> None:
    """Each agent's plurality vote [P] over its G answers (the same on every rank); code
    keys are compared exactly (``rewards.grader_for``)."""
    r = run.cfg.reward
    grader = grader_for(r.answer_kind, run.grader)
    for a in cohort:
        a.votes = vote_all(a.answers, problems, r.tie, r.min_share, grader, r.min_share_of)


def select_trained(a: AgentStep, plan: StepPlan) -> None:
    """What local agent ``a`` trains on: its own prompts (all, or its ``data.decouple``
    block) that this rank generated, their rollouts [n x G] and renderings [n]."""
    a.trained = plan.trained(a.index)
    a.trained_rendered = [a.rendered[b] for b in a.trained]
    same = a.trained == list(plan.generated)
    a.trained_rollouts = a.rollouts if same else a.rollouts.select_prompts(plan.positions(a.trained))


def reward(run: Run, cohort: list[AgentStep], problems: list[Problem], plan: StepPlan) -> float | None:
    """Each local agent's reward (its source: ``agents.N.reward_source`` or the method's)
    and group-normalised advantages [P, G]. Returns the seconds spent in intrinsic
    sources' no-grad passes (None when no source made one)."""
    cfg = run.cfg
    spent: list[float] = []
    kind = cfg.reward.answer_kind
    code = code_run_settings(cfg)
    for i, agent in zip(run.local, run.agents):
        a = cohort[i]
        select_trained(a, plan)
        rend, ro = a.trained_rendered, a.trained_rollouts

        def stats(agent=agent, rend=rend, ro=ro):
            t0 = time.perf_counter()
            out = token_stats(agent, rend, ro, cfg.grpo, cfg.rollout.temperature,
                              cfg.reward.intrinsic_temperature_scaled)
            spent.append(time.perf_counter() - t0)
            return out

        a.reward = reward_of(agent_reward_source(cfg, i), RewardInputs(
            agent=i, answers=a.answers, votes=[c.votes for c in cohort], problems=problems,
            trained=a.trained, token_stats=stats, group_size=cfg.rollout.rollouts_per_prompt,
            grader=grader_for(kind, run.grader), topology=cfg.reward.topology, tie=cfg.reward.tie,
            format_weight=cfg.reward.format_weight, ring=cfg.reward.ring, answer_kind=kind,
            trained_texts=ro.texts_by_prompt() if kind == "code" else (),
            code_workers=code["workers"], code_limits=code["limits"]))
        if cfg.reward.overlong_buffer:  # DAPO's soft overlong penalty, before normalisation
            a.reward.scored = with_overlong_penalty(
                a.reward.scored, a.lengths, cfg.rollout.max_new_tokens,
                cfg.reward.overlong_buffer, cfg.reward.overlong_penalty)
        rewards = kl_penalised(a, agent, cfg) if cfg.grpo.kl_in_reward else a.reward.scored.rewards
        a.advantages = grpo.group_advantages(rewards, scale=cfg.grpo.adv_scale,
                                             valid=a.reward.scored.valid)  # [P, G]
    return sum(spent) if spent else None


def kl_penalised(a: AgentStep, agent: Agent, cfg: Config) -> torch.Tensor:
    """``grpo.kl_in_reward``: the agent's rewards [P, G] less the KL penalty of the
    rollouts it trains on (``update.kl_reward``), before the advantages. The penalty's
    no-grad old log-probs go to the update (no second pass); its mean k1 is logged as
    ``kl``. The scored rewards (``reward/mean``) stay the task's."""
    if not a.trained:  # nothing of this agent's on this rank
        return a.reward.scored.rewards
    kr = kl_reward(agent, a.trained_rendered, a.trained_rollouts, cfg.grpo,
                   cfg.rollout.temperature, **a.reward.for_update)
    a.reward.for_update = {**a.reward.for_update, **kr.for_update}
    a.reward.metrics["kl"] = kr.kl
    rewards = a.reward.scored.rewards.float().clone()  # [P, G]
    G = rewards.shape[1]
    rows = torch.tensor(a.trained, dtype=torch.long)
    rewards[rows] -= kr.penalty.reshape(-1, G).to(rewards.dtype)  # [n, G]
    return rewards


# ------------------------------------------------------------------ dynamic sampling (DAPO)


def dynamic_sampling(run: Run, step: int, problems: list[Problem], cohort: list[AgentStep],
                     plan: StepPlan, timing: dict[str, float]) -> tuple[list[Problem], StepPlan]:
    """DAPO's dynamic sampling (Yu et al., arXiv 2503.14476, sec. 3.2; verl's
    ``filter_groups``), ``rollout.dynamic_sampling``: each agent's groups whose G
    advantages are all zero are dropped from its update, and extra rounds refill it until
    it holds B groups with a signal or ``rollout.dynamic_sampling_max_rounds`` extra rounds
    have run. A flat group adds no gradient, but its tokens count in the loss's
    denominator (and in a KL term), so it dilutes every other group's step.

    A refill round is the step's pipeline again on the stream's next prompts:
    next_prompts -> generate (seeds offset by ``seeds.ROUND_SEED_STRIDE`` x round) ->
    exchange_answers -> vote -> reward. Every agent generates in every round, full or
    not: a peer-vote agent needs its teacher's votes on the same prompts. Each round is
    appended to the step (``problems``, every agent's record and the plan grow by its P
    prompts), so the step's metrics cover every prompt it generated; each agent then keeps
    its first B groups with a signal, in stream order, as the prompts it trains on. An
    agent with no signal in any round keeps its first-round groups, as without dynamic
    sampling (the update then skips, or takes a KL-only step). Returns the grown problems
    and plan; the refill rounds' seconds are added to ``timing``'s rollout and grading.
    An intrinsic reward's old log-probs are not reused once the groups change (the update
    recomputes them where it needs them).

    Agent groups (distributed): another round is run when any agent of the cohort, by the
    signal counts gathered from every rank, still lacks groups, so every rank runs the
    same rounds (the answer exchange is a collective). With one rank per agent this is the
    single-process algorithm exactly; with R > 1 ranks per agent the ranks of a group
    would keep unequal numbers of groups, which ZeRO's collectives cannot take, so that
    combination is refused (``config_checks``, and ``cohort.setup`` for
    ``ranks_per_agent=0``).
    """
    cfg = run.cfg
    target = [len(own) for own in plan.owned]  # [A] B groups each (its block under decouple)
    first = {i: (list(cohort[i].trained), cohort[i].trained_rollouts,
                 cohort[i].trained_rendered, cohort[i].reward.for_update) for i in run.local}
    first_prompts = plan.n_prompts
    signal = signal_groups(run, cohort)
    rounds = 0
    while rounds < cfg.rollout.dynamic_sampling_max_rounds and any(
            len(found) < want for found, want in zip(signal, target)):
        rounds += 1
        t0 = time.perf_counter()
        more, extra = next_prompts(run)  # [P'], [A]
        extra_plan = step_plan(run.layout, len(more), cfg.data.decouple)
        generate(run, step, extra, extra_plan, round_=rounds)
        timing["timing/rollout"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        exchange_answers(run, extra, extra_plan, more)
        vote(run, extra, more)
        reward(run, extra, more, extra_plan)
        plan = append_round(cohort, extra, plan, extra_plan)
        problems = problems + more
        signal = signal_groups(run, cohort)
        timing["timing/grading"] += time.perf_counter() - t0
    generated = set(plan.generated)
    for i in run.local:
        a, (trained, rollouts, rendered, for_update) = cohort[i], first[i]
        has = set(signal[i])
        kept = signal[i][:target[i]]
        a.dyn = {"dyn/dropped": sum(b not in has for b in trained),
                 "dyn/refilled": sum(b >= first_prompts for b in kept),
                 "dyn/groups": len(kept), "dyn/rounds": rounds}
        kept = [b for b in kept if b in generated] or trained  # this rank's rows
        if kept == trained:  # nothing dropped: the first round's selection as it was
            a.trained, a.trained_rollouts, a.trained_rendered = trained, rollouts, rendered
            a.reward.for_update = for_update
        else:
            a.trained, a.trained_rendered = kept, [a.rendered[b] for b in kept]
            a.trained_rollouts = a.rollouts.select_prompts(plan.positions(kept))  # [n x G]
            a.reward.for_update = {}
    return problems, plan


def signal_groups(run: Run, cohort: list[AgentStep]) -> list[list[int]]:
    """[A] each agent's trained prompts whose group has a signal (some advantage non-zero),
    in prompt order, gathered from every rank, so each rank decides on refills alike."""
    local = {i: [b for b in cohort[i].trained if bool((cohort[i].advantages[b] != 0).any())]
             for i in run.local}
    found: list[set[int]] = [set() for _ in cohort]
    for piece in run.layout.gather(local, "the groups with a learning signal"):
        for i, prompts in piece.items():
            found[i].update(prompts)
    return [sorted(s) for s in found]


def append_round(cohort: list[AgentStep], extra: list[AgentStep], plan: StepPlan,
                 extra_plan: StepPlan) -> StepPlan:
    """A refill round ``extra`` appended to the step: every agent's record grows by the
    round's P' prompts (renderings, answers, lengths, finished flags, votes; for the local
    agents also rollouts, trained prompts, rewards and advantages), numbered after the
    step's P; returns the plan over all P + P' prompts."""
    off = plan.n_prompts

    def shift(prompts) -> tuple[int, ...]:
        return tuple(off + b for b in prompts)

    for a, x in zip(cohort, extra):
        a.rendered = a.rendered + x.rendered  # [P + P']
        a.answers = a.answers + x.answers  # [P + P'][G]
        a.lengths = torch.cat([a.lengths, x.lengths])  # [(P + P') x G]
        a.finished = list(a.finished) + list(x.finished)  # [(P + P') x G]
        a.votes = a.votes + x.votes  # [P + P']
        if x.rollouts is None:  # an agent trained in another process
            continue
        a.rollouts = a.rollouts.concat(x.rollouts)  # rows: plan.generated order
        a.trained = a.trained + list(shift(x.trained))
        s, t = a.reward.scored, x.reward.scored
        a.reward = Reward(labels=a.reward.labels + x.reward.labels,
                          scored=Scored(torch.cat([s.rewards, t.rewards]),
                                        torch.cat([s.valid, t.valid]),
                                        torch.cat([s.correct, t.correct])),
                          for_update={}, metrics=a.reward.metrics)
        a.advantages = torch.cat([a.advantages, x.advantages])  # [P + P', G]
    return StepPlan(n_prompts=off + extra_plan.n_prompts,
                    generated=plan.generated + shift(extra_plan.generated),
                    owned=tuple(own + shift(more) for own, more in zip(plan.owned, extra_plan.owned)))


def update(run: Run, cohort: list[AgentStep], plan: StepPlan) -> float:
    """Each local agent's GRPO update from its own rollouts and advantages; the LR schedule
    follows RL steps, updated or not. The whole agent group takes the update (DeepSpeed
    collectives) or the whole group skips it. Returns the seconds spent pushing updated
    weights into the rollout engines (part of the update's time)."""
    cfg = run.cfg
    pushed = 0.0
    for i, agent in zip(run.local, run.agents):
        a = cohort[i]
        own = torch.tensor(plan.owned[i], dtype=torch.long)
        a.has_signal = run.layout.group_any(bool((a.advantages[own] != 0).any()),
                                            "whether the group has a signal")
        if a.has_signal or trains_without_advantage(cfg.grpo):  # KL term alone: still a step
            adv = a.advantages[torch.tensor(a.trained, dtype=torch.long)].reshape(-1)  # [n x G]
            a.update = update_agent(agent, a.trained_rendered, a.trained_rollouts, adv,
                                    cfg.grpo, cfg.rollout.temperature,
                                    length_norm=cfg.rollout.max_new_tokens, **a.reward.for_update)
            pushed += a.update.pop("weight_push_s", 0.0)
        else:
            a.update = {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            agent.scheduler.step()
    return pushed


def step_record(run: Run, step: int, cohort: list[AgentStep], problems: list[Problem],
                plan: StepPlan, timing: dict[str, float], t_step: float) -> dict[str, Any]:
    """The step's metrics: each local agent's from its group's leader, gathered into one
    record on every rank (so every rank takes the same decisions from it), plus the
    cohort's agreement and whether anything learned."""
    parts: dict[str, Any] = dict(timing)
    if run.layout.group_rank == 0:
        for i in run.local:
            parts.update(agent_metrics(cohort[i], plan.owned[i], problems, run.grader,
                                       run.cfg.reward.answer_kind))
            parts[f"_signal/{cohort[i].name}"] = cohort[i].has_signal
    record: dict[str, Any] = {"step": step}
    for piece in run.layout.gather(parts, "the step's metrics"):
        for k, v in piece.items():
            record[k] = max(record.get(k, v), v) if k.startswith("timing/") else v
    # every flag popped (a bare any() over the pops stopped at the first True and left the
    # later agents' "_signal/<a>" keys in metrics.jsonl)
    any_signal = any([record.pop(f"_signal/{n}") for n in run.names])
    if not any_signal:
        run.no_signal_steps += 1
    record["cohort/agreement"] = agreement([a.votes for a in cohort], problems,
                                           grader_for(run.cfg.reward.answer_kind, run.grader))
    record["cohort/no_signal"] = 0.0 if any_signal else 1.0
    record["timing/step"] = time.perf_counter() - t_step
    return record


def agent_metrics(a: AgentStep, own: tuple[int, ...], problems: list[Problem],
                  grader, answer_kind: str = "math") -> dict[str, Any]:
    """``agent/<name>/...`` over the prompts the agent trains on (``own``, [B] of them;
    under ``rollout.dynamic_sampling`` its prompts of every round of the step). For code
    answers (behaviour keys) ``parse_rate`` is the share of programs that ran on the
    public inputs, and accuracy against gold is the tests' pass rate, which only the
    ``ground_truth`` source runs (its ``acc``); a key is never compared with a gold string."""
    p = f"agent/{a.name}/"
    G = a.advantages.shape[1]
    rows = torch.tensor([b * G + g for b in own for g in range(G)], dtype=torch.long)  # [B x G]
    scored = a.reward.scored.select(list(own))
    r = scored.rewards  # [B, G]
    out: dict[str, Any] = {
        p + "reward/mean": float(r.mean()), p + "reward/std": float(r.std(unbiased=False)),
        p + "reward/group_std": group_reward_std(r),
        p + "answer_diversity": answer_diversity([a.votes[b] for b in own]),
        p + "teacher_abstain": float((~scored.valid).float().mean()),
        p + "parse_rate": float(np.mean([x is not None for b in own for x in a.answers[b]])),
        p + "completion_len": float(a.lengths[rows].float().mean()),
        p + "truncated": float(np.mean([not a.finished[n] for n in rows.tolist()])),
        p + "zero_adv_groups": float((a.advantages[list(own)] == 0).all(dim=1).float().mean()),
    }
    if answer_kind != "code":
        out.update(gold_metrics(p, a, own, problems, grader))
    out.update({p + k: v for k, v in a.update.items()})
    out.update({p + k: v for k, v in a.dyn.items()})  # rollout.dynamic_sampling only
    out.update({p + k: v for k, v in a.reward.metrics.items()})
    return out


def gold_metrics(p: str, a: AgentStep, own: tuple[int, ...], problems: list[Problem],
                 grader) -> dict[str, float]:
    """Accuracies against gold, where problems have it (never used by a label-free reward):
    of the teacher labels, of the agent's own votes, of its answers, per task family."""
    with_gold = [b for b in own if problems[b].gold is not None]
    if not with_gold:
        return {}
    out: dict[str, float] = {}
    labelled = [b for b in with_gold if a.reward.labels[b] is not None]
    if labelled:
        out[p + "pseudo_label/acc"] = float(np.mean(
            [gold_match(a.reward.labels[b], problems[b], grader) for b in labelled]))
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
