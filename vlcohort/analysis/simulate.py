"""``vlcohort simulate``: the paper's theory, run through the trainer's own functions.

Co-RL's argument (arXiv 2608.17253) is about votes, not about models: two agents that are
each right on a different half of the problems can teach each other, because on every
prompt one of them holds the right majority; self-vote (TTRL) cannot, because it only
sharpens what each agent already prefers. This module checks that argument with the *real*
vote (``voting.majority_vote`` via ``rewards.vote_all``), teacher labels
(``rewards.teachers_for``), rewards (``rewards.score`` with the corrected grader), group
advantages (``grpo.group_advantages``) and clipped surrogate (``grpo.policy_loss``). Only
the policy is replaced: each agent is a table of logits [P prompts, K options] under a
softmax, and a sampled answer is one option letter, i.e. a one-token completion. If the
vote, reward or loss code were wrong (a sign, a teacher index, a tie rule), these outcomes
would change, so the tests double as an end-to-end check of the trainer's algorithm.

The default scenario is the paper's example: on the first half of the prompts agent A puts
``pa`` = 0.9 on the right option and agent B ``pb`` = 0.2, on the second half the reverse;
the rest of each agent's mass sits on ONE shared distractor (so a 0.2-right agent's own
majority is wrong), with ``eps`` on the other options. Outcomes (default settings, seed 0;
``python -m vlcohort.analysis.simulate`` prints them):

- ``co_rl`` (peer_vote, ring, two agents): both agents reach >= 0.95 on every prompt. On a
  prompt where A is strong and B weak, A is taught by B's (wrong) vote and pulled *down*,
  B by A's (right) vote and pulled *up*: a race to the 50% line, after which both votes
  name the right answer and both agents climb. Adam moves each logit by about ``lr`` per
  step, so the race runs in logit space, and the weak agent (distance |logit pb|) arrives
  first exactly when |logit pb| < logit pa, i.e. pa + pb > 1 -- the paper's condition.
- ``ttrl`` (self_vote): each agent ends near 0.5 overall: ~1 on its strong half, ~0 on its
  weak half. Self-vote sharpens what the agent already prefers.
- pa + pb < 1: Co-RL converges to the wrong consensus. With 0.3 and 0.4 (both mostly on
  the shared distractor) both votes are wrong from the start; with 0.6 and 0.3 the strong
  agent's vote is right but it loses the race, and most prompts still end wrong.
- ``gt_reward`` (ground_truth): the reference; both agents reach ~1.
- ``co_rewarding_ii`` (ema_teacher_vote): each agent's teacher is an EMA of its own logit
  table (``training.ema``: the trainer's update and cosine-annealed alpha, the published
  0.01 -> 1e-5), sampling G answers whose vote labels the agent. A lagged self-vote: like
  TTRL each agent ends near 1 on its strong half and near 0 on its weak half, since a
  teacher made of the agent's own past cannot hold what the agent never knew. The lag
  damps a drift the current self-vote would follow; it cannot supply the missing half.

>>> r = simulate("co_rl", pa=0.9, pb=0.2, steps=5, seed=0)
>>> sorted(r), sorted(r["A"])
(['A', 'B'], ['accuracy', 'strong_half', 'weak_half', 'worst_prompt'])

Departures from the trainer, all because a table has no tokens or sampler mismatch: no
importance-sampling weights (sampling IS the policy), one on-policy epoch per step (so
``old_logp = logp.detach()`` and the clip never binds), no KL term, no lr schedule.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from typing import Sequence

import torch

from vlcohort.answers.grading import get_grader
from vlcohort.data.problems import LETTERS, Problem
from vlcohort.training import grpo
from vlcohort.training.ema import cosine_alpha, ema_update_
from vlcohort.training.rewards import score, teachers_for, vote_all

__all__ = [
    "AGENTS",
    "METHODS",
    "Scenario",
    "add_arguments",
    "initial_logits",
    "make_scenario",
    "run",
    "simulate",
]

#: method name -> (reward source, teacher topology), the names ``rewards.teachers_for`` takes.
METHODS: dict[str, tuple[str, str]] = {
    "co_rl": ("peer_vote", "ring"),
    "ttrl": ("self_vote", "self"),
    "gt_reward": ("ground_truth", "self"),
    # Co-rewarding-II (arXiv 2508.00410): each agent's own EMA teacher votes
    "co_rewarding_ii": ("ema_teacher_vote", "self"),
}

#: The two agents of the paper's example; agent A starts at ``pa`` on the first half.
AGENTS = ("A", "B")

#: Defaults, shared by ``simulate`` and the CLI so that both print the same numbers.
#: Adam moves each logit by about ``lr`` per step whatever the gradient's scale, so the
#: race between the two agents of a prompt is run in logit space (see the module
#: docstring). lr 0.05 is small enough that sampling noise rarely decides a race (at 0.1,
#: one prompt in 20 ended on the wrong consensus in 3 of 10 seeds; at 0.05, none of 10),
#: and 150 steps take every prompt of the default scenario past 0.98. Plain SGD needs an
#: lr about 100x larger (the token-mean loss divides by B x G = 160): lr 5 does the same.
DEFAULTS = dict(prompts=20, options=4, rollouts=8, steps=150, lr=0.05, optimizer="adam",
                eps=1e-3, seed=0, tie="abstain", prompts_per_step=None,
                ema_alpha_start=0.01, ema_alpha_end=1e-5)  # the published Co-rewarding-II recipe


@dataclass(frozen=True)
class Scenario:
    """The problems and each agent's starting probabilities.

    problems: [P] multiple-choice records (gold a letter; option texts are placeholders,
              the agents answer by letter).
    probs:    [A, P, K] each agent's initial softmax over the K options.
    strong:   [A, P] bool, True where that agent starts with the higher of pa, pb (on
              the agent's first-listed half when pa == pb).
    """

    problems: list[Problem]
    probs: torch.Tensor
    strong: torch.Tensor


def make_scenario(pa: float, pb: float, prompts: int = 20, options: int = 4,
                  eps: float = 1e-3) -> Scenario:
    """The paper's example: A is right with ``pa`` on the first half and ``pb`` on the second,
    B the reverse; the rest of the mass goes to one distractor shared by both agents, and
    ``eps`` to each other option.

    The right option and the distractor rotate over the letters from prompt to prompt, so a
    bug that favoured a fixed letter (or letter order in a tie) could not pass for learning.
    """
    if prompts < 2 or prompts % 2:
        raise ValueError(f"prompts must be an even number >= 2 (two halves), got {prompts}")
    if not 3 <= options <= len(LETTERS):
        raise ValueError(f"options must be within 3..{len(LETTERS)} (right, distractor and at "
                         f"least one other), got {options}")
    rest = (options - 2) * eps
    for name, p in (("pa", pa), ("pb", pb)):
        if not 0.0 < p < 1.0 - rest:
            raise ValueError(f"{name}={p} must be within (0, {1.0 - rest:g}): the distractor "
                             f"needs some mass, and {options - 2} other option(s) get eps={eps}")
    half = prompts // 2
    problems, probs = [], torch.empty(len(AGENTS), prompts, options, dtype=torch.float64)
    strong = torch.zeros(len(AGENTS), prompts, dtype=torch.bool)
    for i in range(prompts):
        right, wrong = i % options, (i + 1) % options
        problems.append(Problem(id=f"sim-{i}", text=f"simulated question {i}",
                                options=[f"value {k}" for k in range(options)],
                                gold=LETTERS[right], source="simulate"))
        first_half = i < half
        for a, p in enumerate((pa, pb) if first_half else (pb, pa)):
            row = torch.full((options,), eps, dtype=torch.float64)
            row[right], row[wrong] = p, 1.0 - p - rest
            probs[a, i] = row
        # A's strong half is the first when pa >= pb; B's is the other one
        a_strong = first_half if pa >= pb else not first_half
        strong[0, i], strong[1, i] = a_strong, not a_strong
    return Scenario(problems, probs, strong)


def initial_logits(probs: torch.Tensor) -> torch.Tensor:
    """Logits whose softmax is exactly ``probs`` (up to float rounding): log p, row-wise."""
    return probs.log()


def sample_answers(logits: torch.Tensor, rows: torch.Tensor, G: int,
                   gen: torch.Generator) -> tuple[list[list[str]], torch.Tensor]:
    """G answers per prompt from one agent's softmax: letters [B][G] and option ids [B, G].

    A table's "completion" is the option letter itself, so there is nothing to extract.
    """
    with torch.no_grad():
        probs = torch.softmax(logits[rows], dim=-1)  # [B, K]
        picks = torch.multinomial(probs, G, replacement=True, generator=gen)  # [B, G]
    letters = [[LETTERS[k] for k in row] for row in picks.tolist()]
    return letters, picks


def policy_update(logits: torch.nn.Parameter, optimizer: torch.optim.Optimizer,
                  rows: torch.Tensor, picks: torch.Tensor, advantages: torch.Tensor) -> dict:
    """One on-policy clipped-surrogate step with ``grpo.policy_loss``.

    rows [B] prompt ids, picks [B, G] sampled options, advantages [B, G]. Each sampled
    answer is a one-token completion: logp [N, 1] with N = B x G, mask all ones.
    """
    B, G = picks.shape
    logp_all = torch.log_softmax(logits[rows], dim=-1)  # [B, K]
    logp = logp_all.gather(1, picks).reshape(B * G, 1)  # [B, G] -> [N, 1]
    loss, stats = grpo.policy_loss(
        logp, logp.detach(), advantages.reshape(B * G),  # [N]
        torch.ones(B * G, 1, dtype=torch.bool), agg="token_mean")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return stats


def make_optimizer(params: Sequence[torch.nn.Parameter], name: str,
                   lr: float) -> torch.optim.Optimizer:
    """``adam`` (betas 0.9, 0.999: each logit moves ~lr per step) or plain ``sgd``."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; choose adam or sgd")


def right_probs(logits: torch.Tensor, scenario: Scenario) -> torch.Tensor:
    """[P, K] logits -> [P] probability on each prompt's right option."""
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)  # [P, K]
    gold = torch.tensor([LETTERS.index(p.gold) for p in scenario.problems])  # [P]
    return probs.gather(1, gold[:, None]).squeeze(1)  # [P]


def summarise(right: torch.Tensor, strong: torch.Tensor) -> dict[str, float]:
    """One agent's [P] right-option probabilities -> the averages the paper reports (all
    prompts, the half it started strong on, the half it started weak on) and the worst
    prompt, since "every prompt reaches 0.95" is a claim about the minimum, not the mean."""
    return {"accuracy": float(right.mean()),
            "strong_half": float(right[strong].mean()),
            "weak_half": float(right[~strong].mean()),
            "worst_prompt": float(right.min())}


@contextlib.contextmanager
def one_thread():
    """Run torch on one intra-op thread, restoring the caller's setting afterwards.

    The tensors here are a few dozen numbers; with several threads each softmax waits on a
    thread pool, which on a busy 2-core machine made a step ~10x slower (11 ms per softmax).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def simulate(method: str, pa: float = 0.9, pb: float = 0.2, steps: int = DEFAULTS["steps"],
             seed: int = DEFAULTS["seed"], *, prompts: int = DEFAULTS["prompts"],
             options: int = DEFAULTS["options"], rollouts: int = DEFAULTS["rollouts"],
             lr: float = DEFAULTS["lr"], optimizer: str = DEFAULTS["optimizer"],
             eps: float = DEFAULTS["eps"], tie: str = DEFAULTS["tie"],
             prompts_per_step: int | None = DEFAULTS["prompts_per_step"],
             ema_alpha_start: float = DEFAULTS["ema_alpha_start"],
             ema_alpha_end: float = DEFAULTS["ema_alpha_end"]) -> dict:
    """Train the two tabular agents of ``make_scenario(pa, pb)`` with ``method``; return
    ``{agent: {"accuracy", "strong_half", "weak_half", "worst_prompt"}}`` after ``steps``
    steps, each the probability on the right option (see ``summarise``).

    Each step mirrors ``train.step``: sample B prompts (all P when ``prompts_per_step`` is
    None), every agent samples G = ``rollouts`` answers per prompt, votes, and only then
    does each agent get teacher labels, rewards, group advantages and one update. The
    result depends only on the arguments (one seeded generator for prompts and samples).
    ``co_rewarding_ii``: before sampling, each agent's EMA teacher table moves towards its
    table by ``ema_alpha_start`` annealed to ``ema_alpha_end`` (``ema.cosine_alpha``) and
    samples G answers; its vote is the agent's label.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from: {', '.join(METHODS)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if rollouts < 2:
        raise ValueError(f"rollouts must be >= 2: group advantages need a group, got {rollouts}")
    with one_thread():
        return _simulate(method, pa, pb, steps, seed, prompts, options, rollouts, lr,
                         optimizer, eps, tie, prompts_per_step, (ema_alpha_start, ema_alpha_end))


def _simulate(method, pa, pb, steps, seed, prompts, options, rollouts, lr, optimizer, eps,
              tie, prompts_per_step, ema=(0.01, 1e-5)) -> dict:
    source, topology = METHODS[method]
    scenario = make_scenario(pa, pb, prompts, options, eps)
    B = prompts if prompts_per_step is None else prompts_per_step
    if not 1 <= B <= prompts:
        raise ValueError(f"prompts_per_step must be within 1..{prompts}, got {B}")
    grader = get_grader("corrected")
    gen = torch.Generator().manual_seed(seed)
    tables = [torch.nn.Parameter(initial_logits(scenario.probs[a]).float())  # [P, K] each
              for a in range(len(AGENTS))]
    optims = [make_optimizer([t], optimizer, lr) for t in tables]
    teachers_ema = ([t.detach().clone() for t in tables] if source == "ema_teacher_vote"
                    else [])  # [A] EMA of each table [P, K]

    for step in range(1, steps + 1):
        rows = (torch.arange(prompts) if B == prompts
                else torch.randperm(prompts, generator=gen)[:B])  # [B]
        problems = [scenario.problems[i] for i in rows.tolist()]
        # 1. every agent samples and votes before anyone updates
        sampled = [sample_answers(t, rows, rollouts, gen) for t in tables]  # [A] x ([B][G], [B, G])
        votes = [vote_all(answers, problems, tie=tie, grader=grader)
                 for answers, _ in sampled]  # [A][B]
        own_teacher: list = [()] * len(tables)  # [A][B] the EMA teachers' votes
        for a, ema_table in enumerate(teachers_ema):
            ema_update_(ema_table, tables[a].detach(), cosine_alpha(step, steps, *ema))
            answers_t, _ = sample_answers(ema_table, rows, rollouts, gen)  # [B][G]
            own_teacher[a] = vote_all(answers_t, problems, tie=tie, grader=grader)
        # 2. teacher labels, rewards, advantages; 3. update
        for a, (table, opt) in enumerate(zip(tables, optims)):
            answers, picks = sampled[a]
            # [B]: the agent's EMA teacher's votes (Co-rewarding-II), else the source's labels
            teachers = (list(own_teacher[a]) if teachers_ema else
                        teachers_for(source, a, votes, problems, topology, tie, grader))
            scored = score(answers, teachers, problems, grader)
            adv = grpo.group_advantages(scored.rewards, valid=scored.valid)  # [B, G]
            if bool((adv != 0).any()):  # as the trainer: no signal, no optimizer step
                policy_update(table, opt, rows, picks, adv)
    return {name: summarise(right_probs(tables[a].detach(), scenario), scenario.strong[a])
            for a, name in enumerate(AGENTS)}


# ------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``vlcohort simulate`` options."""
    d = DEFAULTS
    parser.add_argument("--methods", default="co_rl,ttrl",
                        help=f"comma-separated methods among {', '.join(METHODS)} "
                             "(default co_rl,ttrl)")
    parser.add_argument("--pa", type=float, default=0.9,
                        help="agent A's probability of the right option on the first half "
                             "(B's on the second half); default 0.9")
    parser.add_argument("--pb", type=float, default=0.2,
                        help="agent B's probability of the right option on the first half "
                             "(A's on the second half); default 0.2")
    parser.add_argument("--steps", type=int, default=d["steps"],
                        help=f"RL steps (default {d['steps']})")
    parser.add_argument("--seed", type=int, default=d["seed"],
                        help=f"random seed (default {d['seed']})")
    parser.add_argument("--prompts", type=int, default=d["prompts"],
                        help=f"number of prompts P, even (default {d['prompts']})")
    parser.add_argument("--prompts-per-step", type=int, default=None,
                        help="prompts sampled per step B (default: all P)")
    parser.add_argument("--options", type=int, default=d["options"],
                        help=f"options per prompt K (default {d['options']})")
    parser.add_argument("--rollouts", type=int, default=d["rollouts"],
                        help=f"answers per prompt per agent G (default {d['rollouts']})")
    parser.add_argument("--lr", type=float, default=d["lr"],
                        help=f"learning rate (default {d['lr']}; Adam: about the change of "
                             "each logit per step)")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default=d["optimizer"],
                        help="adam (default; lr ~ logit change per step) or sgd (needs a "
                             "much larger lr: the loss is a mean over B x G answers)")
    parser.add_argument("--eps", type=float, default=d["eps"],
                        help=f"initial probability of each option that is neither right nor "
                             f"the distractor (default {d['eps']})")
    parser.add_argument("--tie", choices=("abstain", "first", "canonical"), default=d["tie"],
                        help="vote tie rule (default abstain)")
    parser.add_argument("--ema-alpha-start", type=float, default=d["ema_alpha_start"],
                        help="co_rewarding_ii: the policy's weight in the first EMA update "
                             f"of the teacher (default {d['ema_alpha_start']}, the published "
                             "recipe's)")
    parser.add_argument("--ema-alpha-end", type=float, default=d["ema_alpha_end"],
                        help="co_rewarding_ii: the policy's weight in the last EMA update "
                             f"(default {d['ema_alpha_end']})")
    parser.add_argument("--json", action="store_true",
                        help="print {method: {agent: {accuracy, strong_half, weak_half, "
                             "worst_prompt}}} as JSON")


def parse_methods(text: str) -> list[str]:
    """``"co_rl, ttrl"`` -> ["co_rl", "ttrl"]; an unknown name is an error listing the known."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from: {', '.join(METHODS)}")
    return names


def format_table(results: dict, pa: float, pb: float) -> str:
    """A readable table: one row per (method, agent)."""
    lines = [f"pa={pa:g} pb={pb:g} (pa + pb = {pa + pb:g}): probability on the right option",
             f"{'method':<10} {'agent':<5} {'accuracy':>9} {'strong_half':>12} {'weak_half':>10}"
             f" {'worst_prompt':>13}"]
    for method, agents in results.items():
        for agent, acc in agents.items():
            lines.append(f"{method:<10} {agent:<5} {acc['accuracy']:>9.4f} "
                         f"{acc['strong_half']:>12.4f} {acc['weak_half']:>10.4f}"
                         f" {acc['worst_prompt']:>13.4f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Simulate each requested method and print the table (or JSON).

    Returns 0, or 2 after a one-line message on stderr when an option is out of range (an
    unknown method, an odd prompt count, pa or pb outside (0, 1)...): a person typed it.
    """
    try:
        results = {
            method: simulate(method, args.pa, args.pb, args.steps, args.seed,
                             prompts=args.prompts, options=args.options,
                             rollouts=args.rollouts, lr=args.lr, optimizer=args.optimizer,
                             eps=args.eps, tie=args.tie, prompts_per_step=args.prompts_per_step,
                             ema_alpha_start=getattr(args, "ema_alpha_start", DEFAULTS["ema_alpha_start"]),
                             ema_alpha_end=getattr(args, "ema_alpha_end", DEFAULTS["ema_alpha_end"]))
            for method in parse_methods(args.methods)
        }
    except ValueError as e:
        print(f"vlcohort simulate: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(format_table(results, args.pa, args.pb))
    return 0


if __name__ == "__main__":  # pragma: no cover - `vlcohort simulate` is the entry point
    p = argparse.ArgumentParser(prog="vlcohort simulate", description=__doc__.split("\n")[0])
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))
