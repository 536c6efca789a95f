"""The built-in reward sources (registered as ``reward_sources.RewardSource`` objects; the
registry and what a source declares are in ``training/reward_sources.py``, Co-rewarding's
two sources in ``training/co_rewarding.py``): where an agent's reward comes from.

Two kinds. A *label* source (``REWARD_SOURCES``) maps (agent index, every agent's votes,
the problems) to that agent's *teachers* [B] (:data:`Teacher`: a vote, a gold answer, or
None = no label: the prompt gives this agent no learning signal); rewards are then 1 / 0:
for a vote, whether the answer is in the vote's winning class by the vote's own
clustering rule (``voting.in_winning_class``), so the vote and the reward are one
decision; for a gold, whether the one grader (``grading.py``) calls it equivalent; plus
an optional format term. An *intrinsic* source
(``INTRINSIC_SOURCES``) needs no label and no answer: it maps per-token statistics of the
agent's own next-token distributions over its completion ([N, T], from
``logprobs.completion_token_stats``) to one reward per completion [B, G].

| source         | reward of agent a's completion g on prompt b           | method    |
|----------------|--------------------------------------------------------|-----------|
| ``peer_vote``  | 1 if it is in the winning class of its teacher's vote (below)   | Co-RL     |
| ``self_vote``  | 1 if agent a's own vote counted it for the winner      | TTRL      |
| ``ground_truth`` | 1 if it matches the problem's gold (never shown to the model) | GT-Reward |
| ``self_certainty`` | mean over its tokens of KL(U || p), U uniform over the vocabulary | INTUITOR (arXiv 2505.19590) |
| ``entropy``    | minus the mean over its tokens of the entropy H(p)     | RENT (arXiv 2505.22660) |
| ``ema_teacher_vote`` | 1 if in the winning class of its EMA teacher's vote | Co-rewarding-II |
| ``cross_view_vote`` | 1 if in the winning class of a's vote on the other wording | Co-rewarding-I |

Co-rewarding is arXiv 2508.00410 (``training/co_rewarding.py``): the EMA teacher
(``training/ema.py``) samples G answers of the same prompt; the other wording is the
agent's ``agents.N.view`` of the question.

``peer_vote``'s teacher is agent a-1's vote (``reward.ring=previous``; a+1: ``next``) or
the other agents' labels (``all_peers``).

p is the policy's next-token distribution at each completion position, computed in a
no-grad pass just before the update (its log-probs then serve as the update's "old"
log-probs, so the pass costs nothing extra when ``grpo.ppo_epochs > 1``). Whether p is
softmax(logits) or softmax(logits / rollout.temperature) is
``reward.intrinsic_temperature_scaled`` (default: unscaled, as INTUITOR's published code).
Any source may be any agent's (``agents.N.reward_source``): one agent of a cohort can be
rewarded by self-certainty while another learns from peer votes. Whatever the source,
DAPO's soft overlong penalty (:func:`overlong_penalty`, ``reward.overlong_buffer``) can
be added to the rewards before group normalisation.

What an *answer* is, is ``reward.answer_kind`` (:class:`AnswerKind`, :data:`ANSWER_KIND`). ``math``: the span
``extract_answer`` reads, voted over the grader's equivalence classes. ``code``: the
completion's program (``code.blocks.program_of``: its last fenced block, else the whole
text), standing in the vote as its *behaviour key* (``code.equivalence.behaviour_key``: a
hash of its outputs on the prompt's public inputs, ``meta["code_public"]``, never their
expected outputs), so two programs are one answer iff they behave the same there, and a
cohort votes on code without gold. A program that does not run is an abstention, like an
unparsed answer. Keys are compared exactly (:data:`CODE_KEYS`: no math merging of
hashes); the tie / ``min_share`` rules and teacher topologies are the math ones. With
``ground_truth`` a program is rewarded iff it passes the prompt's tests
(``meta["code_tests"]``, ``code.checks.check_program``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from vlcohort.answers.extract import extract_answer
from vlcohort.answers.voting import Vote, in_winning_class, majority_vote, teacher_votes
from vlcohort.data.problems import ANSWER_KIND_NEEDS, Problem
from vlcohort.training import reward_sources
from vlcohort.training.reward_sources import RewardSource, register

if TYPE_CHECKING:
    from vlcohort.rollout.base import Rollouts
    from vlcohort.training.update import OldLogprobs

#: A prompt's teacher: a :class:`Vote` (a rollout is rewarded iff its answer is in the
#: vote's winning class, ``voting.in_winning_class``: the vote and the reward are one
#: decision), a gold answer (rewarded iff the grader calls it equivalent), or None (no
#: label: no learning signal).
Teacher = Vote | str | None

#: fn(agent, votes [A][P], problems [P], topology=, tie=, grader=, ring=) -> teachers [P].
LabelFn = Callable[..., list]


def _peer_vote(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
               topology: str = "ring", tie: str = "abstain", grader=None,
               ring: str = "previous") -> list[Vote | None]:
    return [teacher_votes([votes[a][b] for a in range(len(votes))], topology, p.options,
                          tie=tie, grader=grader, ring=ring)[agent]
            for b, p in enumerate(problems)]


def _self_vote(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
               **_) -> list[Vote]:
    return list(votes[agent])


def _ground_truth(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
                  **_) -> list[str | None]:
    return [p.gold for p in problems]


#: The label functions of the sources registered below (Co-rewarding's are in
#: ``training/co_rewarding.py``, with the rest of what those sources need).
REWARD_SOURCES: dict[str, LabelFn] = {
    "peer_vote": _peer_vote,
    "self_vote": _self_vote,
    "ground_truth": _ground_truth,
}


def _mean_over_tokens(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T] per-token values, [N, T] 1/0 mask -> [N] mean over each row's real tokens
    (0 for a row without any)."""
    real = mask.bool()
    return per_token.masked_fill(~real, 0.0).sum(1) / real.sum(1).clamp(min=1).to(per_token.dtype)


def _self_certainty(self_certainty: torch.Tensor, entropy: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    return _mean_over_tokens(self_certainty, mask)


def _neg_entropy(self_certainty: torch.Tensor, entropy: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
    return -_mean_over_tokens(entropy, mask)


#: name -> fn(self_certainty [N, T], entropy [N, T], mask [N, T]) -> rewards [N].
INTRINSIC_SOURCES: dict[str, Callable[..., torch.Tensor]] = {
    "self_certainty": _self_certainty,
    "entropy": _neg_entropy,
}


def intrinsic_rewards(source: str, self_certainty: torch.Tensor, entropy: torch.Tensor,
                      mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """Rewards [B, G] of an intrinsic source from per-token statistics [N, T] (rows
    prompt-major, N = B x G) and the completion mask [N, T]."""
    try:
        fn = INTRINSIC_SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown intrinsic reward source {source!r}; registered: "
                         + ", ".join(INTRINSIC_SOURCES)) from None
    return fn(self_certainty, entropy, mask).reshape(-1, group_size)  # [N] -> [B, G]


def intrinsic_scored(rewards: torch.Tensor, n_prompts: int,
                     prompt_indices: Sequence[int]) -> "Scored":
    """A :class:`Scored` over all ``n_prompts`` prompts from intrinsic rewards [len(idx), G]
    of the prompts ``prompt_indices``; the other prompts (another agent's shard under
    ``data.decouple``) get no reward and valid=False. A prompt with a non-finite reward (a
    policy whose logits went NaN / inf) gets no reward and valid=False too, so it gives no
    learning signal instead of stopping the run. No label: ``correct`` is all False."""
    G = rewards.shape[1]
    full = torch.zeros(n_prompts, G, dtype=torch.float32)  # [B, G]
    valid = torch.zeros(n_prompts, dtype=torch.bool)  # [B]
    idx = torch.as_tensor(list(prompt_indices), dtype=torch.long)
    finite = torch.isfinite(rewards).all(dim=1)  # [len(idx)]
    full[idx] = torch.where(finite[:, None], rewards.float(), 0.0)
    valid[idx] = finite
    return Scored(rewards=full, valid=valid, correct=torch.zeros(n_prompts, G, dtype=torch.bool))


def extract_all(texts_by_prompt: Sequence[Sequence[str]], style: str = "auto") -> list[list[str | None]]:
    """[B][G] completion texts -> [B][G] answer spans (None: nothing extractable)."""
    return [[extract_answer(t, style=style) for t in row] for row in texts_by_prompt]


def vote_all(answers: Sequence[Sequence[str | None]], problems: Sequence[Problem],
             tie: str = "abstain", min_share: float = 0.0, grader=None,
             share_of: str = "all") -> list[Vote]:
    """One vote per prompt over its G answers (``share_of``: what ``min_share`` divides
    by, ``voting.SHARE_BASES``)."""
    return [majority_vote(row, p.options, tie=tie, min_share=min_share, grader=grader,
                          share_of=share_of)
            for row, p in zip(answers, problems)]


class BehaviourKeyGrader:
    """The grader of code answers (``reward.answer_kind=code``): an answer is a behaviour
    key, a hash of the program's outputs on the public inputs, so two answers are one
    class iff their keys are equal. Nothing merges: two hashes are never "nearly" equal,
    and the math grader would read a hex digest as a number. Implements the
    ``grading.Grader`` protocol the vote, the reward and the agreement metric call."""

    merges_classes = False

    def __repr__(self) -> str:
        return "BehaviourKeyGrader()"

    def canonical(self, answer: str | None, options=None) -> str | None:
        return answer

    def is_equivalent(self, pred: str | None, gold: str | None, options=None) -> bool:
        return pred is not None and pred == gold


#: The one grader of behaviour keys.
CODE_KEYS = BehaviourKeyGrader()


class CodeProblemError(ValueError):
    """A prompt that ``reward.answer_kind=code`` cannot use: it lacks (or holds a broken)
    ``meta["code_public"]`` / ``meta["code_tests"]``. Records read from a file are skipped
    and counted at load instead (``problems.load_problems_from(require_code=...)``); this is
    for problems built in memory, where there is no file to count against."""


def code_tests_of(problem: Problem, fld: str = "code_public"):
    """``problem.meta[fld]`` as a ``code.checks.CodeTests`` (``code_public``: the public
    inputs the vote runs; ``code_tests``: what ``ground_truth`` checks against)."""
    from vlcohort.code.checks import CodeTests

    d = problem.meta.get(fld)
    if not d:
        raise CodeProblemError(
            f"problem {problem.id!r} (source {problem.source or '?'}): no meta[{fld!r}]; "
            f"reward.answer_kind=code needs each prompt's {'public inputs' if fld == 'code_public' else 'tests'} "
            f"(a data file's {'public_tests' if fld == 'code_public' else 'tests'} field, in "
            "the CodeTests dict form), or use reward.answer_kind=math")
    try:
        return CodeTests.from_dict(d)
    except Exception as e:  # any malformed dict: name the record and field
        raise CodeProblemError(f"problem {problem.id!r} (source {problem.source or '?'}): "
                               f"meta[{fld!r}] is not a CodeTests dict: {e}") from e


def _is_blank_program(code: str) -> bool:
    """A program with no statement (empty, whitespace, comments only). It would "run" and
    print nothing, so every empty completion would agree with every other: an abstention
    instead."""
    return not any(line.strip() and not line.lstrip().startswith("#")
                   for line in code.splitlines())


def _cannot_run(code: str, tests) -> bool:
    """Whether ``code`` is no program at all: blank, or (where the program runs as
    written: every kind but HumanEval's, whose completion is joined to the prompt) not
    valid Python. Decided here by ``compile`` (which runs nothing) instead of a sandboxed
    run: early in training most completions are prose, and each sandboxed run costs a
    process."""
    if _is_blank_program(code):
        return True
    if tests.kind == "humaneval":
        return False
    try:
        compile(code, "<completion>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError (NUL bytes), deep nesting
        return True
    return False


def _pool_map(fn, jobs: Sequence, workers: int | None) -> list:
    """``[fn(*job) for job in jobs]``, run on a bounded thread pool (each job waits on a
    sandboxed subprocess, so threads overlap them), order kept."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    if not jobs:
        return []
    n = min(len(jobs), workers or os.cpu_count() or 1)
    if n <= 1:
        return [fn(*job) for job in jobs]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="code-key") as ex:
        return list(ex.map(lambda job: fn(*job), jobs))


def code_keys_all(texts_by_prompt: Sequence[Sequence[str]], problems: Sequence[Problem],
                  workers: int | None = None, limits=None,
                  language: str | None = "python") -> list[list[str | None]]:
    """[B][G] completion texts -> [B][G] behaviour keys of their programs on each prompt's
    public inputs (None: no program, or it did not run: an abstention).

    The step's one sandbox pass: the keys are what crosses between agents and what every
    vote and reward compares, so each program runs once per step, however many agents
    vote on it. A program written twice for the same public inputs (in a group, by
    another agent, for a repeated prompt) runs once, one that is blank or does
    not compile not at all (:func:`_cannot_run`); all the B x G runs share one bounded
    pool of ``workers`` (None: every core). A prompt without ``code_public`` is a
    :class:`CodeProblemError` before anything runs."""
    from vlcohort.code.blocks import program_of
    from vlcohort.code.equivalence import behaviour_key

    tests = [code_tests_of(p, "code_public") for p in problems]  # [B], checked up front
    programs = [[program_of(t, language) for t in row] for row in texts_by_prompt]  # [B][G]
    unique: dict[tuple, int] = {}  # (public inputs, program) -> its run
    for t, row in zip(tests, programs):
        for code in row:
            if (t, code) not in unique and not _cannot_run(code, t):
                unique[(t, code)] = len(unique)
    jobs = [(code, t) if limits is None else (code, t, limits) for (t, code) in unique]
    keys = _pool_map(behaviour_key, jobs, workers)  # [U]
    return [[keys[unique[(t, code)]] if (t, code) in unique else None for code in row]
            for t, row in zip(tests, programs)]


def code_verdicts(texts_by_prompt: Sequence[Sequence[str]], problems: Sequence[Problem],
                  workers: int | None = None, limits=None,
                  language: str | None = "python") -> list[list[bool]]:
    """[n][G] completion texts -> [n][G] whether each program passes its prompt's tests
    (``meta["code_tests"]``), checked on one bounded pool (``code.checks.check_many``)."""
    from vlcohort.code.blocks import program_of
    from vlcohort.code.checks import check_many

    tests = [code_tests_of(p, "code_tests") for p in problems]  # [n]
    jobs = [(program_of(t, language), tests[b]) for b, row in enumerate(texts_by_prompt)
            for t in row]  # [n x G]
    kw = {} if limits is None else {"limits": limits}
    verdicts = check_many(jobs, workers=workers, **kw) if jobs else []
    G = len(texts_by_prompt[0]) if texts_by_prompt else 0
    return [[v.passed for v in verdicts[b * G:(b + 1) * G]]
            for b in range(len(texts_by_prompt))]


@dataclass(frozen=True, eq=False)  # holds tensors: no element-wise ``==`` by accident
class Scored:
    rewards: torch.Tensor  # [B, G]
    valid: torch.Tensor  # [B] bool: the prompt has a label (else: zero advantage)
    correct: torch.Tensor  # [B, G] bool: the answer matches the label

    def select(self, prompt_indices: list[int]) -> "Scored":
        idx = torch.tensor(prompt_indices, dtype=torch.long)
        return Scored(self.rewards[idx], self.valid[idx], self.correct[idx])

    def concat(self, other: "Scored") -> "Scored":
        """The prompts of ``self`` then those of ``other`` [B + B']."""
        return Scored(torch.cat([self.rewards, other.rewards]), torch.cat([self.valid, other.valid]),
                      torch.cat([self.correct, other.correct]))


def label_of(teacher: Teacher) -> str | None:
    """The label a teacher stands for: a vote's winning label, or the gold itself."""
    return teacher.label if isinstance(teacher, Vote) else teacher


def score(answers: Sequence[Sequence[str | None]], teachers: Sequence[Teacher],
          problems: Sequence[Problem], grader, format_weight: float = 0.0) -> Scored:
    """1 / 0 rewards against each prompt's teacher (:data:`Teacher`), + ``format_weight``
    for an extractable answer. A vote rewards the answers in its winning class
    (``voting.in_winning_class``, the rule the vote itself counted by); a gold string, the
    answers the grader calls equivalent to it. A prompt without a label gets reward 0
    everywhere and valid=False."""
    B, G = len(answers), len(answers[0]) if answers else 0
    correct = torch.zeros(B, G, dtype=torch.bool)
    parsed = torch.zeros(B, G, dtype=torch.bool)
    labels = [label_of(t) for t in teachers]
    for b, (row, teacher, label, p) in enumerate(zip(answers, teachers, labels, problems)):
        for g, ans in enumerate(row):
            parsed[b, g] = ans is not None
            if ans is None or label is None:
                continue
            if isinstance(teacher, Vote):
                correct[b, g] = in_winning_class(ans, teacher, p.options, grader)
            else:
                correct[b, g] = bool(grader.is_equivalent(ans, label, p.options))
    valid = torch.tensor([label is not None for label in labels], dtype=torch.bool)
    rewards = correct.float() + format_weight * parsed.float()
    rewards[~valid] = 0.0
    return Scored(rewards=rewards, valid=valid, correct=correct)


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int,
                     penalty: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al., arXiv 2503.14476, eq. 13; verl's
    ``overlong_buffer``): with L_max = ``max_new_tokens`` and L_cache = ``buffer``, a
    completion of L tokens gets 0 while L <= L_max - L_cache, then
    (L_max - L_cache - L) / L_cache x ``penalty``, falling linearly to -``penalty`` at
    L_max, and -``penalty`` beyond. A graded fine for running long, instead of the hard
    cut-off's silent truncation; ``buffer`` 0: no penalty.

    ``lengths`` any shape (completion tokens, stop token included) -> same shape, float32.

    >>> overlong_penalty(torch.tensor([4, 6, 7, 8]), max_new_tokens=8, buffer=4, penalty=0.5)
    tensor([ 0.0000, -0.2500, -0.3750, -0.5000])
    """
    if buffer <= 0:
        return torch.zeros(lengths.shape, dtype=torch.float32)
    free = max_new_tokens - buffer  # L_max - L_cache
    return ((free - lengths.float()) / buffer).clamp(min=-1.0, max=0.0) * penalty


def with_overlong_penalty(scored: Scored, lengths: torch.Tensor, max_new_tokens: int,
                          buffer: int, penalty: float = 1.0) -> Scored:
    """``scored`` with :func:`overlong_penalty` added to the rewards [P, G] of the prompts
    that have a reward (valid), before group normalisation, as DAPO adds it to the rule
    reward. ``lengths`` [P x G], prompt-major. A prompt without a label keeps its zeros:
    it gives no signal either way."""
    P, G = scored.rewards.shape
    shaped = overlong_penalty(lengths.reshape(P, G), max_new_tokens, buffer, penalty)  # [P, G]
    rewards = scored.rewards + shaped * scored.valid[:, None].float()
    return Scored(rewards=rewards, valid=scored.valid, correct=scored.correct)


def teachers_for(source: str, agent: int, votes: Sequence[Sequence[Vote]],
                 problems: Sequence[Problem], topology: str = "ring", tie: str = "abstain",
                 grader=None, ring: str = "previous") -> list[Teacher]:
    """Agent ``agent``'s teacher [P] of each prompt under label function ``source``
    (:data:`REWARD_SOURCES`)."""
    try:
        fn = REWARD_SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown label source {source!r}; registered: "
                         + ", ".join(REWARD_SOURCES)) from None
    return fn(agent, votes, problems, topology=topology, tie=tie, grader=grader, ring=ring)


def gold_match(answer_or_label: str | None, problem: Problem, grader) -> bool | None:
    """Whether an answer / label equals the problem's gold; None when there is no gold."""
    if problem.gold is None:
        return None
    if answer_or_label is None:
        return False
    return bool(grader.is_equivalent(answer_or_label, problem.gold, problem.options))


# --------------------------------------------------------------------------- one signature


@dataclass
class RewardInputs:
    """What any reward source may read for one agent at one step (P prompts, G rollouts
    each; rows of per-rollout tensors prompt-major, b * G + g)."""

    agent: int  # the agent's index in the cohort
    answers: Sequence[Sequence[str | None]]  # [P][G] the agent's answers
    votes: Sequence[Sequence[Vote]]  # [A][P] every agent's own votes
    problems: Sequence[Problem]  # [P]
    trained: Sequence[int]  # the prompts whose rollouts this process trains on
    token_stats: Callable[[], Any]  # the no-grad pass over those rollouts (training.update.TokenStats)
    group_size: int  # G
    grader: Any = None
    topology: str = "ring"
    tie: str = "abstain"
    format_weight: float = 0.0
    ring: str = "previous"  # ring direction of peer_vote (voting.RING_DIRECTIONS)
    answer_kind: str = "math"  # reward.answer_kind (ANSWER_KINDS): code answers are behaviour keys
    trained_texts: Sequence[Sequence[str]] = ()  # [n][G] completions of ``trained`` (code ground truth)
    code_workers: int | None = None  # sandbox pool size (None: every core)
    code_limits: Any = None  # code.sandbox.Limits of one run (None: the sandbox's defaults)
    partners: Sequence[int] = ()  # [P] each prompt's other wording, where the round holds both
    extra: Any = None  # what the agent's source made this round (RewardSource.round_inputs)


@dataclass(frozen=True, eq=False)
class Reward:
    """A reward source's answer: teacher labels [P] (None: no label), the scored rewards
    [P, G], the old log-probs the update may reuse (an intrinsic pass's, with its encoded
    batches) and extra metrics of the source."""

    labels: list
    scored: Scored
    old: OldLogprobs | None = None
    metrics: dict = field(default_factory=dict)
    loss_groups: tuple = ()  # [P] each prompt's loss group (Co-rewarding-I: 0 the question
    # as asked, 1 its rephrasing), read by the update under grpo.view_loss=sum; () none

    def concat(self, other: "Reward") -> "Reward":
        """The prompts of ``self`` then those of ``other`` [P + P']; the old log-probs are
        dropped (they covered ``self``'s rollouts only) and the metrics are ``self``'s."""
        return Reward(labels=list(self.labels) + list(other.labels),
                      scored=self.scored.concat(other.scored), metrics=self.metrics,
                      loss_groups=tuple(self.loss_groups) + tuple(other.loss_groups))


def code_ground_truth(x: RewardInputs) -> Reward:
    """``ground_truth`` with ``answer_kind=code``: a program is rewarded iff it passes its
    prompt's tests (``meta["code_tests"]``), + ``format_weight`` when it ran on the public
    inputs (its key is not None). Only the prompts this process trains on are run (their
    texts are here; another agent's shard under ``data.decouple`` gets no reward and
    valid=False, as an intrinsic source's). No label crosses: ``labels`` are all None."""
    P, G = len(x.problems), x.group_size
    correct = torch.zeros(P, G, dtype=torch.bool)  # [P, G]
    valid = torch.zeros(P, dtype=torch.bool)  # [P]
    trained = list(x.trained)
    if trained:
        passed = code_verdicts(x.trained_texts, [x.problems[b] for b in trained],
                               x.code_workers, x.code_limits)  # [n][G]
        rows = torch.tensor(trained, dtype=torch.long)
        correct[rows] = torch.tensor(passed, dtype=torch.bool).reshape(len(trained), G)
        valid[rows] = True
    parsed = torch.tensor([[a is not None for a in row] for row in x.answers],
                          dtype=torch.bool).reshape(P, G)  # [P, G]
    rewards = correct.float() + x.format_weight * parsed.float()
    rewards[~valid] = 0.0
    return Reward([None] * P, Scored(rewards=rewards, valid=valid, correct=correct),
                  # ``acc`` (share of rollouts matching gold): for code, passing the tests
                  metrics={"acc": float(correct[valid].float().mean())} if bool(valid.any()) else {})


def label_reward(source: str, x: RewardInputs) -> Reward:
    """The rewards of label function ``source`` (:data:`REWARD_SOURCES`): each prompt's
    teacher, then :func:`labelled`."""
    return labelled(x, teachers_for(source, x.agent, x.votes, x.problems, x.topology, x.tie,
                                    x.grader, x.ring))


def labelled(x: RewardInputs, teachers: Sequence[Teacher], metrics: dict | None = None) -> Reward:
    """The rewards of teachers [P]: 1 / 0 (+ the format term) by :func:`score`, the labels,
    and the source's ``metrics`` (a NaN one, from no prompt, left out)."""
    return Reward([label_of(t) for t in teachers],
                  score(x.answers, teachers, x.problems, x.grader, x.format_weight),
                  metrics={k: v for k, v in (metrics or {}).items() if v == v})


def vote_agreement(teachers: Sequence[Teacher], votes: Sequence[Vote], problems: Sequence[Problem],
                   prompts: Sequence[int], grader) -> float:
    """Share of ``prompts`` where the teacher's label and the agent's own vote's label are
    one class by the grader (an abstention on either side: no); NaN without prompts."""
    if not prompts:
        return float("nan")
    same = []
    for b in prompts:
        t, v = label_of(teachers[b]), votes[b].label
        same.append(t is not None and v is not None
                    and bool(grader.is_equivalent(v, t, problems[b].options)))
    return sum(same) / len(same)


class _LabelSource(RewardSource):
    """A source whose teacher is a vote or a gold of the step (:data:`REWARD_SOURCES`)."""

    def reward(self, x: RewardInputs) -> Reward:
        return label_reward(self.name, x)


@register
class PeerVote(_LabelSource):
    """Co-RL: 1 if in the winning class of the teacher's vote (``reward.topology``)."""

    name, methods, min_agents = "peer_vote", ("co_rl",), 2


@register
class SelfVote(_LabelSource):
    """TTRL: 1 if the agent's own vote counted it for the winner."""

    name, methods = "self_vote", ("ttrl",)


@register
class GroundTruth(RewardSource):
    """GT-Reward: 1 if it matches the gold; what "matches" means is the answer kind's."""

    name, methods, needs_gold = "ground_truth", ("gt_reward",), True

    def reward(self, x: RewardInputs) -> Reward:
        return answer_kind(x.answer_kind).ground_truth(x)


class _IntrinsicSource(RewardSource):
    """A reward from the agent's own next-token distributions (:data:`INTRINSIC_SOURCES`),
    computed in a no-grad pass whose log-probs the update reuses."""

    intrinsic = True

    def reward(self, x: RewardInputs) -> Reward:
        st = x.token_stats()  # [n, T] statistics of the trained rollouts, n = len(trained) x G
        r = intrinsic_rewards(self.name, st.self_certainty, st.entropy, st.mask, x.group_size)
        return Reward([None] * len(x.problems), intrinsic_scored(r, len(x.problems), x.trained),
                      old=st.old(),
                      metrics={"self_certainty": st.token_mean("self_certainty"),
                               "entropy": st.token_mean("entropy")})


@register
class SelfCertainty(_IntrinsicSource):
    """INTUITOR: the mean over its tokens of KL(U || p)."""

    name, methods = "self_certainty", ("intuitor",)


@register
class Entropy(_IntrinsicSource):
    """RENT: minus the mean over its tokens of the entropy H(p)."""

    name, methods = "entropy", ("rent",)


def reward_of(source: str, inputs: RewardInputs) -> Reward:
    """The rewards of one agent's rollouts under reward source ``source``."""
    return reward_sources.source(source).reward(inputs)


# ------------------------------------------------------------------------- answer kinds


class AnswerKind:
    """What an answer is (``reward.answer_kind``; module docstring) and everything that
    differs with it: how completions become answers, the grader that compares them, whether
    they compare with a problem's gold, what the ``ground_truth`` source rewards, and what
    a training record must carry."""

    name: str
    runs_programs: bool  # answers come from running the completions' programs (sandbox)

    @property
    def has_gold(self) -> bool:
        """Whether answers compare with ``Problem.gold`` (gold metrics, required at load)."""
        return ANSWER_KIND_NEEDS[self.name].has_gold

    def answers(self, texts: dict[int, list[list[str]]], problems: Sequence[Problem],
                style: str, workers: int | None, limits=None) -> dict[int, list[list[str | None]]]:
        """Each local agent's completion texts {agent: [P_r][G]} -> its answers [P_r][G]
        (None: an abstention)."""
        raise NotImplementedError

    def grader(self, grader):
        """The grader that compares two answers, given the run's (``reward.grader``)."""
        raise NotImplementedError

    def ground_truth(self, x: RewardInputs) -> Reward:
        """The ``ground_truth`` source's rewards."""
        raise NotImplementedError

    def texts_for_reward(self, rollouts: Rollouts) -> Sequence[Sequence[str]]:
        """The completions [n][G] a reward source reads besides the answers."""
        return ()

    def required_fields(self, gold_needed: bool) -> tuple[str, ...]:
        """The meta every training record must carry (``problems.ANSWER_KIND_NEEDS``)."""
        return ANSWER_KIND_NEEDS[self.name].required_fields(gold_needed)


class MathAnswers(AnswerKind):
    """``math``: the span ``extract_answer`` reads (``reward.answer_style``), voted over the
    run's grader's equivalence classes; ``ground_truth`` rewards a match with the gold."""

    name, runs_programs = "math", False

    def answers(self, texts, problems, style, workers, limits=None):
        return {i: extract_all(t, style) for i, t in texts.items()}

    def grader(self, grader):
        return grader

    def ground_truth(self, x: RewardInputs) -> Reward:
        return label_reward("ground_truth", x)


class CodeAnswers(AnswerKind):
    """``code``: the completion's program, standing as its behaviour key on the prompt's
    public inputs (:func:`code_keys_all`: every local agent's programs on one bounded
    sandbox pool, a program two agents wrote run once); keys compare exactly
    (:data:`CODE_KEYS`); ``ground_truth`` runs the prompt's tests
    (:func:`code_ground_truth`)."""

    name, runs_programs = "code", True

    def answers(self, texts, problems, style, workers, limits=None):
        order = list(texts)
        rows = [row for i in order for row in texts[i]]  # [n_local x P_r][G], agent-major
        keys = code_keys_all(rows, list(problems) * len(order), workers=workers, limits=limits)
        P = len(problems)
        return {i: keys[k * P:(k + 1) * P] for k, i in enumerate(order)}

    def grader(self, grader):
        return CODE_KEYS

    def ground_truth(self, x: RewardInputs) -> Reward:
        return code_ground_truth(x)

    def texts_for_reward(self, rollouts: Rollouts) -> Sequence[Sequence[str]]:
        return rollouts.texts_by_prompt()


#: ``reward.answer_kind`` names -> their :class:`AnswerKind`.
ANSWER_KIND: dict[str, AnswerKind] = {k.name: k for k in (MathAnswers(), CodeAnswers())}

#: The names of :data:`ANSWER_KIND`, the config's choices.
ANSWER_KINDS = tuple(ANSWER_KIND)


def answer_kind(name: str) -> AnswerKind:
    """The :class:`AnswerKind` named ``name``."""
    try:
        return ANSWER_KIND[name]
    except KeyError:
        raise ValueError(f"unknown answer kind {name!r}; choose one of: "
                         + ", ".join(ANSWER_KINDS)) from None
