"""MAPoRL: multi-agent post-co-training (Park et al., arXiv 2502.18439), as a labelled
baseline recipe of its own (``vlcohort train`` with ``method: maporl``), on CoMAS's
discussion machinery (``recipes/comas.py``: its turns, rendering, generation, batches,
update and discussion log).

Agents discuss each problem over R rounds (``maporl.rounds``); every answer is a rollout of
the agent that wrote it, rewarded from gold, and each agent takes one update on all of its
turns. A agents, B problems per step, G independent discussions per problem
(``rollout.rollouts_per_prompt``); one thread = one discussion:

    round 1     every agent answers the problem alone                      T*A turns
    round r>1   every agent revises, shown its own answer of round r-1 and its peers'
                                                                           T*A turns
    grading     C[r, a] = 1 if agent a's answer of round r equals gold, else 0 (an answer
                that cannot be read is wrong); V[r, a] = C[r, a], or with
                ``maporl.verifier`` the learned verifier's score of the answer
    reward      R[t, a] = influence[t, a] + incentive[t, a]                  (t 0-based)
      influence = (V[t, a] + sum_{t' > t} g^(t' - t) mean_j V[t', j]) / sum_{t' >= t} g^(t' - t)
                  g = ``maporl.discount`` (0.3)
      incentive = the terms of ``maporl.alpha`` on C (:func:`incentive_bonus`), with
                  "right" C or the peers' mean C above 0.5 and "wrong" below it
    update      per agent: its turns' returns (less the reward-side KL when
                grpo.kl_in_reward) -> ``maporl.advantage`` (REINFORCE++) over the agent's
                whole batch -> one ``update_agent`` call (``comas.update_one``)

What follows MAPoRL's published code (github.com/chanwoo-park-official/MAPoRL, read: its
trainer trl/trl/trainer/ppov2_trainer_multi_different_model.py, the reward rules
score_rule and bonus_rule of trl/trl/trainer/utils_multi_unified.py, the gold grading
calculate_reward_from_answer of utils/utils_cooperateLLM.py, the verifier of
utils/reward_model.py and reward_server.py, and the GSM8k configs of config/ppo_config/):
the reward of each turn is score_rule with rule_horizon=discounted_sum and
rule_agent_share=all at rule_discount 0.3 (the published configs) plus bonus_rule's
incentive terms with its thresholds 0.5 and its alpha (default [0, 0, 0, 0]; its shell
script sweeps 0, 0.5, 1, 2), the signs exactly as published (``tests/test_maporl.py``
re-derives them by hand). Read them with care: the published influence terms give an
agent -alpha[3] when its peers turn from wrong to right after it was right (and +alpha[3]
when they turn wrong after it was wrong), the opposite of what "influence incentive"
suggests; they are kept as published and are 0 at the published default alpha. Without a
verifier the verifier score is gold correctness (the published ``no_reward_model`` path,
calculate_reward_from_answer: 1 if the extracted answer equals gold), so the run reads
gold: a labelled baseline, like GT-Reward, never label-free. With ``maporl.verifier`` a
local sequence-classification checkpoint with one output scores each (problem, answer)
pair through a sigmoid, as the published reward model (a causal LM with a linear head on
the last token, sigmoid) does; the incentive terms stay on gold, as published.

Where we depart, and why:
- no PPO critic: the published trainer is PPO (a value head per agent, GAE, whitened
  advantages, 4 epochs, KL 0.002 in the reward); here each turn's reward, which already
  sums the discussion's discounted future, is a return normalised over the agent's batch
  by REINFORCE++ (``maporl.advantage``, as CoMAS), and the loss is ``grpo``'s;
- the prompt: each turn is one user message (the problem, the agent's own previous answer,
  its peers' previous answers, ``maporl.revision_instruction``); the published code grows
  one chat per agent (its history, then the peers' solutions as a user message) and, with
  reward_feedback, shows each answer's verifier score: not shown here;
- no consensus stop: the published code can end a question's discussion once the agents
  agree, but its configs set the thresholds to 1.1, which never fires; every thread runs
  all rounds;
- no format penalty: the published code puts -10 in place of a turn's verifier score when
  an answer after round 1 lacks ``\\boxed{}`` (or is short or repetitive), and that -10
  then enters its peers' influence sums; here an unreadable answer is simply wrong (C = V
  = 0); nor its nudge of an incentive that lands on exactly -1 to -0.999 (a guard for its
  "question finished" sentinel, -1, which does not exist here);
- a thread with a turn that did not render (too long for ``data.max_prompt_tokens``) or a
  problem without gold is left out of the update whole (its rewards need every agent's
  every turn graded), counted in ``maporl/untrained_threads``; the turn skips themselves
  in ``maporl/skipped_turns`` and the run's skipped records (``comas_turn_<reason>``, the
  shared renderer's name);
- one policy per agent for every round (the published configs' policy_separation=False),
  full or LoRA as ``agents.N.lora`` says, one process (agents may sit on different GPUs);
  torchrun is refused;
- images go with the problem into every turn, so VLM agents discuss figure problems.

Every turn is logged to ``discussions.jsonl`` (one line each: its correctness, verifier
score, influence and incentive parts, reward).
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from vlcohort import run_folder, runlock
from vlcohort.config import Config
from vlcohort.data.problems import Problem
from vlcohort.recipes import cohort, comas
from vlcohort.recipes.driver import Recipe, TrainingError, drive, step_schedules
from vlcohort.recipes.step import Run, take_prompts
from vlcohort.training.distributed import launched_rank, launched_world_size
from vlcohort.training.rewards import extract_all, gold_match

#: The published incentive thresholds (bonus_rule's correct_threshold = wrong_threshold):
#: a correctness (or the peers' mean) above it is right, below it wrong, equal to it neither.
THRESHOLD = 0.5

#: The keys this recipe logs beyond the cohort's are documented in ``METRIC_DOCS``
#: (``vlcohort/monitoring/metrics.py``, the MAPoRL block).


# ============================================================================ rewards


def influence_rewards(V: torch.Tensor, gamma: float) -> torch.Tensor:
    """[R, A] verifier scores (rounds x agents) -> [R, A] influence-aware rewards: turn t
    of agent a gets (V[t, a] + sum_{t' > t} gamma^(t' - t) mean_j V[t', j]) / sum_{t' = t}^{R-1}
    gamma^(t' - t) (MAPoRL's rule discounted_sum, share all)."""
    R, _ = V.shape
    V = V.double()
    team = V.mean(dim=1)  # [R] mean over agents
    out = torch.empty_like(V)
    for t in range(R):
        weights = torch.tensor([gamma ** (u - t) for u in range(t, R)], dtype=torch.float64)  # [R-t]
        future = (weights[1:] * team[t + 1:]).sum()  # scalar
        out[t] = (V[t] + future) / weights.sum()
    return out.float()


def incentive_bonus(C: torch.Tensor, alpha: Sequence[float], threshold: float = THRESHOLD
                    ) -> torch.Tensor:
    """[R, A] gold correctness -> [R, A] incentive terms (MAPoRL's bonus_rule), with
    ``right(x)``: x > threshold, ``wrong(x)``: x < threshold, peers = the other agents:

    - t > 0, the agent's answer turned wrong (right): -alpha[1] (+alpha[1]) when its peers
      were right (wrong) at t - 1 or it is alone, -alpha[0] (+alpha[0]) when they were
      wrong (right);
    - t < R - 1 and A > 1, the peers wrong at t and right at t + 1: -alpha[3] if the agent
      is right at t, -alpha[2] if wrong; the peers right at t and wrong at t + 1:
      +alpha[3] if the agent is wrong at t, +alpha[2] if right."""
    R, A = C.shape
    C = C.double()
    out = torch.zeros(R, A, dtype=torch.float64)

    def right(x) -> bool:
        return bool(x > threshold)

    def wrong(x) -> bool:
        return bool(x < threshold)

    for t in range(R):
        for a in range(A):
            peers = [j for j in range(A) if j != a]
            cur, bonus = C[t, a], 0.0
            if t > 0:
                prev = C[t - 1, a]
                before = C[t - 1, peers].mean() if peers else None
                if right(prev) and wrong(cur):
                    if before is None or right(before):
                        bonus -= alpha[1]
                    elif wrong(before):
                        bonus -= alpha[0]
                if wrong(prev) and right(cur):
                    if before is None or wrong(before):
                        bonus += alpha[1]
                    elif right(before):
                        bonus += alpha[0]
            if t < R - 1 and peers:
                now, nxt = C[t, peers].mean(), C[t + 1, peers].mean()
                if right(nxt) and wrong(now):
                    if right(cur):
                        bonus -= alpha[3]
                    elif wrong(cur):
                        bonus -= alpha[2]
                if wrong(nxt) and right(now):
                    if wrong(cur):
                        bonus += alpha[3]
                    elif right(cur):
                        bonus += alpha[2]
            out[t, a] = bonus
    return out.float()


def turn_rewards(V: torch.Tensor, C: torch.Tensor, gamma: float, alpha: Sequence[float]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rewards [R, A] of one discussion's turns: influence (on V) + incentive (on C).
    Returns (reward, influence, incentive), each [R, A]."""
    infl = influence_rewards(V, gamma)
    bonus = incentive_bonus(C, alpha)
    return infl + bonus, infl, bonus


# ============================================================================ prompts


def first_text(problem: Problem, instruction: str) -> str:
    """Round 1's user text: the problem and the task."""
    return f"Problem:\n{comas.question_text(problem)}\n\n{instruction}"


def revision_text(problem: Problem, own: str | None, peers: Sequence[str], instruction: str) -> str:
    """A later round's user text: the problem, the agent's previous answer, its peers'
    previous answers (numbered), the task. Quoted texts are defused (``comas.quoted``)."""
    parts = [f"Problem:\n{comas.question_text(problem)}",
             "Your previous solution:\n" + (comas.quoted(own) if own is not None else "(none)"),
             "These are the solutions to the problem from the other agents:"]
    parts += [f"Agent {k} solution:\n{comas.quoted(p)}" for k, p in enumerate(peers, 1)]
    if not peers:
        parts.append("(none)")
    parts.append(instruction)
    return "\n\n".join(parts)


# ============================================================================ verifier


class Verifier:
    """A learned verifier from a local folder: a sequence-classification checkpoint with
    one output (``AutoModelForSequenceClassification``); an answer's score is the sigmoid
    of its logit on (problem, answer), rendered by the checkpoint's chat template (user:
    the problem, assistant: the answer) when it has one."""

    def __init__(self, path: str | Path, device: str = "cpu", batch: int = 8):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModelForSequenceClassification.from_pretrained(str(path))
        if self.model.config.num_labels != 1:
            raise TrainingError(f"maporl.verifier: {path} has {self.model.config.num_labels} "
                                "outputs; a verifier gives one score (num_labels=1)")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(device).eval()
        self.device, self.batch = device, batch

    def text(self, problem: str, answer: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": problem}, {"role": "assistant", "content": answer}],
                tokenize=False)
        return f"{problem}\n\n{answer}"

    @torch.no_grad()
    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """[N] (problem, answer) -> [N] scores in (0, 1)."""
        out: list[float] = []
        texts = [self.text(q, a) for q, a in pairs]
        for i in range(0, len(texts), self.batch):
            enc = self.tokenizer(texts[i:i + self.batch], return_tensors="pt", padding=True)
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits  # [n, 1]
            out += torch.sigmoid(logits[:, 0].float()).tolist()
        return out


# ============================================================================ discussion


@dataclass
class Grade:
    """One turn's grading: its answer, correctness (None: no gold), verifier score and the
    parts of its reward."""

    answer: str | None = None
    correct: bool | None = None
    verifier: float | None = None
    influence: float | None = None
    incentive: float | None = None


@dataclass
class Discussion:
    """One step's discussions: CoMAS's record (turns, rollouts, skips) plus each turn's
    grade, keyed (thread, round, agent), and the threads left out of the update."""

    disc: comas.Discussion
    turns: dict[tuple[int, int, int], comas.Turn] = field(default_factory=dict)
    grades: dict[tuple[int, int, int], Grade] = field(default_factory=dict)
    untrained: int = 0


def discuss(run: Run, step: int, problems: list[Problem]) -> Discussion:
    """All rounds of every thread (round 1 alone, later rounds revising after the previous
    round's answers), generated with CoMAS's renderer and generator."""
    cfg, m = run.cfg, run.cfg.maporl
    A, G = len(run.names), cfg.rollout.rollouts_per_prompt
    out = Discussion(comas.Discussion(problems=list(problems)))
    threads = [(b, g) for b in range(len(problems)) for g in range(G)]
    for rnd in range(1, m.rounds + 1):
        now: list[comas.Turn] = []
        for t, (b, _) in enumerate(threads):
            for a in range(A):
                peers = [j for j in range(A) if j != a]
                if rnd == 1:
                    body, shown = first_text(problems[b], m.solution_instruction), []
                else:
                    prev = {j: out.turns[(t, rnd - 1, j)] for j in range(A)}
                    shown = [j for j in peers if prev[j].rendered is not None]
                    own = prev[a].text if prev[a].rendered is not None else None
                    body = revision_text(problems[b], own, [prev[j].text for j in shown],
                                         m.revision_instruction)
                turn = comas.Turn("solution", a, t, rnd, a, references=shown)
                turn.rendered = comas._try_render(run, out.disc, a, problems[b], t, rnd,
                                                  "solution", body)
                out.turns[(t, rnd, a)] = turn
                now.append(turn)
        comas._generate(run, step, now, rnd, "solution", out.disc)
        out.disc.turns += now
    return out


def grade(run: Run, d: Discussion, verifier: Verifier | None = None) -> None:
    """Each generated turn's answer against gold (and the verifier's score), then the
    rewards of every thread whose R x A turns are all generated and graded."""
    cfg, m = run.cfg, run.cfg.maporl
    A, G, R = len(run.names), cfg.rollout.rollouts_per_prompt, m.rounds
    keys = [k for k, t in d.turns.items() if t.rendered is not None]
    answers = extract_all([[d.turns[k].text] for k in keys], cfg.reward.answer_style)
    for k, ans in zip(keys, answers):
        problem = d.disc.problems[k[0] // G]
        d.grades[k] = Grade(answer=ans[0], correct=gold_match(ans[0], problem, run.grader))
    if verifier is not None and keys:
        pairs = [(comas.question_text(d.disc.problems[k[0] // G]), d.turns[k].text) for k in keys]
        for k, s in zip(keys, verifier.score(pairs)):
            d.grades[k].verifier = float(s)
    for t in range(len(d.disc.problems) * G):
        cells = [[d.grades.get((t, r, a)) for a in range(A)] for r in range(1, R + 1)]
        if any(g is None or g.correct is None for row in cells for g in row):
            d.untrained += 1
            continue
        C = torch.tensor([[float(g.correct) for g in row] for row in cells])  # [R, A]
        V = (torch.tensor([[g.verifier for g in row] for row in cells]) if verifier is not None
             else C.clone())  # [R, A]
        reward, infl, bonus = turn_rewards(V, C, m.discount, m.alpha)
        for r in range(R):
            for a in range(A):
                g, turn = cells[r][a], d.turns[(t, r + 1, a)]
                g.influence, g.incentive = float(infl[r, a]), float(bonus[r, a])
                turn.reward, turn.valid = float(reward[r, a]), True


# ============================================================================ the step


def maporl_step(run: Run, step: int, verifier: Verifier | None = None) -> dict[str, Any]:
    """One MAPoRL step: B problems -> R rounds of discussion -> grades and rewards -> one
    update per agent -> the step's metrics record."""
    t_step = t0 = time.perf_counter()
    problems = take_prompts(run).problems  # [B]
    d = discuss(run, step, problems)
    grade(run, d, verifier)
    t_rollout = time.perf_counter() - t0
    t0 = time.perf_counter()
    record: dict[str, Any] = {"step": step}
    for i, agent in zip(run.local, run.agents):
        batch = comas.agent_batch(d.disc, i)
        if run.cfg.grpo.mini_batch_seqs and batch.rollouts is not None:  # several steps
            batch = comas.shuffled_batch(batch, comas.update_order(run.cfg, step, i, len(batch.turns)))
        metrics, _ = comas.update_one(run, i, agent, batch, advantage=run.cfg.maporl.advantage)
        record.update({f"agent/{run.names[i]}/{k}": v for k, v in metrics.items()})
        record.update(agent_metrics(run, d, i, batch))
    step_schedules(run.agents)
    t_update = time.perf_counter() - t0
    record.update(step_metrics(run, d))
    if run.talks:
        log_turns(run, step, d)
    record.update({"timing/rollout": t_rollout, "timing/update": t_update,
                   "timing/step": time.perf_counter() - t_step})
    if cohort.evaluates_at(run, step):
        record.update(cohort.evaluate(run, step))
    return record


def _mean(xs: list) -> float:
    return float(np.mean(xs))


def agent_metrics(run: Run, d: Discussion, i: int, batch: comas.Batch) -> dict[str, float]:
    """``agent/<a>/...``: turns trained, reward mean / std and its two parts, accuracy
    against gold over all its answers, in round 1 and in the last round, the verifier's
    mean score, answer parse rate, completion length and truncation."""
    p, R = f"agent/{run.names[i]}/", run.cfg.maporl.rounds
    mine = {k: g for k, g in d.grades.items() if k[2] == i}
    out: dict[str, float] = {p + "maporl/turns": float(len(batch.turns))}
    if batch.turns:
        out[p + "reward/mean"] = float(batch.rewards.mean())
        out[p + "reward/std"] = float(batch.rewards.std(unbiased=False))
    rewarded = [g for g in mine.values() if g.influence is not None]
    if rewarded:
        out[p + "maporl/influence"] = _mean([g.influence for g in rewarded])
        out[p + "maporl/incentive"] = _mean([g.incentive for g in rewarded])
    scored = [g.verifier for g in mine.values() if g.verifier is not None]
    if scored:
        out[p + "maporl/verifier_score"] = _mean(scored)
    if mine:
        out[p + "parse_rate"] = _mean([g.answer is not None for g in mine.values()])
    for key, rounds in (("acc", range(1, R + 1)), ("maporl/acc_first", (1,)), ("maporl/acc_last", (R,))):
        hits = [g.correct for k, g in mine.items() if k[1] in rounds and g.correct is not None]
        if hits:
            out[p + key] = _mean(hits)
    rolls = [ro for (a, _, _), ro in d.disc.rollouts.items() if a == i]
    if rolls:
        out[p + "completion_len"] = float(torch.cat([r.lengths() for r in rolls]).float().mean())
        out[p + "truncated"] = _mean([not f for r in rolls for f in r.finished])
    return out


def step_metrics(run: Run, d: Discussion) -> dict[str, float]:
    """``maporl/...``: accuracy of every round over all agents, the share of answers that
    changed correctness from the round before, skipped turns, untrained threads."""
    out = {"maporl/skipped_turns": float(d.disc.skipped), "maporl/untrained_threads": float(d.untrained)}
    for r in range(1, run.cfg.maporl.rounds + 1):
        hits = [g.correct for k, g in d.grades.items() if k[1] == r and g.correct is not None]
        if hits:
            out[f"maporl/round/{r}/acc"] = _mean(hits)
    flips = [d.grades[(t, r, a)].correct != d.grades[(t, r - 1, a)].correct
             for (t, r, a), g in d.grades.items()
             if r > 1 and g.correct is not None and (t, r - 1, a) in d.grades
             and d.grades[(t, r - 1, a)].correct is not None]
    if flips:
        out["maporl/changed"] = _mean(flips)
    return out


def log_turns(run: Run, step: int, d: Discussion) -> None:
    """One line per turn in ``discussions.jsonl``: who wrote it, in which thread and round,
    whose answers it was shown, its answer, correctness, verifier score, reward parts."""
    G = run.cfg.rollout.rollouts_per_prompt
    with run_folder.open_append(run.dir / comas.DISCUSSIONS) as f:
        for (t, rnd, a), turn in sorted(d.turns.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
            g = d.grades.get((t, rnd, a), Grade())
            f.write(json.dumps({
                "step": step, "round": rnd, "problem": d.disc.problems[t // G].id, "thread": t,
                "agent": run.names[a], "generated": turn.rendered is not None,
                "shown": [run.names[j] for j in turn.references], "answer": g.answer,
                "correct": g.correct, "verifier": g.verifier, "influence": g.influence,
                "incentive": g.incentive, "reward": turn.reward if turn.valid else None,
                "trained": turn.valid, "text": turn.text}) + "\n")


# ============================================================================ the run


def summary_line(run: Run, record: dict[str, Any]) -> str:
    """The progress line of a MAPoRL step."""
    bits = [f"step {record['step']}"]
    R = run.cfg.maporl.rounds
    for r in (1, R):
        if f"maporl/round/{r}/acc" in record:
            bits.append(f"acc@{r}={record[f'maporl/round/{r}/acc']:.2f}")
        if R == 1:
            break
    for name in run.names:
        r = record.get(f"agent/{name}/reward/mean")
        if r is not None:
            bits.append(f"{name}: r={r:.2f}")
    return " ".join(bits) + f" | {record.get('timing/step', 0):.1f}s"


def run_maporl(cfg: Config, resume: str | Path | None = None) -> int:
    """A whole MAPoRL run (``vlcohort train`` with ``method: maporl``): the cohort recipe's
    setup, checkpoints, resume and cleanup; this module's step."""
    m = cfg.maporl
    A, B, G = len(cfg.agents), cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    if launched_world_size() > 1:
        raise TrainingError("method=maporl runs in one process; launch it without torchrun "
                            "(agents may sit on different GPUs, agents.N.device)")
    if launched_rank() == 0:
        print(f"# maporl (labelled: rewards read gold): {A} agents, {B} problems x {G} "
              f"discussions x {m.rounds} rounds per step; each agent writes {B * G * m.rounds} "
              f"answers; reward: {'verifier ' + str(m.verifier) if m.verifier else 'gold correctness'}"
              f" + discount {m.discount} influence + incentives alpha={list(m.alpha)}; "
              f"advantages {m.advantage}")
    verifier = Verifier(m.verifier, m.verifier_device) if m.verifier else None
    with runlock.released_on_error(Path(resume) if resume is not None else Path(cfg.run.output_dir)):
        run = cohort.setup(cfg, resume)
        if run.talks:
            comas.truncate_log(run.dir, run.step)
    return drive(run, Recipe(step=functools.partial(maporl_step, verifier=verifier),
                             save=cohort.save, cleanup=cohort.cleanup, summary=summary_line,
                             start=cohort.start, save_on_interrupt=True))
