"""CoMAS: co-evolving agents by interaction rewards (Xue et al., arXiv 2510.08529), as a
recipe of its own (``vlcohort train`` with ``method: comas``).

Agents discuss each problem; every turn of the discussion is a rollout of the agent that
wrote it, rewarded by what a peer judge said of it, and each agent takes one update on all
of its turns. A agents, B problems per step, G independent discussions per problem
(``rollout.rollouts_per_prompt``, CoMAS's n_samples_per_prompt), R rounds
(``comas.rounds``); one thread = one discussion, T = B x G threads:

    round r, every thread t, every agent a:
      solution  agent a solves the problem; the prompt shows the discussion so far: none in
                round 1, from round 2 ``comas.references`` (2) of round r-1's (solution,
                critique) pairs of thread t, a random subset, the same for every solver
                of t                                                      T*A turns
      critique  the critic of slot (t, a) lists the solution's errors      T*A turns
      judge     the judge of slot (t, a) reads both and writes <score>s</score>,
                s in [score_min, score_max]                               T*A turns
    roles       ``comas.roles=shuffled`` (default, CoMAS's rule): per round the balanced
                list [0..A-1] x T is shuffled once for the critics, once for the judges,
                so every agent critiques T and judges T solutions a round, its own
                included | ``offset``: critic a + critic_offset, judge a + judge_offset
                (mod A), three different agents
    rewards     solution (s - min) / (max - min), critique the complement (zero-sum),
                judge 0; a score that cannot be read: judge malformed_penalty (-1), its
                solution and critique no reward and out of the update (counted)
    update      per agent: its turns' returns (less the reward-side KL when
                grpo.kl_in_reward) -> REINFORCE++ advantages, normalised over the agent's
                whole batch (no group baseline) -> one ``update_agent`` call: one
                optimizer step, or with ``grpo.mini_batch_seqs`` one per that many turns
                of the batch in a seeded shuffled order (CoMAS: train_batch_size 64);
                the loss as ``grpo`` sets it (the paper recipe: ``loss_agg=bnpo`` over
                micro-batches of 2, ``is_mode=off``, as the published trainer)

Each agent writes R x T turns of each kind per step. The shuffles and the reference
subsets come from :func:`round_rng` (run.seed, step, round), so a run and its resume draw
alike. Everything is generated and scored before any agent updates, as in the cohort step.

What follows CoMAS's published code (the MARTI workflow ``marti/worlds/workflows/comas.py``,
its reward ``marti/verifiers/comas_reward.py`` and ``scripts/train_comas.sh``, read in the
public fork github.com/wt-2048/comas): one discussion per agent per problem and round, the
shuffled balanced critics and scorers, num_references = 2 earlier discussions shown as
numbered (solution, evaluation) blocks (the scores not shown), the 1-3 score and its three
standards (3: correct, no objection holds; 2: minor real mistakes, still correct; 1: a
fatal mistake), the solution reward (s - 1) / 2, the evaluation reward 1 - (s - 1) / 2, the
scorer's 0, REINFORCE++ (OpenRLHF's ``reinforce`` estimator, gamma 1: returns normalised
over the agent's replay buffer, token-weighted), one policy per agent, and its loss
(the paper recipe in ``configs/``; ``tests/test_comas_parity.py``): packed
micro-batches of 2 turns, each a token mean (marti/models/loss.py ``PolicyLoss`` over one
packed row), averaged over an optimizer step's 32 by DeepSpeed's gradient accumulation
and its 2 actor ranks (``grpo.loss_agg=bnpo``), and no correction between the sampler's
and the policy's log-probs (``grpo.is_mode=off``: the sampler's are never read). Our default
instructions paraphrase the published prompts (solver: problem, discussion, answer in
\\boxed{}; evaluator: list every error briefly, do not retell the reasoning; scorer: the
three standards, a short reason, then the score in <score></score>).

Where we depart, and why:
- the PPO ratio is against the policy's log-probs before the update, as PPO's: the
  fork's experience maker (marti/trainers/experience_maker.py) sets no
  ``action_log_probs``, and its trainer's fallback (trainer.py
  ``_ensure_old_logprobs``) fills in zeros, so its ratio is exp(logp), the token's
  probability (its comment means ratio 1, an on-policy update): a token of probability
  below 0.8 with a negative advantage gets no gradient there;
- an unreadable score: the published reward gives the scorer -1 and the solution and
  evaluation 0, still trained on; here the scorer gets ``malformed_penalty`` (-1) and the
  solution and critique are left out of the update and counted
  (``comas/judge_unparsed``): a 0 there is a made-up verdict, the worst score for both
  (as if the solution and its critique had each lost), and a counted skip is never a
  silent zero reward;
- the score is read strictly, only from the judge's own reply, as ``<score>N</score>``; all
  tags there must agree (two different scores, none, a non-integer or one out of range:
  unreadable). The fork's parser instead takes the first tag, clamps its number into
  1-3, falls back to the last digit 1-3 anywhere in the text, and to a neutral 2 when
  nothing parses, so its -1 never fires: a policy would learn that omitting the tag costs
  nothing (a free 2). Score tags and image placeholders inside
  quoted solutions and critiques are defused before the judge sees them, so a solution
  cannot plant a score;
- the draws are seeded per (run.seed, step, round), not from numpy's global state, so a
  resumed run repeats the straight run's roles and references; ``comas.roles=offset``
  keeps a rotation where an agent never critiques or scores its own work;
- one solver instruction for every task: the published code has a math, a coding (a
  Python block) and a science (a decimal in \\boxed{}) variant of each prompt, picked by
  the data's task column; here ``comas.*_instruction`` are one text each;
- the learning-rate schedule advances once per step (``optim.*`` over ``run.steps``); the
  published one advances per optimizer step over a length of problems x
  n_samples_per_prompt / train_batch_size (125), as if each problem gave one sequence,
  while each agent trains on some 3 x rounds turns per discussion, so its cosine runs past
  its end;
- a turn whose prompt does not render (longer than ``data.max_prompt_tokens``, an image
  for a text-only agent) is skipped with the turns that depend on it, counted in
  ``comas/skipped_turns``; problems that some agent cannot render at all are skipped at
  selection (``step.next_prompts``) as in every recipe;
- images: a problem's pictures go with it into every turn of its thread (a critic or a
  judge of a figure problem needs the figure), so VLM agents work; a text-only agent
  cannot take a figure problem (skipped and counted, as in the cohort recipe);
- one process (agents may sit on different GPUs, ``agents.N.device``), or one rank per
  agent under torchrun (``distributed.ranks_per_agent=1``, DeepSpeed ZeRO per agent):
  each rank writes its own agent's turns and, after each kind of turn, all-gathers the
  texts (:func:`share_texts`), so every rank holds the whole discussion, draws the same
  seeded roles and computes the same rewards; each rank updates only its agent. Several
  ranks per agent are refused (an agent group would have to split the discussion's
  turns). The published run uses Ray, ZeRO-3, Adam offload and vLLM engines per agent.

Gold answers, where the data has them, are read only for metrics (``agent/<a>/acc`` of
the solutions), never for a reward.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from vlcohort import run_folder, runlock
from vlcohort.config import Config
from vlcohort.data.problems import Problem
from vlcohort.processors import ProblemInputError, RenderedPrompt, format_options
from vlcohort.processors.base import IMAGE_PLACEHOLDER
from vlcohort.recipes import cohort
from vlcohort.recipes.driver import Recipe, TrainingError, drive, step_schedules
from vlcohort.recipes.step import Run, take_prompts
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.seeds import step_rollout_seed
from vlcohort.training import grpo
from vlcohort.training.distributed import launched_rank, launched_world_size, split
from vlcohort.training.rewards import extract_all, gold_match
from vlcohort.training.update import kl_reward, trains_without_advantage, update_agent

#: Every turn of the run, one JSON line each, in the run folder.
DISCUSSIONS = "discussions.jsonl"

#: The three kinds of turn, in the order a round takes them.
KINDS = ("solution", "critique", "judge")

#: ``<score>N</score>`` in a judge's reply (the number checked apart).
SCORE_TAG = re.compile(r"<\s*score\s*>(.*?)<\s*/\s*score\s*>", re.IGNORECASE | re.DOTALL)
#: Anything that opens or closes a score tag, defused in quoted texts.
SCORE_MARK = re.compile(r"<(\s*/?\s*)score(\s*)>", re.IGNORECASE)

#: The keys this recipe logs beyond the cohort's are documented in ``METRIC_DOCS``
#: (``vlcohort/monitoring/metrics.py``, the CoMAS block).


# ============================================================================ pure parts


def parse_score(text: str, lo: int, hi: int) -> tuple[int | None, str]:
    """The score of a judge reply and why not: ``(s, "ok")`` when every ``<score>`` tag of
    ``text`` holds the same integer s in [lo, hi]; else ``(None, reason)``, reason one of
    no_score | not_integer | several_scores | out_of_range."""
    found = [f.strip() for f in SCORE_TAG.findall(text)]
    if not found:
        return None, "no_score"
    if not all(re.fullmatch(r"[+-]?\d+", f) for f in found):
        return None, "not_integer"
    values = {int(f) for f in found}
    if len(values) > 1:
        return None, "several_scores"
    (s,) = values
    if not lo <= s <= hi:
        return None, "out_of_range"
    return s, "ok"


def turn_rewards(scores: Sequence[int | None], lo: int, hi: int, penalty: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards of n scored (solution, critique, judge) triples: solution (s - lo) / (hi -
    lo), critique its complement, judge 0; a score of None (unreadable): judge ``penalty``,
    and the triple's solution and critique invalid (no reward). Returns solution [n],
    critique [n], judge [n] rewards and the readable mask [n]."""
    valid = torch.tensor([s is not None for s in scores], dtype=torch.bool)  # [n]
    s = torch.tensor([float(x) if x is not None else float(lo) for x in scores])  # [n]
    sol = torch.where(valid, (s - lo) / (hi - lo), torch.zeros_like(s))  # [n]
    crit = torch.where(valid, 1.0 - sol, torch.zeros_like(s))  # [n]
    judge = torch.where(valid, torch.zeros_like(s), torch.full_like(s, float(penalty)))  # [n]
    return sol, crit, judge, valid


def quoted(text: str) -> str:
    """A turn's text as others see it: score tags and image placeholders defused, so a
    quoted solution can neither plant a score nor shift the images."""
    text = SCORE_MARK.sub(lambda m: f"[{m.group(1).strip()}score]", text)
    return IMAGE_PLACEHOLDER.sub("[image]", text).strip()


def question_text(problem: Problem) -> str:
    """The problem as every turn shows it: its text, then its options."""
    text = problem.text or ""
    if problem.options:
        text += "\n" + format_options(problem.options)
    return text


def solution_text(problem: Problem, references: Sequence[tuple[str, str]], instruction: str) -> str:
    """A solution turn's user text: the problem, the discussion so far (``references``:
    earlier (solution, critique) pairs, shown as numbered discussions; none in round 1),
    the instruction."""
    parts = [f"Problem:\n{question_text(problem)}", "The discussion so far, for reference:"]
    if references:
        for k, (sol, crit) in enumerate(references, 1):
            parts.append(f"Discussion {k}\nSolution:\n{quoted(sol)}\n\nEvaluation:\n{quoted(crit)}")
    else:
        parts.append("(no discussion yet)")
    parts.append(instruction)
    return "\n\n".join(parts)


def critique_text(problem: Problem, solution: str, instruction: str) -> str:
    return (f"Problem:\n{question_text(problem)}\n\nThe solution to evaluate:\n"
            f"{quoted(solution)}\n\n{instruction}")


def judge_text(problem: Problem, solution: str, critique: str, instruction: str) -> str:
    return (f"Problem:\n{question_text(problem)}\n\nThe solution to score:\n{quoted(solution)}\n\n"
            f"The evaluation of the solution:\n{quoted(critique)}\n\n{instruction}")


#: ``comas.roles``: who critiques and who scores each solution (config_checks names them).
ROLE_RULES = ("shuffled", "offset")

#: The seeded draws of a round, each from its own stream (:func:`round_rng`); an agent's
#: update order is draw DRAW_BATCH + its index (round 0).
DRAW_REFERENCES, DRAW_CRITICS, DRAW_JUDGES, DRAW_BATCH = 0, 1, 2, 3


def round_rng(seed: int, step: int, rnd: int, draw: int) -> np.random.Generator:
    """The generator of one draw (``DRAW_*``) of one round: a pure function of (run.seed,
    step, round, draw), so a resumed run draws what the straight run did, and the
    references, critics and judges never share a stream."""
    return np.random.default_rng([seed & (2**63 - 1), step, rnd, draw])


def roles(A: int, critic_offset: int, judge_offset: int) -> list[tuple[int, int, int]]:
    """[A] (solver, critic, judge) of each solver a under ``comas.roles=offset``: the two
    peers by rotation."""
    return [(a, (a + critic_offset) % A, (a + judge_offset) % A) for a in range(A)]


def shuffled_roles(A: int, threads: int, critics: np.random.Generator,
                   judges: np.random.Generator) -> tuple[list[int], list[int]]:
    """``comas.roles=shuffled`` (CoMAS's rule) for one round of ``threads`` discussions of A
    solutions each: the balanced list (0..A-1 once per discussion) shuffled by ``critics``
    gives the critic of slot t * A + a (thread t, solver a), shuffled again by ``judges``
    its judge. Each agent critiques ``threads`` solutions and judges ``threads``; nothing
    keeps an agent from its own solution or critique. Returns critic [T*A], judge [T*A]."""
    order = np.tile(np.arange(A), threads)  # [T*A]
    crit, judge = order.copy(), order.copy()
    critics.shuffle(crit)
    judges.shuffle(judge)
    return crit.tolist(), judge.tolist()


def round_roles(cfg: Config, A: int, threads: int, step: int, rnd: int
                ) -> tuple[list[int], list[int]]:
    """Critic [T*A] and judge [T*A] of every slot t * A + a of a round, by ``comas.roles``."""
    c = cfg.comas
    if c.roles == "offset":
        triples = roles(A, c.critic_offset, c.judge_offset)
        return ([triples[a][1] for _ in range(threads) for a in range(A)],
                [triples[a][2] for _ in range(threads) for a in range(A)])
    return shuffled_roles(A, threads, round_rng(cfg.run.seed, step, rnd, DRAW_CRITICS),
                          round_rng(cfg.run.seed, step, rnd, DRAW_JUDGES))


def pick_references(available: int, k: int, rng: np.random.Generator) -> list[int]:
    """min(k, available) distinct indices of ``available`` earlier discussions, in the order
    drawn (CoMAS shows a random subset of ``num_references``)."""
    return [int(i) for i in rng.choice(available, size=min(k, available), replace=False)]


# ============================================================================ turns


@dataclass
class Turn:
    """One turn of a discussion: who wrote it, in which thread / round, for whom."""

    kind: str  # solution | critique | judge
    agent: int  # the agent that writes it
    thread: int  # b * G + g
    round: int  # 1..R
    solver: int  # the solver whose solution this turn belongs to
    rendered: RenderedPrompt | None = None
    text: str = ""
    row: int = -1  # its row in the agent's rollouts of that (round, kind)
    reward: float = 0.0
    valid: bool = False  # generated and rewarded (trained on)
    score: int | None = None  # judge turns: the score read from the reply (None: unreadable)
    references: list[int] = field(default_factory=list)  # solution turns: the solvers of the
    # previous round's discussions shown, in the order shown


@dataclass
class Discussion:
    """One step's discussions: problems [B], the turns, each agent's rollouts per
    (round, kind), the scores and the skip counts."""

    problems: list[Problem]
    turns: list[Turn] = field(default_factory=list)
    rollouts: dict[tuple[int, int, str], Rollouts] = field(default_factory=dict)  # (agent, round, kind)
    scores: list[tuple[int | None, str]] = field(default_factory=list)  # per judge turn generated
    skipped: int = 0


def _render(run: Run, agent: int, problem: Problem, text: str, thread: int, kind: str,
            rnd: int) -> RenderedPrompt:
    """A turn's prompt through agent ``agent``'s adapter: the problem's images, the turn's
    text (raises ProblemInputError when it does not render)."""
    cfg = run.cfg
    turn_problem = Problem(id=f"{problem.id}#{thread}/{rnd}/{kind}", text=text,
                           images=list(problem.images), options=[], meta=dict(problem.meta))
    return run.adapters[agent].render(turn_problem, cfg.prompt.system_prompt, None,
                                      max_tokens=cfg.data.max_prompt_tokens)


def _generate(run: Run, step: int, turns: list[Turn], rnd: int, kind: str,
              disc: Discussion) -> None:
    """Every agent writes its rendered turns of (round, kind) in one generate call."""
    cfg = run.cfg
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    index = (rnd - 1) * len(KINDS) + KINDS.index(kind)
    for i, agent in zip(run.local, run.agents):
        mine = [t for t in turns if t.agent == i and t.rendered is not None]
        if not mine:
            continue
        seed = step_rollout_seed(cfg.run.seed, step, i, 0, index)
        with agent.generation_context():
            ro = agent.engine.generate([t.rendered for t in mine], 1, sampling, seed=seed)
        disc.rollouts[(i, rnd, kind)] = ro
        for row, t in enumerate(mine):
            t.text, t.row = ro.texts[row], row
    if run.layout.distributed:
        share_texts(run, turns, rnd, kind, disc)


def share_texts(run: Run, turns: list[Turn], rnd: int, kind: str, disc: Discussion) -> None:
    """Agent groups: the texts each rank's agent wrote for (round, kind), all-gathered, so
    every rank fills in the other agents' turns and holds the whole discussion (the next
    kind's prompts quote them; every rank scores every judge turn). Rows follow the same
    rendered-turn order on every rank, since every rank renders every agent's turns."""
    mine = {i: list(disc.rollouts[(i, rnd, kind)].texts) for i in run.local
            if (i, rnd, kind) in disc.rollouts}
    for piece in run.layout.gather(mine, f"the {kind} turns of round {rnd}"):
        for i, texts in piece.items():
            if i in run.local:
                continue
            theirs = [t for t in turns if t.agent == i and t.rendered is not None]
            if len(theirs) != len(texts):
                raise TrainingError(f"comas: agent {run.names[i]} wrote {len(texts)} {kind} turns "
                                    f"of round {rnd} on its rank, {len(theirs)} expected here: "
                                    "the ranks rendered different prompts")
            for row, t in enumerate(theirs):
                t.text, t.row = texts[row], row


def discuss(run: Run, step: int, problems: list[Problem]) -> Discussion:
    """All rounds of every thread: solutions, critiques, judges, scores and rewards.

    Round r, thread t: every agent a writes a solution (r > 1: seeing ``comas.references``
    of round r-1's (solution, critique) pairs of thread t, one draw per thread); the
    critic and the judge of slot (t, a) come from :func:`round_roles`."""
    cfg, c = run.cfg, run.cfg.comas
    A, G = len(run.names), cfg.rollout.rollouts_per_prompt
    disc = Discussion(problems=list(problems))
    threads = [(b, g) for b in range(len(problems)) for g in range(G)]
    T = len(threads)
    earlier: dict[int, list[tuple[int, str, str]]] = {t: [] for t in range(T)}
    for rnd in range(1, c.rounds + 1):
        critic_of, judge_of = round_roles(cfg, A, T, step, rnd)  # [T*A] each
        refs_rng = round_rng(cfg.run.seed, step, rnd, DRAW_REFERENCES)
        sols: dict[tuple[int, int], Turn] = {}
        for t, (b, _) in enumerate(threads):
            shown = [earlier[t][i] for i in pick_references(len(earlier[t]), c.references, refs_rng)]
            body = solution_text(problems[b], [(sol, crit) for _, sol, crit in shown],
                                 c.solution_instruction)
            for a in range(A):
                turn = Turn("solution", a, t, rnd, a, references=[solver for solver, _, _ in shown])
                turn.rendered = _try_render(run, disc, a, problems[b], t, rnd, "solution", body)
                sols[(t, a)] = turn
        _generate(run, step, list(sols.values()), rnd, "solution", disc)
        crits: dict[tuple[int, int], Turn] = {}
        for (t, a), sol in sols.items():
            critic = critic_of[t * A + a]
            turn = Turn("critique", critic, t, rnd, a)
            if sol.rendered is not None:
                b = threads[t][0]
                turn.rendered = _try_render(run, disc, critic, problems[b], t, rnd, "critique",
                                            critique_text(problems[b], sol.text,
                                                          c.critique_instruction))
            else:
                disc.skipped += 1
            crits[(t, a)] = turn
        _generate(run, step, list(crits.values()), rnd, "critique", disc)
        judges: dict[tuple[int, int], Turn] = {}
        for (t, a), crit in crits.items():
            judge = judge_of[t * A + a]
            turn = Turn("judge", judge, t, rnd, a)
            if crit.rendered is not None:
                b = threads[t][0]
                turn.rendered = _try_render(run, disc, judge, problems[b], t, rnd, "judge",
                                            judge_text(problems[b], sols[(t, a)].text, crit.text,
                                                       c.judge_instruction))
            else:
                disc.skipped += 1
            judges[(t, a)] = turn
        _generate(run, step, list(judges.values()), rnd, "judge", disc)
        score_round(run, disc, sols, crits, judges)
        for t in range(T):
            earlier[t] = [(a, sols[(t, a)].text, crits[(t, a)].text)
                          for a in range(A) if crits[(t, a)].rendered is not None]
    return disc


def _try_render(run: Run, disc: Discussion, agent: int, problem: Problem, thread: int,
                rnd: int, kind: str, body: str) -> RenderedPrompt | None:
    """:func:`_render`, or None (counted in ``disc.skipped`` and the run's skipped records
    as ``comas_turn_<reason>``) when the prompt does not render."""
    try:
        return _render(run, agent, problem, body, thread, kind, rnd)
    except ProblemInputError as e:
        disc.skipped += 1
        reason = getattr(e, "reason", type(e).__name__)
        run.skipped_records[f"comas_turn_{reason}"] = run.skipped_records.get(
            f"comas_turn_{reason}", 0) + 1
        return None


def score_round(run: Run, disc: Discussion, sols: dict, crits: dict, judges: dict) -> None:
    """Each generated judge turn's score -> the rewards of its triple (:func:`turn_rewards`)."""
    c = run.cfg.comas
    keys = [k for k, j in judges.items() if j.rendered is not None]
    parsed = [parse_score(judges[k].text, c.score_min, c.score_max) for k in keys]
    disc.scores += parsed
    sol_r, crit_r, judge_r, valid = turn_rewards([s for s, _ in parsed], c.score_min,
                                                 c.score_max, c.malformed_penalty)
    for n, k in enumerate(keys):
        judges[k].reward, judges[k].valid, judges[k].score = float(judge_r[n]), True, parsed[n][0]
        if bool(valid[n]):
            sols[k].reward, sols[k].valid = float(sol_r[n]), True
            crits[k].reward, crits[k].valid = float(crit_r[n]), True
    disc.turns += [*sols.values(), *crits.values(), *judges.values()]


# ============================================================================ update


@dataclass
class Batch:
    """One agent's trained turns: renderings [N], rollouts [N x 1], returns [N]."""

    turns: list[Turn]
    rendered: list[RenderedPrompt]
    rollouts: Rollouts | None
    rewards: torch.Tensor  # [N]


def agent_batch(disc: Discussion, i: int) -> Batch:
    """Agent ``i``'s rewarded turns, in (round, kind) order, as one batch."""
    turns, parts = [], []
    for (a, rnd, kind), ro in sorted(disc.rollouts.items(),
                                     key=lambda kv: (kv[0][1], KINDS.index(kv[0][2]))):
        if a != i:
            continue
        mine = sorted((t for t in disc.turns if t.agent == i and t.round == rnd and t.kind == kind
                       and t.valid), key=lambda t: t.row)
        if mine:
            parts.append(ro.select_prompts([t.row for t in mine]))  # [n x 1]
            turns += mine
    rollouts = None
    for p in parts:
        rollouts = p if rollouts is None else rollouts.concat(p)
    return Batch(turns, [t.rendered for t in turns], rollouts,
                 torch.tensor([t.reward for t in turns], dtype=torch.float32))


def shuffled_batch(batch: Batch, order: Sequence[int]) -> Batch:
    """``batch`` with its turns in ``order`` (a permutation of its rows)."""
    assert batch.rollouts is not None
    order = list(order)
    return Batch([batch.turns[k] for k in order], [batch.rendered[k] for k in order],
                 batch.rollouts.select_prompts(order), batch.rewards[order])


def update_order(cfg: Config, step: int, i: int, n: int) -> list[int]:
    """The order agent ``i`` takes its n turns in when ``grpo.mini_batch_seqs`` splits its
    update into several optimizer steps: a seeded permutation (run.seed, step, agent), as
    OpenRLHF's shuffled replay buffer, so no mini-batch is all solutions of round 1."""
    return round_rng(cfg.run.seed, step, 0, DRAW_BATCH + i).permutation(n).tolist()


def update_one(run: Run, i: int, agent, batch: Batch, advantage: str | None = None
               ) -> tuple[dict[str, float], torch.Tensor | None]:
    """Returns (less the reward-side KL) -> ``advantage`` (a ``grpo.RETURN_NORMALISERS``
    name; None: ``comas.advantage``) -> one update of agent ``i``; the update's metrics and
    the advantages [N] (None: no update). MAPoRL (``recipes/maporl.py``) passes its own."""
    cfg = run.cfg
    if batch.rollouts is None:
        return {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0}, None
    returns, old, extra = batch.rewards.clone(), None, {}
    if cfg.grpo.kl_in_reward and cfg.grpo.kl_coef > 0:  # REINFORCE++: KL charged to the reward
        kr = kl_reward(agent, batch.rendered, batch.rollouts, cfg.grpo, cfg.rollout.temperature)
        returns = returns - kr.penalty.to(returns.dtype)  # [N]
        old, extra = kr.old, {"kl": kr.kl}
    tokens = batch.rollouts.lengths().float()  # [N]
    adv = grpo.RETURN_NORMALISERS[advantage or cfg.comas.advantage](returns, tokens, None)  # [N]
    if not bool((adv != 0).any()) and not trains_without_advantage(cfg.grpo):
        return {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0, **extra}, adv
    out = update_agent(agent, batch.rendered, batch.rollouts, adv, cfg.grpo,
                       cfg.rollout.temperature, length_norm=cfg.rollout.max_new_tokens, old=old)
    out.pop("weight_push_s", None)
    return {**out, **extra}, adv


# ============================================================================ the step


def comas_step(run: Run, step: int) -> dict[str, Any]:
    """One CoMAS step: B problems -> R rounds of discussion -> rewards -> one update per
    agent -> the step's metrics record."""
    t_step = time.perf_counter()
    t0 = time.perf_counter()
    problems = take_prompts(run).problems  # [B] every agent renders them; bad ones counted, replaced
    disc = discuss(run, step, problems)
    t_rollout = time.perf_counter() - t0
    t0 = time.perf_counter()
    parts: dict[str, Any] = {}
    for i, agent in zip(run.local, run.agents):
        batch = agent_batch(disc, i)
        if run.cfg.grpo.mini_batch_seqs and batch.rollouts is not None:  # several steps
            batch = shuffled_batch(batch, update_order(run.cfg, step, i, len(batch.turns)))
        metrics, _ = update_one(run, i, agent, batch)
        name = run.names[i]
        parts.update({f"agent/{name}/{k}": v for k, v in metrics.items()})
        parts.update(agent_metrics(run, disc, i, batch))
    step_schedules(run.agents)
    t_update = time.perf_counter() - t0
    # agent groups: each rank's agents' metrics into one record on every rank (the loop
    # decides from it alike), timings the slowest rank's; one process: this record
    record: dict[str, Any] = {"step": step}
    timing = {"timing/rollout": t_rollout, "timing/update": t_update}
    for piece, times in run.layout.gather((parts, timing), "the step's metrics"):
        record.update(piece)
        timing = {k: max(v, times[k]) for k, v in timing.items()}
    record.update(step_metrics(disc))
    if run.talks:  # every rank holds every turn; the logger rank writes them
        log_turns(run, step, disc)
    record.update({**timing, "timing/step": time.perf_counter() - t_step})
    if cohort.evaluates_at(run, step):
        record.update(cohort.evaluate(run, step))
    return record


def agent_metrics(run: Run, disc: Discussion, i: int, batch: Batch) -> dict[str, float]:
    """``agent/<a>/...``: the rewards of each kind, the judge parse rate, the turns trained,
    completion length and truncation over the agent's generated turns, and (the solutions')
    answer parse rate and accuracy against gold where the data has it."""
    p = f"agent/{run.names[i]}/"
    mine = [t for t in disc.turns if t.agent == i and t.rendered is not None]
    out: dict[str, float] = {p + "comas/turns": float(len(batch.turns))}
    if batch.turns:
        out[p + "reward/mean"] = float(batch.rewards.mean())
        out[p + "reward/std"] = float(batch.rewards.std(unbiased=False))
    for kind in KINDS:
        got = [t.reward for t in mine if t.kind == kind and t.valid]
        if got:
            out[f"{p}comas/{kind}_reward"] = float(np.mean(got))
    judged = [t for t in mine if t.kind == "judge"]
    if judged:
        out[p + "comas/judge_parse_rate"] = float(np.mean([t.score is not None for t in judged]))
    rolls = [ro for (a, _, _), ro in disc.rollouts.items() if a == i]
    if rolls:
        out[p + "completion_len"] = float(torch.cat([r.lengths() for r in rolls]).float().mean())
        out[p + "truncated"] = float(np.mean([not f for r in rolls for f in r.finished]))
    sols = [t for t in mine if t.kind == "solution"]
    if sols:
        answers = extract_all([[t.text] for t in sols], run.cfg.reward.answer_style)
        out[p + "parse_rate"] = float(np.mean([a[0] is not None for a in answers]))
        G = run.cfg.rollout.rollouts_per_prompt
        hits = [gold_match(a[0], disc.problems[t.thread // G], run.grader)
                for t, a in zip(sols, answers)]
        hits = [h for h in hits if h is not None]
        if hits:
            out[p + "acc"] = float(np.mean(hits))
    return out


def step_metrics(disc: Discussion) -> dict[str, float]:
    """``comas/...``: the judges' parse rate and unreadable counts by reason, the mean
    readable score, the skipped turns."""
    out: dict[str, float] = {"comas/skipped_turns": float(disc.skipped)}
    if disc.scores:
        bad = [why for s, why in disc.scores if s is None]
        out["comas/judge_parse_rate"] = 1.0 - len(bad) / len(disc.scores)
        out["comas/judge_unparsed"] = float(len(bad))
        for why in sorted(set(bad)):
            out[f"comas/judge_unparsed/{why}"] = float(bad.count(why))
        good = [s for s, _ in disc.scores if s is not None]
        if good:
            out["comas/score_mean"] = float(np.mean(good))
    return out


def log_turns(run: Run, step: int, disc: Discussion) -> None:
    """One line per turn in ``discussions.jsonl``: who wrote what for whom, its score (judge
    turns), reward, whether it was trained on and (solution turns) whose earlier
    discussions it was shown."""
    G = run.cfg.rollout.rollouts_per_prompt
    with run_folder.open_append(run.dir / DISCUSSIONS) as f:
        for t in disc.turns:
            f.write(json.dumps({
                "step": step, "round": t.round, "problem": disc.problems[t.thread // G].id,
                "thread": t.thread, "kind": t.kind, "agent": run.names[t.agent],
                "solver": run.names[t.solver], "generated": t.rendered is not None,
                "score": t.score, "reward": t.reward if t.valid else None,
                "trained": t.valid, "references": [run.names[a] for a in t.references],
                "text": t.text}) + "\n")


# ============================================================================ the run


def truncate_log(run_dir: Path, step: int) -> None:
    """Keep the ``discussions.jsonl`` lines of steps <= ``step`` (a resumed or fresh run
    writes the rest again)."""
    path = run_dir / DISCUSSIONS
    if not run_folder.refuse_link(path).is_file():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and step and json.loads(line)["step"] <= step]
    run_folder.write_text(path, "".join(line + "\n" for line in keep))


def summary_line(run: Run, record: dict[str, Any]) -> str:
    """The progress line of a CoMAS step."""
    bits = [f"step {record['step']}"]
    if "comas/judge_parse_rate" in record:
        bits.append(f"judge_parse={record['comas/judge_parse_rate']:.2f}")
    if "comas/score_mean" in record:
        bits.append(f"score={record['comas/score_mean']:.2f}")
    for name in run.names:
        r = record.get(f"agent/{name}/reward/mean")
        if r is not None:
            bits.append(f"{name}: r={r:.2f}")
    return " ".join(bits) + f" | {record.get('timing/step', 0):.1f}s"


def roles_line(cfg: Config) -> str:
    """How the run's critics and judges are chosen, for its opening line."""
    c, A = cfg.comas, len(cfg.agents)
    if c.roles == "offset":
        return f"critic a+{c.critic_offset}, judge a+{c.judge_offset} (mod {A})"
    return "critics and judges shuffled per round, each agent equally often (seeded)"


def run_comas(cfg: Config, resume: str | Path | None = None) -> int:
    """A whole CoMAS run (``vlcohort train`` with ``method: comas``): the cohort recipe's
    setup, checkpoints, resume and cleanup; this module's step."""
    c = cfg.comas
    A, B, G = len(cfg.agents), cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    if launched_rank() == 0:
        print(f"# comas: {A} agents, {B} problems x {G} discussions x {c.rounds} rounds per step; "
              f"each agent writes {B * G * c.rounds} solutions, critiques and judge turns each "
              f"({3 * B * G * c.rounds} sequences in its update at most); {roles_line(cfg)}; "
              f"{c.references} earlier discussions shown from round 2; score "
              f"{c.score_min}-{c.score_max}, unreadable {c.malformed_penalty}; advantages {c.advantage}")
    W = launched_world_size()
    if W > 1 and split(W, A, cfg.distributed.ranks_per_agent) > 1:
        raise TrainingError(f"method=comas under torchrun takes one rank per agent: launch "
                            f"--nproc_per_node {A} with distributed.ranks_per_agent=1 (several "
                            "ranks per agent are not supported)")
    with runlock.released_on_error(Path(resume) if resume is not None else Path(cfg.run.output_dir)):
        run = cohort.setup(cfg, resume)
        if run.talks:
            truncate_log(run.dir, run.step)
    # agent groups: each rank is interrupted on its own, so no collective save on Ctrl-C
    # (as the cohort recipe); resume from the last periodic checkpoint
    return drive(run, Recipe(step=comas_step, save=cohort.save, cleanup=cohort.cleanup,
                             summary=summary_line, start=cohort.start,
                             save_on_interrupt=not run.layout.distributed))
