"""Guided challenger / solver self-play: R-Zero (arXiv 2508.05004) and R-Few (arXiv 2512.02472).

Two agents of any family (text-only or VLM) take turns; ``vlcohort train`` runs it from a
config with ``method: self_play`` (``configs/self_play_tiny.yaml``).

    setup    resolved config saved; problems of ``data.*`` loaded; a small labelled anchor
             pool drawn from them; both agents built; resume from a checkpoint
    step     the challenger sees k anchors (k = 0: R-Zero) and writes B x G questions ->
             parsed (``<question>...</question>``, else reward -1) -> the solver answers
             each m times -> p_hat = share of the largest equivalence class (the grader's)
             -> challenger phase: reward 1 - 2|p_hat - 1/2| - lambda x (share of the step's
             questions in its near-duplicate cluster), GRPO update of the challenger;
             solver phase: questions with p_hat in the band, labelled by their majority
             answer, plus anchor questions graded against gold, GRPO update of the solver
    cleanup  final checkpoint; ``metrics.jsonl``, ``questions.jsonl`` (every question
             written, its p_hat, label, cluster share and reward), ``plots/self_play.png``

Shapes: B challenger prompts per step, G completions per prompt (``rollout.*``), N = B x G
questions, Q of them valid, K anchors in a solver step, m solver samples per question, S
prompts the solver trains on. (V and A keep their meanings of docs/design.md, rule 5:
vocabulary and agents.)

What is faithful (checked against R-Zero's released code, Chengsong-Huang/R-Zero):
- the challenger's output format (``<question>...</question>`` then ``\\boxed{answer}``)
  and its problem-setter / request prompts, adapted from math to any question;
- p_hat: the largest answer class over all m samples (unanswered samples count in the
  denominator and form no class), classes merged by an equivalence grader;
- the repetition penalty: BLEU distance 1 - sentence-BLEU (whitespace tokens, 4-grams,
  nltk's smoothing method 1, the pair scored with the earlier question as hypothesis),
  average-linkage agglomerative clustering stopped at distance 0.5, penalty = cluster
  size / batch size; a question that cannot be parsed gets -1;
- the solver's reward: 0.9 x (answer equals the majority label) + 0.1 x format, trained on
  questions whose p_hat lies in a band; m = 10 (the samples behind the challenger's reward)
  and 5 / 15 challenger / solver steps per iteration by default.

Where we differ, on purpose:
- online, not iterated offline: R-Zero trains the challenger 5 steps, then has the frozen
  challenger write ~8,000 questions, filters them once and trains the solver 15 steps on
  that set. Here every step writes a fresh batch of B x G questions; in a solver phase the
  (frozen) challenger's batch is filtered and trained on at once;
- the challenger's uncertainty term is 1 - 2|p_hat - 1/2| (the R-Zero paper's form, in
  [0, 1]); R-Zero's code uses min(p_hat, 1 - p_hat), half of it, with lambda = 1, so our
  lambda = 2 weighs the penalty as the code does. The reward is not clipped at 0, so of two
  useless questions the duplicated one still ranks lower;
- an unparseable question gets exactly -1 and is not clustered (R-Zero's code clusters the
  empty strings too and subtracts their cluster's share from the -1); a question only
  needs its ``<question>`` block (R-Zero also requires the challenger's ``\\boxed{}``
  answer, which it never uses); a question the solver cannot render (an image
  placeholder without an image, more than 8 options) is invalid the same way;
- one set of m answers per question gives the challenger's p_hat, the solver's filter and
  label, and the solver's GRPO group. R-Zero's code labels the solver's set with 9 fresh
  samples (p_hat there over the answered samples only, and questions mentioning "box" or
  proofs dropped), keeps p_hat in [0.3, 0.8] in its released script, and trains on 5 new
  rollouts per kept question; here the label comes from the trained-on samples, as in
  TTRL, and the band defaults to [0.3, 0.7] (``self_play.band=[0.3, 0.8]`` for the
  script's). The band's ends are included; a tied majority abstains under
  ``reward.tie=abstain`` (R-Zero takes the first maximum: ``reward.tie=first``). The
  format term is "an answer can be extracted" with the run's answer style, not R-Zero's
  ``<think>...</think> \\boxed{}`` regular expression;
- answers are extracted and compared by the one grader (``grading.py``): option letters
  and option texts are one class when a generated question lists options.

R-Few, as far as its published text goes: the challenger's prompt holds k <= 5 examples
drawn at random from a small human-labelled pool (``self_play.anchors_per_prompt``,
``anchor_pool_size``), and the solver trains on generated questions of mid difficulty mixed
with the human examples graded against their gold (``anchors_per_step``,
``anchor_weight``). Its text leaves two things open, and this is what we did:
- the selection rule ("online, difficulty-based curriculum"): either an absolute band on
  p_hat (``band_rule: value``, R-Zero's filter, the default) or a rank-based band, p_hat
  between the step's low- and high-quantile (``band_rule: quantile``);
- the alignment term (keeping generated questions close to the human data): we add no
  reward term for it. Grounding comes only from the anchors shown in context and from the
  gold-graded anchors in the solver's loss; the challenger's reward is R-Zero's.

Images (``self_play.images``): with ``on`` (or ``auto`` when both roles take images and
the pool has them) each challenger prompt shows the picture of one pool item (its first
anchor's, or a random item's when k = 0) and the question written from it carries that
picture; with ``off`` questions are text-only and anchors are shown by their text, so a
text-only challenger or solver works with any pool. A text-only solver cannot answer image
anchors: use text problems, or ``anchors_per_step=0``.
"""


from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from vlcohort import run_folder, runlock
from vlcohort.answers.grading import Grader, get_grader
from vlcohort.config import Config, to_dict, to_yaml
from vlcohort.config_checks import self_play_roles
from vlcohort.data.problems import Problem, split_options
from vlcohort.monitoring.metrics import MetricsLogger, final_summary, read_metrics
from vlcohort.processors import ProblemInputError, RenderedPrompt, format_options
from vlcohort.processors.base import IMAGE_PLACEHOLDER
from vlcohort.recipes.driver import (
    Recipe,
    TrainingError,
    checkpoint_to_resume,
    drive,
    restore_agents,
    save_run,
    seed_everything,
    step_schedules,
)
from vlcohort.recipes.run_problems import load_problems
from vlcohort.recipes.selfplay_math import (
    challenger_rewards,
    distinct_n,
    in_band,
    p_hat_histogram,
    parse_question,
    phase_of,
    repetition_penalties,
    solver_rewards,
)
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.seeds import rollout_seed
from vlcohort.training import checkpoint as ckpt
from vlcohort.training import grpo
from vlcohort.training.agent import Agent, build_agent
from vlcohort.training.distributed import launched_world_size, set_cpu_threads
from vlcohort.training.rewards import extract_all, gold_match, score, vote_all
from vlcohort.training.update import trains_without_advantage, update_agent

# ============================================================================ prompts and questions


def anchor_block(anchor: Problem) -> str:
    """One pool example as the challenger sees it: the question (image placeholders taken
    out, options listed) in the very format it must write, then its gold answer."""
    body = IMAGE_PLACEHOLDER.sub("", anchor.text).strip()
    if anchor.options:
        body += "\n" + format_options(anchor.options)
    return f"<question>\n{body}\n</question>\n\\boxed{{{anchor.gold}}}"


def challenger_text(anchors: Sequence[Problem], request: str, with_image: bool = False) -> str:
    """The challenger's user turn: k examples (none for R-Zero), then the request."""
    parts = []
    if anchors:
        parts.append(f"Here are {len(anchors)} example question(s) with their answers:")
        parts += [f"Example {i}:\n{anchor_block(a)}" for i, a in enumerate(anchors, 1)]
    parts.append(request + (" The question must be about the image." if with_image else ""))
    return "\n\n".join(parts)


def question_problem(question: str, problem_id: str, subject: Problem | None = None) -> Problem:
    """A generated question as a Problem record: options written in it ("Choices: A. ..")
    become its options (so letters and option texts grade as one answer); no gold. With a
    ``subject`` (images on) it carries the subject's pictures."""
    text, options = split_options(question)
    if not text.strip():
        text = question
    meta: dict[str, Any] = {"task": "generated"}
    images: list = []
    if subject is not None and subject.images:
        images = list(subject.images)
        meta["subject"] = subject.id
        if subject.meta.get("base_dir"):
            meta["base_dir"] = subject.meta["base_dir"]
    return Problem(id=problem_id, text=text, images=images, options=options,
                   source="challenger", meta=meta)


def anchor_pool(problems: Sequence[Problem], size: int, seed: int) -> tuple[list[Problem], int]:
    """The small labelled pool: ``size`` problems with gold, drawn with the run seed.
    Returns (pool, number of problems left out for having no gold)."""
    with_gold = [p for p in problems if p.gold is not None and str(p.gold).strip()]
    order = list(range(len(with_gold)))
    random.Random(f"vlcohort.selfplay/pool/{seed}").shuffle(order)
    return [with_gold[i] for i in sorted(order[:size])], len(problems) - len(with_gold)


def usable_pool(pool: Sequence[Problem], agents: Sequence[Agent], cfg: Config
                ) -> tuple[list[Problem], dict[str, int]]:
    """The pool problems every given agent can render (a missing or corrupt image, a
    placeholder mismatch, a prompt over ``data.max_prompt_tokens``...); the others are
    left out and counted by reason, so a bad record never stops a run halfway."""
    kept, broken = [], {}
    for p in pool:
        try:
            for a in agents:
                a.adapter.render(p, cfg.prompt.system_prompt, cfg.prompt.instruction,
                                 max_tokens=cfg.data.max_prompt_tokens)
        except ProblemInputError as e:
            broken[e.reason] = broken.get(e.reason, 0) + 1
            continue
        kept.append(p)
    return kept, broken


# ============================================================================ the run


@dataclass
class SelfPlayRun:
    cfg: Config
    dir: Path
    agents: list[Agent]
    challenger: int  # index into agents
    solver: int
    pool: list[Problem]
    images: bool  # challenger prompts and questions carry a pool item's picture
    logger: MetricsLogger
    grader: Grader
    step: int = 0  # last completed step
    skipped: dict[str, int] = field(default_factory=dict)  # invalid questions by reason
    bad_steps_in_row: int = 0  # steps whose update was skipped for a NaN / inf loss
    talks: bool = True  # one process: it prints

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]

    @property
    def questions_path(self) -> Path:
        return self.dir / "questions.jsonl"


@dataclass
class QuestionBatch:
    """One step's questions: B challenger prompts, N = B x G completions.

    ``problems[n]`` is completion n's question as the solver sees it (None: invalid, with
    ``reasons[n]``); ``rendered_solver[n]`` its rendering for the solver."""

    prompts: list[Problem]  # [B] the challenger's prompts
    rendered: list[RenderedPrompt]  # [B] their rendering by the challenger
    rollouts: Rollouts | None  # N challenger completions (None: hand-given texts)
    texts: list[str]  # [N]
    questions: list[str | None]  # [N] parsed question text
    problems: list[Problem | None]  # [N]
    rendered_solver: list[RenderedPrompt | None]  # [N]
    reasons: list[str | None]  # [N] why invalid

    @property
    def valid(self) -> list[int]:
        return [n for n, p in enumerate(self.problems) if p is not None]


@dataclass
class Answers:
    """The solver's m answers to the Q valid questions and the step's anchors."""

    rollouts: Rollouts | None  # (Q + K) x m rows, questions first
    rendered: list[RenderedPrompt]  # [Q + K]
    problems: list[Problem]  # [Q + K]
    answers: list[list[str | None]]  # [Q + K][m]
    p_hats: list[float]  # [Q]
    labels: list[str | None]  # [Q] majority answers (None: no answer, or a tie that abstains)
    n_questions: int  # Q
    votes: list = field(default_factory=list)  # [Q] the votes (their winning classes reward)


def _draw_prompt(run: SelfPlayRun, step: int, b: int) -> tuple[list[Problem], Problem | None]:
    """The k anchors of challenger prompt b at a step, and its picture's subject: a pure
    function of (seed, step, b), so a resumed run draws what the straight run drew."""
    k = run.cfg.self_play.anchors_per_prompt
    rng = random.Random(f"vlcohort.selfplay/anchors/{run.cfg.run.seed}/{step}/{b}")
    anchors = rng.sample(run.pool, k) if k else []
    subject = None
    if run.images:
        subject = anchors[0] if anchors else rng.choice(run.pool)
    return anchors, subject


def challenger_prompts(run: SelfPlayRun, step: int) -> tuple[list[Problem], list[Problem | None]]:
    """[B] challenger prompts as Problem records, and the subject (picture source) of each."""
    sp = run.cfg.self_play
    prompts, subjects = [], []
    for b in range(run.cfg.rollout.prompts_per_step):
        anchors, subject = _draw_prompt(run, step, b)
        meta: dict[str, Any] = {"anchors": [a.id for a in anchors]}
        if subject is not None and subject.meta.get("base_dir"):
            meta["base_dir"] = subject.meta["base_dir"]
        prompts.append(Problem(
            id=f"challenge-{step}-{b}",
            text=challenger_text(anchors, sp.challenger_request, subject is not None),
            images=list(subject.images) if subject is not None else [], meta=meta))
        subjects.append(subject)
    return prompts, subjects


def parse_batch(run: SelfPlayRun, step: int, prompts: list[Problem], rendered: list[RenderedPrompt],
                subjects: Sequence[Problem | None], texts: Sequence[str],
                rollouts: Rollouts | None = None) -> QuestionBatch:
    """Challenger completions (B x G texts, prompt-major) -> questions the solver can take.

    A completion without a ``<question>`` block, or whose question the solver cannot
    render (an image placeholder without an image, too many options, images for a
    text-only solver), is invalid: counted by reason, reward -1."""
    G = len(texts) // max(1, len(prompts))
    solver = run.agents[run.solver]
    questions = [parse_question(t) for t in texts]
    problems: list[Problem | None] = []
    rendered_solver: list[RenderedPrompt | None] = []
    reasons: list[str | None] = []
    for n, q in enumerate(questions):
        problem = rend = reason = None
        if q is None:
            reason = "unparsed"
        else:
            try:
                problem = question_problem(q, f"gen-{step}-{n}", subjects[n // G])
            except ValueError:  # the Problem record refuses more than 8 options
                reason = "too_many_options"
            if problem is not None:
                try:
                    rend = solver.adapter.render(problem, run.cfg.prompt.system_prompt,
                                                 run.cfg.prompt.instruction,
                                                 max_tokens=run.cfg.data.max_prompt_tokens)
                except ProblemInputError as e:
                    reason, problem = e.reason, None
        problems.append(problem)
        rendered_solver.append(rend)
        reasons.append(reason)
        if reason:
            run.skipped[reason] = run.skipped.get(reason, 0) + 1
    return QuestionBatch(prompts=list(prompts), rendered=list(rendered), rollouts=rollouts,
                         texts=list(texts), questions=questions, problems=problems,
                         rendered_solver=rendered_solver, reasons=reasons)


def write_questions(run: SelfPlayRun, step: int) -> QuestionBatch:
    """The challenger writes G completions for each of its B prompts."""
    cfg, challenger = run.cfg, run.agents[run.challenger]
    prompts, subjects = challenger_prompts(run, step)
    rendered = [challenger.adapter.render(p, cfg.self_play.challenger_system, None)
                for p in prompts]
    sampling = SamplingParams(max_new_tokens=cfg.self_play.question_max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    rollouts = challenger.engine.generate(rendered, cfg.rollout.rollouts_per_prompt, sampling,
                                          seed=rollout_seed(cfg.run.seed, step, run.challenger))
    return parse_batch(run, step, prompts, rendered, subjects, rollouts.texts, rollouts)


def anchor_batch(run: SelfPlayRun, step: int) -> list[Problem]:
    """The pool questions the solver answers at a solver step (seeded by step)."""
    n = min(run.cfg.self_play.anchors_per_step, len(run.pool))
    return random.Random(f"vlcohort.selfplay/solver/{run.cfg.run.seed}/{step}").sample(run.pool, n)


def answer_questions(run: SelfPlayRun, step: int, batch: QuestionBatch,
                     anchors: Sequence[Problem] = ()) -> Answers:
    """The solver answers every valid question and every anchor m times, in one batch;
    p_hat and the majority label of each question come from its m answers."""
    cfg, solver = run.cfg, run.agents[run.solver]
    m = cfg.self_play.solver_samples
    valid = batch.valid
    problems = [batch.problems[n] for n in valid] + list(anchors)
    rendered = [batch.rendered_solver[n] for n in valid]
    rendered += [solver.adapter.render(a, cfg.prompt.system_prompt, cfg.prompt.instruction)
                 for a in anchors]
    if not rendered:
        return Answers(None, [], [], [], [], [], 0)
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    rollouts = solver.engine.generate(rendered, m, sampling,
                                      seed=rollout_seed(cfg.run.seed, step, run.solver))
    answers = extract_all(rollouts.texts_by_prompt(), cfg.reward.answer_style)  # [Q + K][m]
    Q = len(valid)
    votes = vote_all(answers[:Q], problems[:Q], tie=cfg.reward.tie, grader=run.grader)  # [Q]
    return Answers(rollouts=rollouts, rendered=rendered, problems=problems, answers=answers,
                   p_hats=[v.share for v in votes], labels=[v.label for v in votes],
                   n_questions=Q, votes=votes)


def _per_question(batch: QuestionBatch, values: Sequence, fill=None) -> list:
    """Spread [Q] values of the valid questions over all N completions."""
    out = [fill] * len(batch.problems)
    for n, v in zip(batch.valid, values, strict=True):
        out[n] = v
    return out


def batch_penalties(run: SelfPlayRun, batch: QuestionBatch) -> list[float]:
    """[Q] repetition penalty of each valid question (share of the N in its cluster)."""
    return repetition_penalties([batch.questions[n] for n in batch.valid], len(batch.texts),
                                run.cfg.self_play.bleu_threshold)


def train_challenger(run: SelfPlayRun, batch: QuestionBatch, answers: Answers,
                     penalties: Sequence[float]) -> tuple[torch.Tensor, dict[str, float]]:
    """Challenger rewards [N] and its GRPO update (groups: the G completions of a prompt)."""
    cfg, agent = run.cfg, run.agents[run.challenger]
    valid = [p is not None for p in batch.problems]
    rewards = challenger_rewards(valid, _per_question(batch, answers.p_hats, 0.0),
                                 _per_question(batch, penalties, 0.0),
                                 cfg.self_play.repetition_weight)  # [N]
    B = len(batch.prompts)
    adv = grpo.group_advantages(rewards.reshape(B, -1), scale=cfg.grpo.adv_scale)  # [B, G]
    adv = adv.reshape(-1)  # [N], row b*G + g
    update = _update(agent, batch.rendered, batch.rollouts, adv, cfg,
                     cfg.self_play.question_max_new_tokens)
    return rewards, {**_group_stats(rewards.reshape(B, -1), adv, batch.rollouts), **update}


def train_solver(run: SelfPlayRun, answers: Answers, selected: Sequence[bool]
                 ) -> tuple[int, dict[str, float]]:
    """The solver's GRPO update on the questions in the band (label: their majority
    answer) and the anchors (label: gold; advantages x ``anchor_weight``). Returns the
    number of generated questions trained on and the update's metrics."""
    cfg, agent, sp = run.cfg, run.agents[run.solver], run.cfg.self_play
    Q = answers.n_questions
    rows = [v for v in range(Q) if selected[v] and answers.labels[v] is not None]
    n_generated = len(rows)
    if sp.anchor_weight > 0:
        rows += list(range(Q, len(answers.problems)))
    if not rows:
        return 0, _update(agent, [], None, torch.zeros(0), cfg, cfg.rollout.max_new_tokens)
    # a question's teacher is its vote (rewarded: the answers it counted for the winner),
    # an anchor's its gold
    teachers = [answers.votes[r] if r < Q else answers.problems[r].gold for r in rows]
    problems = [answers.problems[r] for r in rows]
    ans = [answers.answers[r] for r in rows]  # [S][m]
    sc = score(ans, teachers, problems, run.grader)
    parsed = torch.tensor([[a is not None for a in row] for row in ans])  # [S, m]
    rewards = solver_rewards(sc.correct, parsed, sp.format_weight)  # [S, m]
    adv = grpo.group_advantages(rewards, scale=cfg.grpo.adv_scale)  # [S, m]
    weight = torch.tensor([1.0 if r < Q else sp.anchor_weight for r in rows])  # [S]
    adv = (adv * weight[:, None]).reshape(-1)  # [S * m]
    rollouts = answers.rollouts.select_prompts(rows)
    update = _update(agent, [answers.rendered[r] for r in rows], rollouts, adv, cfg,
                     cfg.rollout.max_new_tokens)
    return n_generated, {**_group_stats(rewards, adv, rollouts), **update}


def _update(agent: Agent, rendered, rollouts, adv: torch.Tensor, cfg: Config,
            length_norm: int) -> dict[str, float]:
    """A GRPO update when some advantage is non-zero (or a KL loss term alone has a
    gradient), else the metrics of no update."""
    if rollouts is not None and (bool((adv != 0).any()) or trains_without_advantage(cfg.grpo)):
        out = update_agent(agent, rendered, rollouts, adv, cfg.grpo, cfg.rollout.temperature,
                           length_norm=length_norm)
        out.pop("weight_push_s", None)  # a timing, part of the step's timing/update
        return out
    return {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0}


def _group_stats(rewards: torch.Tensor, adv: torch.Tensor, rollouts: Rollouts | None) -> dict:
    """The usual per-agent reward / rollout metrics of an update ([S, G] rewards)."""
    G = rewards.shape[1]
    out = {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std(unbiased=False)),
           "zero_adv_groups": float((adv.reshape(-1, G) == 0).all(dim=1).float().mean())}
    if rollouts is not None:
        out["completion_len"] = float(rollouts.lengths().float().mean())
        out["truncated"] = float(np.mean([not f for f in rollouts.finished]))
    return out


def question_metrics(run: SelfPlayRun, batch: QuestionBatch, answers: Answers,
                     penalties: Sequence[float], selected: Sequence[bool]) -> dict[str, float]:
    """R-Few's stability measures of the step's questions (``selfplay/...``)."""
    sp = run.cfg.self_play
    N, Q = len(batch.texts), answers.n_questions
    qs = [batch.questions[n] for n in batch.valid]
    out: dict[str, float] = {"selfplay/question_validity": Q / max(1, N)}
    if Q:
        out["selfplay/p_hat_mean"] = float(np.mean(answers.p_hats))
        out.update({f"selfplay/p_hat_hist/{k}": v
                    for k, v in p_hat_histogram(answers.p_hats, sp.hist_bins).items()})
        out["selfplay/in_band"] = float(np.mean(selected))
        out["selfplay/repetition_penalty"] = float(np.mean(penalties))
        out["selfplay/repetition_share"] = float(np.mean([round(p * N) > 1 for p in penalties]))
        out["selfplay/question_len"] = float(np.mean([len(q.split()) for q in qs]))
        d2 = distinct_n(qs, 2)
        if d2 is not None:
            out["selfplay/distinct2"] = d2
    return out


def self_play_step(run: SelfPlayRun, step: int) -> dict[str, Any]:
    """One step: the challenger writes, the solver answers, the phase's role trains."""
    sp = run.cfg.self_play
    phase = phase_of(step, sp.challenger_steps, sp.solver_steps)
    t_step = time.perf_counter()
    t0 = time.perf_counter()
    batch = write_questions(run, step)
    anchors = anchor_batch(run, step) if phase == "solver" else []
    answers = answer_questions(run, step, batch, anchors)
    t_rollout = time.perf_counter() - t0
    record, t_grading, t_update = step_updates(run, step, phase, batch, answers)
    record.update({"timing/rollout": t_rollout, "timing/grading": t_grading,
                   "timing/update": t_update, "timing/step": time.perf_counter() - t_step})
    return record


def step_updates(run: SelfPlayRun, step: int, phase: str, batch: QuestionBatch,
                 answers: Answers) -> tuple[dict[str, Any], float, float]:
    """Everything after generation: penalties, band, the phase's update, metrics and the
    question log. Returns (record, seconds grading, seconds updating)."""
    sp = run.cfg.self_play
    t0 = time.perf_counter()
    penalties = batch_penalties(run, batch)  # [Q]
    selected = in_band(answers.p_hats, sp.band, sp.band_rule)  # [Q]
    t_grading = time.perf_counter() - t0
    record: dict[str, Any] = {"step": step, "selfplay/phase": 0 if phase == "challenger" else 1}
    c_name, s_name = run.agents[run.challenger].name, run.agents[run.solver].name
    t0 = time.perf_counter()
    rewards = None
    if phase == "challenger":
        rewards, stats = train_challenger(run, batch, answers, penalties)
        record.update({f"agent/{c_name}/{k}": v for k, v in stats.items()})
    else:
        trained, stats = train_solver(run, answers, selected)
        record.update({f"agent/{s_name}/{k}": v for k, v in stats.items()})
        record["selfplay/solver/trained_questions"] = trained
    t_update = time.perf_counter() - t0
    step_schedules(run.agents)  # the schedules follow steps, trained or not
    record.update(question_metrics(run, batch, answers, penalties, selected))
    Q = answers.n_questions
    if answers.answers:
        record[f"agent/{s_name}/parse_rate"] = float(np.mean(
            [a is not None for row in answers.answers for a in row]))
    if len(answers.problems) > Q:
        anchor_hits = [gold_match(a, p, run.grader)
                       for p, row in zip(answers.problems[Q:], answers.answers[Q:]) for a in row]
        record["selfplay/solver/anchor_acc"] = float(np.mean(anchor_hits))
    log_questions(run, step, phase, batch, answers, penalties, selected, rewards)
    return record, t_grading, t_update


def log_questions(run: SelfPlayRun, step: int, phase: str, batch: QuestionBatch,
                  answers: Answers, penalties, selected, rewards) -> None:
    """One line per challenger completion in ``questions.jsonl``."""
    p_hats = _per_question(batch, answers.p_hats)
    labels = _per_question(batch, answers.labels)
    pens = _per_question(batch, penalties)
    band = _per_question(batch, selected)
    with run_folder.open_append(run.questions_path) as f:
        for n, text in enumerate(batch.texts):
            f.write(json.dumps({
                "step": step, "phase": phase, "question": batch.questions[n],
                "valid": batch.problems[n] is not None, "reason": batch.reasons[n],
                "p_hat": p_hats[n], "label": labels[n], "penalty": pens[n],
                "in_band": band[n], "reward": None if rewards is None else float(rewards[n]),
                "anchors": batch.prompts[n * len(batch.prompts) // len(batch.texts)].meta.get(
                    "anchors", []),
                "completion": text}) + "\n")


def _truncate_jsonl(path: Path, step: int) -> None:
    """Keep the lines of steps <= ``step`` (a resumed or fresh run rewrites the rest)."""
    if not run_folder.refuse_link(path).is_file():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and step and json.loads(line)["step"] <= step]
    run_folder.write_text(path, "".join(line + "\n" for line in keep))


# ============================================================================ setup, loop, cleanup


def setup(cfg: Config, resume: str | Path | None = None) -> SelfPlayRun:
    """Resolved config saved; the anchor pool drawn; both agents built; the image mode and
    the renderable pool settled; resume from a checkpoint."""
    set_cpu_threads(cfg.run.threads)  # always: never what an earlier run left set
    run_dir = Path(resume) if resume is not None else Path(cfg.run.output_dir)
    seed_everything(cfg.run.seed)
    runlock.acquire(run_dir)  # before anything is written there
    run_folder.write_text(run_dir / "config.yaml", to_yaml(cfg))  # no link followed
    challenger, solver = self_play_roles(cfg)
    pool = labelled_pool(cfg)
    folder = checkpoint_to_resume(run_dir, resume)
    agents = [build_agent(mc, cfg, weights_from=str(ckpt.agent_folder(folder, mc.name)) if folder else None)
              for mc in cfg.agents]
    images = image_mode(cfg, agents[challenger], agents[solver], pool)
    pool = renderable_pool(cfg, pool, agents[challenger], agents[solver], images)
    run = SelfPlayRun(cfg=cfg, dir=run_dir, agents=agents, challenger=challenger, solver=solver,
                      pool=pool, images=images,
                      logger=MetricsLogger(run_dir, log=cfg.log, run_name=cfg.run.name,
                                           run_config=to_dict(cfg)),
                      grader=get_grader(cfg.reward.grader))
    if folder is not None:
        restore_agents(folder, agents)
        state = ckpt.load_state(folder)
        run.step = int(state["step"])
        run.skipped = dict(state.get("skipped_questions", {}))
        ckpt.set_rng_state(ckpt.load_rng(folder))
        print(f"resumed from {folder} (step {run.step})")
    run.logger.begin(run.step)  # later lines dropped; the trackers start
    _truncate_jsonl(run.questions_path, run.step)
    return run


def labelled_pool(cfg: Config) -> list[Problem]:
    """The anchor pool: ``self_play.anchor_pool_size`` problems with gold from ``data.*``."""
    sp = cfg.self_play
    pool, no_gold = anchor_pool(load_problems(cfg), sp.anchor_pool_size, cfg.run.seed)
    if no_gold:
        print(f"anchor pool: {no_gold} problems without gold left out", file=sys.stderr)
    if len(pool) < sp.anchor_pool_size:
        print(f"anchor pool: {len(pool)} problems with gold (self_play.anchor_pool_size="
              f"{sp.anchor_pool_size})", file=sys.stderr)
    if len(pool) < max(1, sp.anchors_per_prompt):
        raise TrainingError(f"self_play: the anchor pool has {len(pool)} problems with gold; "
                            f"self_play.anchors_per_prompt={sp.anchors_per_prompt} needs at "
                            "least that many (and images or anchors need one): check data.*")
    return pool


def image_mode(cfg: Config, challenger: Agent, solver: Agent, pool: list[Problem]) -> bool:
    """Whether challenger prompts and questions carry a pool item's picture
    (``self_play.images``); an impossible combination is an error saying what to set."""
    sp = cfg.self_play
    multimodal = challenger.adapter.is_multimodal and solver.adapter.is_multimodal
    pool_images = any(p.images for p in pool)
    if sp.images == "on" and not multimodal:
        raise TrainingError("self_play.images=on: both roles must take images, but "
                            + " and ".join(f"agent {a.name!r} ({a.family})" for a in
                                           (challenger, solver) if not a.adapter.is_multimodal)
                            + " is text-only; set self_play.images=off")
    if pool_images and sp.anchors_per_step and not solver.adapter.is_multimodal:
        raise TrainingError(f"self_play: the solver {solver.name!r} is text-only but "
                            "the anchor pool (data.*) has images it cannot see; use text "
                            "problems (data.source=file) or set self_play.anchors_per_step=0")
    return sp.images == "on" or (sp.images == "auto" and multimodal and pool_images)


def renderable_pool(cfg: Config, pool: list[Problem], challenger: Agent, solver: Agent,
                    images: bool) -> list[Problem]:
    """The pool problems every role that shows them can render (the others counted)."""
    sp = cfg.self_play
    renderers = ([solver] if sp.anchors_per_step or images else []) + ([challenger] if images else [])
    pool, broken = usable_pool(pool, renderers, cfg)
    if broken:
        print(f"anchor pool: left out {sum(broken.values())} problems that do not render "
              f"(by reason: {broken})", file=sys.stderr)
    if len(pool) < max(1, sp.anchors_per_prompt):
        raise TrainingError(f"self_play: {len(pool)} pool problems render; "
                            f"self_play.anchors_per_prompt={sp.anchors_per_prompt} needs more")
    return pool


def save(run: SelfPlayRun) -> Path:
    """A checkpoint: both agents and the invalid-question counts."""
    return save_run(run, {"skipped_questions": run.skipped})


def summary_line(run: SelfPlayRun, record: dict[str, Any]) -> str:
    """The progress line of a self-play step."""
    phase = "challenger" if record["selfplay/phase"] == 0 else "solver"
    name = run.agents[run.challenger if phase == "challenger" else run.solver].name
    bits = [f"step {record['step']} {phase}",
            f"valid={record['selfplay/question_validity']:.2f}"]
    for key, label in (("selfplay/p_hat_mean", "p_hat"), ("selfplay/in_band", "in_band"),
                       ("selfplay/repetition_share", "rep"), ("selfplay/distinct2", "distinct2"),
                       ("selfplay/solver/anchor_acc", "anchor_acc"),
                       (f"agent/{name}/reward/mean", "r")):
        if record.get(key) is not None:
            bits.append(f"{label}={record[key]:.2f}")
    return " ".join(bits) + f" | {record.get('timing/step', 0):.1f}s"


def cleanup(run: SelfPlayRun) -> None:
    """Final checkpoint, the self-play plot, invalid-question counts, where results are."""
    if run.cfg.checkpoint.at_end and run.step > 0:
        print(f"checkpoint: {save(run)}")
    run.logger.close()
    if run.cfg.log.plot and run.logger.path.is_file():
        from vlcohort.analysis.plots import plot_self_play

        plots = run_folder.real_dir(run.dir / "plots")
        print(f"plot: {plot_self_play(run.logger.path, plots / 'self_play.png')}")
    if run.skipped:
        print(f"invalid questions by reason: {run.skipped}")
    if run.logger.path.is_file():
        print("\n".join(final_summary(read_metrics(run.logger.path),
                                       [a.name for a in run.agents])))
    print(f"results: {run.dir} (config.yaml, metrics.jsonl, questions.jsonl, plots/, "
          "checkpoints/)")


def run_self_play(cfg: Config, resume: str | Path | None = None) -> int:
    """Run a whole self-play job (``vlcohort train`` with ``method: self_play``), in one
    process: its two roles alternate, they do not train side by side."""
    if launched_world_size() > 1:
        raise TrainingError("method=self_play runs in one process (its two roles alternate, "
                            "they do not train side by side); launch it without torchrun")
    sp = cfg.self_play
    c, s = self_play_roles(cfg)
    B, G = cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    print(f"# self-play: challenger {cfg.agents[c].name}, solver {cfg.agents[s].name}; per step "
          f"{B} x {G} = {B * G} questions (k={sp.anchors_per_prompt} anchors each), "
          f"m={sp.solver_samples} answers each (<= {B * G * sp.solver_samples} solver sequences"
          f" + {sp.anchors_per_step} x {sp.solver_samples} on anchors in solver steps); phases "
          f"{sp.challenger_steps} challenger / {sp.solver_steps} solver steps")
    with runlock.released_on_error(Path(resume) if resume is not None else Path(cfg.run.output_dir)):
        run = setup(cfg, resume)
    return drive(run, Recipe(step=self_play_step, save=save, cleanup=cleanup,
                             summary=summary_line))
