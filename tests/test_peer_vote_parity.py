"""Co-RL's peer-vote labels and rewards against the published Co-RL labelling.

The published rule, read from github.com/DrStranded/mllm-repro ``trainers/`` (the same
code, docstrings aside, is in github.com/DrStranded/Co-RL ``mllm/trainers/``):

- answer: ``verifiers/math_verify_wrapper.extract_answer_tag``, the last
  ``<answer>...</answer>``, stripped; empty: None.
- key: ``mcq_grade.extract_and_normalize_mcq`` -> ``normalize_mcq``: an unambiguous option
  letter A-E (``mcq_letter``: "C", "(C)", "c", "C. text", "answer is C") keys as that
  uppercase letter, anything else as Hendrycks' ``normalize_answer`` string
  (``verifiers.qwen.math_normalize``: spaces dropped, "0.5" and "1/2" ->
  "\\frac{1}{2}", "x = 4" -> "4", case kept); an empty key is None.
- vote: ``co_label_utils._majority_vote(keys, threshold)``: a ``Counter`` over the
  non-None keys (string identity), ``most_common(1)`` (a tie: the key inserted first),
  share = top count / number of non-None keys; a share below
  ``--self_consistency_threshold`` (0.0 in every launcher) gives no label, i.e.
  ``_UNLABELED_SENTINEL``, which matches nothing.
- teacher: ``mllm_co_grpo_dp_trainer.CoGRPOdpTrainer._calculate_rewards``: group A is
  labelled with group B's key of the same prompt and B with A's.
- reward: ``train_mllm_co_grpo_dp.reward_correctness``: 1.0 iff the rollout's answer is
  not None and ``mcq_grade.grade_mcq_or_math(answer, peer_key)`` (the qwen-sympy
  ``grade_answer``, else the same option letter when the key is a letter A-E), else 0.0;
  no format term.

Every "published" value below was derived by hand from that code (the comments give the
steps); none of it is imported or copied. Ours runs for real: the recipe
``configs/corl_qwen25vl3b_internvl35_2b_mmr1.yaml`` is loaded, and its ``reward.*`` drive
``vote_all`` and ``reward_of("peer_vote", ...)``, the trainer's reward path.

Agreement (pinned by ``test_agreement_count``): of 26 hand-built two-agent vote tables,
10 give identical labels, shares and rewards; 4 more give the same labels (the same
answer, written as each side's key) and identical rewards, only the share differing (the
published vote hashes apart forms its own reward calls equal); 12 differ, each on purpose:
the corrected grader (the recipes' ``reward.grader``, docs/grading.md) calls answers the
same or different where the published string keys and qwen-sympy grader do not. The rules
themselves agree on all 26: tie (first seen), share (over the parsed), gate, teacher (each
other), and reward (on every rollout ours rewards exactly the answers our grader calls
equal to the teacher's label, the published grade-against-the-label rule). Where the grader
is not transitive the two reward rules can part; ours follows the vote's classes
(``test_a_non_transitive_tie_follows_the_vote``). Extraction: 7 of 9 completions give the
same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from vlcohort.answers.extract import extract_answer
from vlcohort.answers.grading import get_grader
from vlcohort.answers.voting import majority_vote
from vlcohort.config import agent_reward_source, load_config
from vlcohort.data.problems import Problem
from vlcohort.training.grpo import group_advantages
from vlcohort.training.rewards import RewardInputs, reward_of, vote_all

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "corl_qwen25vl3b_internvl35_2b_mmr1.yaml"
OPTS = ["1", "3.5", "45", "50"]  # A..D; option B's text is 3.5, D's is 50
LONG = " ".join(["word"] * 250)  # 1249 characters: over grading.MAX_ANSWER_CHARS


@lru_cache(maxsize=None)
def _recipe(overrides: tuple[str, ...] = ()):
    return load_config(RECIPE, list(overrides))


@dataclass(frozen=True)
class Outcome:
    """One prompt, two agents (A = 0, B = 1): each agent's own vote label and share, and
    each agent's rewards [G] (A's taught by B's vote, B's by A's)."""

    labels: tuple
    shares: tuple
    rewards: tuple


def _ours(a, b, options=None, overrides=()):
    """Our labels / shares / rewards, through the recipe's reward settings and the
    trainer's path (vote_all -> reward_of), plus the Reward objects."""
    cfg = _recipe(tuple(overrides))
    r = cfg.reward
    grader = get_grader(r.grader)
    problem = Problem(id="p", text="q", options=options)
    answers = [a, b]
    votes = [vote_all([row], [problem], r.tie, r.min_share, grader, r.min_share_of) for row in answers]
    got = []
    for i, row in enumerate(answers):
        x = RewardInputs(agent=i, answers=[row], votes=votes, problems=[problem], trained=[0],
                         token_stats=lambda: None, group_size=len(row), grader=grader,
                         topology=r.topology, tie=r.tie, format_weight=r.format_weight, ring=r.ring)
        got.append(reward_of(agent_reward_source(cfg, i), x))
    out = Outcome(labels=tuple(v[0].label for v in votes),
                  shares=tuple(v[0].share for v in votes),
                  rewards=tuple(tuple(g.scored.rewards[0].tolist()) for g in got))
    return out, got


@dataclass(frozen=True)
class Table:
    name: str
    a: list
    b: list
    published: Outcome  # hand-derived from the published code
    ours: Outcome | None = None  # None: identical to published (labels, shares, rewards)
    options: list | None = None
    overrides: tuple = ()


def Out(labels, shares, rewards):
    """A hand-derived :class:`Outcome` (labels, shares, rewards of agents A and B)."""
    return Outcome(tuple(labels), tuple(shares), tuple(tuple(float(x) for x in r) for r in rewards))


# ---------------------------------------------------------------------------- identical

PARITY = [
    # keys = answers; A: B 2/4, B: A 3/4. A's rollouts vs "A", B's vs "B".
    Table("plain letters", ["B", "B", "A", "C"], ["B", "A", "A", "A"],
          Out(["B", "A"], [0.5, 0.75], [[0, 0, 1, 0], [1, 0, 0, 0]])),
    # A: C 2, A 2: most_common(1) keeps the key inserted first, "C"; B: "A" likewise.
    Table("tie, first seen", ["C", "A", "A", "C"], ["A", "C", "C", "A"],
          Out(["C", "A"], [0.5, 0.5], [[0, 1, 1, 0], [0, 1, 1, 0]])),
    # A: Nones dropped, 2/3/4 twice each of 6 -> "2" (first), 2/6; B: "4", 2/6.
    Table("three-way tie after unparsed", [None, "2", "3", "3", "2", None, "4", "4"],
          ["4", "3", "3", "2", None, None, "2", "4"],
          Out(["2", "4"], [2 / 6, 2 / 6], [[0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0, 1, 0]])),
    # mcq_letter: "(B)" _LEAD_ONLY, "B. 3.5" _LEAD, "the answer is B" _PHRASE -> B 3/5;
    # B: "B", "B)" -> B, "3.5" -> "3.5", "A. 2" -> A, "option B" -> B: B 3/5. Rewards vs
    # "B": grade_answer fails, the letter fallback fires for every B form; "3.5" has no letter.
    Table("letter forms, no options", ["(B)", "B. 3.5", "A", "A", "the answer is B"],
          ["B", "B)", "3.5", "A. 2", "option B"],
          Out(["B", "B"], [0.6, 0.6], [[1, 1, 0, 0, 1], [1, 1, 0, 0, 1]])),
    # the same with the options known: every answer is a letter form, so keys agree.
    # A: B 3/5; B: C 2, B 2, D 1 -> "C" (first), 2/5.
    Table("letter forms, options known", ["B", "(B)", "B. 3.5", "C", "option C"],
          ["C", "C)", "B", "the answer is B", "D"],
          Out(["B", "C"], [0.6, 0.4], [[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]]), options=OPTS),
    # A: no key -> (None, 0.0) -> sentinel; B: "1" 2/3. A's answers are None -> 0; B's
    # vs the sentinel -> 0.
    Table("nothing parsed", [None, None, None, None], ["1", "1", None, "2"],
          Out([None, "1"], [0.0, 2 / 3], [[0, 0, 0, 0], [0, 0, 0, 0]])),
    # threshold 0.5, share over parsed: A 2/4 is not < 0.5 -> "A"; B 3/4 -> "A".
    Table("min_share 0.5 passes", ["A", "A", "B", "C", None, None], ["A", "B", "A", "A", None, None],
          Out(["A", "A"], [0.5, 0.75], [[1, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0]]),
          overrides=("reward.min_share=0.5",)),
    # threshold 0.6: A's 0.5 < 0.6 -> no label (share still reported); B teaches "A".
    Table("min_share 0.6 abstains", ["A", "A", "B", "C", None, None], ["A", "B", "A", "A", None, None],
          Out([None, "A"], [0.5, 0.75], [[1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]),
          overrides=("reward.min_share=0.6",)),
    # Hendrycks: "x = 4" -> split on "=", LHS "x " has <= 2 chars -> "4"; "y=5" -> "5".
    # A: 4 2, 5 2 -> "4"; B: "4" 2/3.
    Table("equation left-hand side", ["x = 4", "4", "y=5", "5"], ["4", "x=4", "5"],
          Out(["4", "4"], [0.5, 2 / 3], [[1, 1, 0, 0], [1, 1, 0]])),
    # "°" is pre-stripped, "^\circ" removed by Hendrycks: A "45" 3/4; B 45 2, 40 2 -> "45".
    Table("degrees", ["45°", r"45^\circ", "45", "40"], ["45", "40°", "40", "45"],
          Out(["45", "45"], [0.75, 0.5], [[1, 1, 1, 0], [1, 0, 0, 1]])),
]

# ------------------------------------------------ same answer, same rewards, other share
# The published vote hashes forms that its own reward (grade_answer) calls equal; ours
# counts them in one class. The labels name the same answer and the rewards are equal;
# only the winner's share differs (which matters only under a min_share gate, off in the
# recipes).

SAME_ANSWER = [
    # A keys "12cm" 2, "12" 1, "13" -> "12cm" 2/4; B keys "12", "12cm", "13cm", "12.0"
    # all once -> "12" 1/4. grade_answer's _normalize drops "cm" and reads 12.0 as 12.
    Table("units", ["12 cm", "12 cm", "12", "13"], ["12", "12cm", "13 cm", "12.0"],
          Out(["12cm", "12"], [0.5, 0.25], [[1, 1, 1, 0], [1, 1, 0, 1]]),
          Out(["12", "12"], [0.75, 0.75], [[1, 1, 1, 0], [1, 1, 0, 1]])),
    # Hendrycks keeps case: A "Yes" 1, "yes" 2, "No" 1 -> "yes" 2/4; B all distinct ->
    # "YES" 1/3. grade_answer's _normalize lowercases.
    Table("case", ["Yes", "yes", "yes", "No"], ["YES", "no", "Yes"],
          Out(["yes", "YES"], [0.5, 1 / 3], [[1, 1, 1, 0], [1, 0, 1]]),
          Out(["yes", "yes"], [0.75, 2 / 3], [[1, 1, 1, 0], [1, 0, 1]])),
    # Hendrycks: "0.5" -> "\frac{1}{2}" (its one special case), "1/2" -> "\frac{1}{2}";
    # ".5" -> "0.5" -> "\frac{1}{2}"; "0.50" stays. A 3/4, B 2/4. grade_answer("0.50",
    # "\frac{1}{2}"): sympy 1/2 - 0.50 = 0 -> 1.
    Table("one half", ["0.5", "1/2", r"\frac{1}{2}", "2"], ["0.50", ".5", "1/2", "1"],
          Out([r"\frac{1}{2}", r"\frac{1}{2}"], [0.75, 0.5], [[1, 1, 1, 0], [1, 1, 1, 0]]),
          Out(["0.5", "0.5"], [0.75, 0.75], [[1, 1, 1, 0], [1, 1, 1, 0]])),
    # A "2.0" 1, "2" 2, "3" 1 -> "2" 2/4; B all distinct -> "2.0" 1/3. grade_answer:
    # _normalize reads the integer float 2.0 as "2".
    Table("2 and 2.0", ["2.0", "2", "2", "3"], ["2.0", "2", "3"],
          Out(["2", "2.0"], [0.5, 1 / 3], [[1, 1, 1, 0], [1, 1, 0]]),
          Out(["2", "2"], [0.75, 2 / 3], [[1, 1, 1, 0], [1, 1, 0]])),
]

# ------------------------------------------------------------------ intended differences
# Each one is the corrected grader (reward.grader=corrected, the recipes' grader: see
# docs/grading.md) deciding "the same answer" differently from the published string keys
# and qwen-sympy grader; the vote / tie / share / teacher / reward rules are the same.

DIFFERENT = [
    # Option text vs letter (the published mcq_grade.py docstring itself names this as
    # unfixed: "3.5" and "B" hash apart). Published: A "3.5" 3, B 1, A 2 -> "3.5" 3/6; B:
    # B 2 ("B", "B. 3.5"), "3.5" 1, A 1 -> "B" 2/4. grade_mcq_or_math("3.5", "B"): no math
    # match, "3.5" has no letter -> 0; ("B", "3.5") and ("B. 3.5", "3.5"): the key "3.5" is
    # no letter -> 0. Ours: "3.5" names option B, so one class.
    Table("option text names its option", ["3.5", "3.5", "3.5", "B", "A", "A"], ["B", "3.5", "B. 3.5", "A"],
          Out(["3.5", "B"], [0.5, 0.5], [[0, 0, 0, 1, 0, 0], [0, 1, 0, 0]]),
          Out(["B", "B"], [4 / 6, 0.75], [[1, 1, 1, 1, 0, 0], [1, 1, 1, 0]]), options=OPTS),
    # The same split loses a vote: published A: "3.5" 2, B 2, A 3 -> "A" 3/7, although 4
    # of 7 rollouts chose option B. Ours: B 4/7.
    Table("a split majority loses", ["3.5", "3.5", "B", "B. 3.5", "A", "A", "A"], ["B", "3.5", "B. 3.5", "A"],
          Out(["A", "B"], [3 / 7, 0.5], [[0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 1]]),
          Out(["B", "B"], [4 / 7, 0.75], [[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0]]), options=OPTS),
    # Merging changes the plurality: published A: "2.0" 2, "2" 1, "3" 3 -> "3"; ours: 2 (3
    # rollouts) ties 3 (3), the class seen first wins: "2".
    Table("merged forms change the winner", ["2.0", "2", "2.0", "3", "3", "3"], ["2.0", "2", "3"],
          Out(["3", "2.0"], [0.5, 1 / 3], [[1, 1, 1, 0, 0, 0], [0, 0, 1]]),
          Out(["2", "2"], [0.5, 2 / 3], [[1, 1, 1, 0, 0, 0], [1, 1, 0]])),
    # Published A: "Yes" 1, "yes" 1, "No" 2 -> "No"; ours: yes 2 ties no 2 -> "yes" (first).
    Table("case-merged forms change the winner", ["Yes", "yes", "No", "No"], ["YES", "no", "Yes"],
          Out(["No", "YES"], [0.5, 1 / 3], [[1, 1, 0, 0], [0, 1, 0]]),
          Out(["yes", "yes"], [0.5, 2 / 3], [[1, 1, 0, 0], [1, 0, 1]])),
    # "C. 50" when 50 is option D contradicts itself: published keys it "C" (_LEAD); ours
    # gives it no key (docs/grading.md: "C, unless the text is a different option's text
    # (then none)"), so it neither votes nor is rewarded. Published A "C" 3/5; B C 2
    # ("C", "C. 50"), D, B -> "C" 2/4.
    Table("letter contradicts its text", ["C. 50", "C. 50", "C. 50", "B", "B"], ["C", "D", "B", "C. 50"],
          Out(["C", "C"], [0.6, 0.5], [[1, 1, 1, 0, 0], [1, 0, 0, 1]]),
          Out(["B", "C"], [1.0, 1 / 3], [[0, 0, 0, 0, 0], [0, 0, 1, 0]]), options=OPTS),
    # An answer naming no option ("7" with options 1 / 3.5 / 45 / 50) cannot be right;
    # published it votes and wins (A "7" 3/5; B all distinct -> "7" 1/4); ours gives it no
    # key, so the vote is over options only (A: B 2/2; B: B 2/3).
    Table("answer naming no option", ["7", "7", "7", "B", "B"], ["7", "B", "3.5", "C"],
          Out(["7", "7"], [0.6, 0.25], [[1, 1, 1, 0, 0], [1, 0, 0, 0]]),
          Out(["B", "B"], [1.0, 2 / 3], [[0, 0, 0, 1, 1], [0, 1, 1, 0]]), options=OPTS),
    # A lone lowercase letter: published mcq_letter is case-insensitive ("b" -> B; A: B 2,
    # A 2 -> "B"; B: A 2, B 2 -> "A"), and grade_answer lowercases. Ours reads "b" as
    # option B only when the options are known (docs/grading.md); without them "b" is
    # text, and a single letter is not case-folded (A: "A" 2/4; B: all distinct -> "a").
    Table("lowercase letter without options", ["b", "B", "A", "A"], ["a", "A", "b", "B"],
          Out(["B", "A"], [0.5, 0.5], [[0, 0, 1, 1], [0, 0, 1, 1]]),
          Out(["A", "a"], [0.5, 0.25], [[0, 0, 0, 0], [0, 1, 0, 0]])),
    # Unreduced fractions: qwen-sympy's grade_answer refuses two fractions that differ as
    # strings ("if fractions aren't reduced ... shouldn't be marked as correct"); ours
    # compares values. Published B: "\frac{2}{4}" 2 -> 2/4; A's "0.5" vs it: not both
    # fractions -> sympy -> 1; "1/2", "\frac{1}{2}" vs "2/4": fractions -> 0.
    Table("unreduced fraction", ["0.5", "1/2", r"\frac{1}{2}", "2"], ["2/4", "2/4", "1/2", "1"],
          Out([r"\frac{1}{2}", r"\frac{2}{4}"], [0.75, 0.5], [[1, 0, 0, 0], [0, 0, 1, 0]]),
          Out(["0.5", "0.5"], [0.75, 0.75], [[1, 1, 1, 0], [1, 1, 1, 0]])),
    # "$45^{\circ}$": Hendrycks drops "^{\circ}" but keeps the "$" -> key "$45$"; the
    # qwen grader refuses "^{" for sympy -> 0 against "45". Ours: 45 (docs/grading.md).
    # Published B: all distinct -> "$45$" 1/3; A's "45°", "45" vs "$45$": _normalize drops
    # "$" -> 1.
    Table("LaTeX degree", ["45°", "45", "40"], [r"$45^{\circ}$", "45", "40"],
          Out(["45", "$45$"], [2 / 3, 1 / 3], [[1, 1, 0], [0, 1, 0]]),
          Out(["45", "45"], [2 / 3, 2 / 3], [[1, 1, 0], [1, 1, 0]])),
    # A decimal of 4+ significant digits stands for the values that round to it (ours,
    # docs/grading.md); sympy's exact difference does not. Published A: "1.4142" 3/5; B:
    # all distinct -> "\sqrt{2}" 1/3. Ours: A "1.4142" takes "\sqrt{2}" (4/5); B's seeds
    # (count, then key): "1.414" takes "\sqrt{2}" -> "1.414" 2/3.
    Table("rounded decimals", ["1.414", r"\sqrt{2}", "1.4142", "1.4142", "1.4142"],
          [r"\sqrt{2}", "1.414", "1.4142"],
          Out(["1.4142", r"\sqrt{2}"], [0.6, 1 / 3], [[0, 1, 0, 0, 0], [0, 0, 1]]),
          Out(["1.4142", "1.414"], [0.8, 2 / 3], [[1, 1, 0, 0, 0], [1, 0, 1]])),
    # Letters past E: published mcq_letter knows A-E only, so "F. 12" keys "F.12" and
    # "(F)" "(F)"; A all distinct -> "F.12" 1/4; B -> "F" 1/3. vs "F": "(F)" is the
    # one-element tuple (f) = f -> 1; "F. 12" -> 0. Ours: letters A-H.
    Table("option letter F", ["F. 12", "(F)", "F", "E"], ["F", "(F)", "F. 12"],
          Out(["F.12", "F"], [0.25, 1 / 3], [[0, 1, 1, 0], [0, 0, 1]]),
          Out(["F", "F"], [0.75, 1.0], [[1, 1, 1, 0], [1, 1, 1]])),
    # An "answer" over 1000 characters is a dump with no key (docs/grading.md); published
    # it votes and wins (A: the dump, spaces dropped, 2/3), so B's rollouts answering "3"
    # get 0. Ours: A's vote is over "3" alone (1/1), and B's "3"s are rewarded.
    Table("answer over 1000 characters", [LONG, LONG, "3"], ["3", "3", "x"],
          Out([LONG.replace(" ", ""), "3"], [2 / 3, 2 / 3], [[0, 0, 1], [0, 0, 0]]),
          Out(["3", "3"], [1.0, 2 / 3], [[0, 0, 1], [1, 1, 0]])),
]

TABLES = PARITY + SAME_ANSWER + DIFFERENT


@pytest.mark.parametrize("t", PARITY, ids=lambda t: t.name)
def test_identical_to_the_published_labelling(t):
    got, _ = _ours(t.a, t.b, t.options, t.overrides)
    assert got.labels == t.published.labels
    assert got.shares == pytest.approx(t.published.shares)
    assert got.rewards == t.published.rewards


@pytest.mark.parametrize("t", SAME_ANSWER, ids=lambda t: t.name)
def test_same_answer_and_rewards_other_share(t):
    got, _ = _ours(t.a, t.b, t.options, t.overrides)
    assert got.rewards == t.published.rewards == t.ours.rewards
    assert got.labels == t.ours.labels and got.shares == pytest.approx(t.ours.shares)
    grader = get_grader(_recipe().reward.grader)
    for mine, theirs in zip(got.labels, t.published.labels):  # the same answer, other keys
        assert grader.is_equivalent(mine, theirs, t.options)


@pytest.mark.parametrize("t", DIFFERENT, ids=lambda t: t.name)
def test_intended_differences(t):
    got, _ = _ours(t.a, t.b, t.options, t.overrides)
    assert got == t.ours
    assert (got.labels, got.rewards) != (t.published.labels, t.published.rewards) or \
        got.shares != pytest.approx(t.published.shares)


def test_agreement_count():
    """The numbers the module docstring reports."""
    assert len(TABLES) == 26
    identical = same_rewards = 0
    for t in TABLES:
        got, _ = _ours(t.a, t.b, t.options, t.overrides)
        same_rewards += got.rewards == t.published.rewards
        identical += (got.labels == t.published.labels and got.rewards == t.published.rewards
                      and got.shares == pytest.approx(t.published.shares))
    assert identical == 10
    assert same_rewards == 14  # the 10 and the 4 same-answer tables


def test_reward_is_the_grade_against_the_label_on_every_table():
    """The published reward rule is ``grade(answer, peer_label)``; ours is membership of the
    teacher's winning class (``in_winning_class``). On all 26 tables they coincide under our
    grader, so every difference above is the grader's, not the rule's."""
    grader = get_grader(_recipe().reward.grader)
    for t in TABLES:
        got, _ = _ours(t.a, t.b, t.options, t.overrides)
        for row, label, rewards in ((t.a, got.labels[1], got.rewards[0]), (t.b, got.labels[0], got.rewards[1])):
            graded = tuple(float(a is not None and label is not None and grader.is_equivalent(a, label, t.options))
                           for a in row)
            assert graded == rewards, t.name


def test_a_non_transitive_tie_follows_the_vote():
    """Intended (``voting.in_winning_class``: the vote and the reward are one decision).
    B's vote: "1.4142" 2 ties "1.414" 2, taken first: "1.4142". Our grader calls A's
    "\\sqrt{2}" equal to both decimals (each rounds it); the vote's classes are seeded
    "1.414" first, so "\\sqrt{2}" belongs to the losing class and is not rewarded, though
    grading it against the label would reward it. Published (hand-derived): keys
    1.4142 2, 1.414 2 -> "1.4142"; grade_answer("\\sqrt{2}", "1.4142"): sympy's exact
    difference is not 0 -> 0, so here the published reward is ours: [0, 1, 0, 0]."""
    a, b = [r"\sqrt{2}", "1.4142", "1.414", "3"], ["1.4142", "1.4142", "1.414", "1.414"]
    got, _ = _ours(a, b)
    assert got.labels[1] == "1.4142"
    assert got.rewards[0] == (0.0, 1.0, 0.0, 0.0)  # = published
    assert get_grader(_recipe().reward.grader).is_equivalent(r"\sqrt{2}", "1.4142")  # the rule, not the grader


def test_the_recipe_sets_the_published_vote_rules():
    """tie first (Counter.most_common), share over the parsed answers (top_count /
    len(valid)), no gate (--self_consistency_threshold 0.0), two agents teaching each other,
    the <answer> tag, no format term. The grader is ours (corrected), on purpose."""
    cfg = _recipe()
    r = cfg.reward
    assert (r.tie, r.min_share, r.min_share_of) == ("first", 0.0, "parsed")
    assert (agent_reward_source(cfg, 0), agent_reward_source(cfg, 1)) == ("peer_vote", "peer_vote")
    assert (r.topology, len(cfg.agents), r.answer_style, r.format_weight) == ("ring", 2, "answer_tag", 0.0)
    assert r.grader == "corrected"


def test_vlcohort_defaults_differ_and_the_recipe_restores_the_published_rules():
    """Intended: vlcohort's defaults abstain on a tie and divide min_share by all G samples
    (an unanswered sample is not agreement); the published code takes the first tied key
    and divides by the parsed answers, which the recipe sets."""
    assert majority_vote(["C", "A", "A", "C"]).reason == "tie"
    assert majority_vote(["C", "A", "A", "C"], tie="first").label == "C"
    answers = ["A", "A", "B", "C", None, None]  # published, threshold 0.5: 2/4 -> "A"
    assert majority_vote(answers, min_share=0.5).reason == "min_share"  # 2/6 over all
    assert majority_vote(answers, min_share=0.5, share_of="parsed").label == "A"


def test_an_unlabelled_prompt_gives_no_signal_either_way():
    """Published: the sentinel matches nothing, so the group's rewards are all 0 and its
    group-normalised advantages 0. Ours: reward 0 and valid=False, advantages exactly 0."""
    got, rewards = _ours([None, None, None, None], ["1", "1", None, "2"])
    b = rewards[1].scored  # agent B is taught by A, which parsed nothing
    assert got.labels[0] is None and rewards[1].labels == [None]
    assert b.rewards.tolist() == [[0.0] * 4] and b.valid.tolist() == [False]
    assert group_advantages(b.rewards, scale=_recipe().grpo.adv_scale, valid=b.valid).abs().sum() == 0
    a = rewards[0].scored  # agent A is taught ("1") but answered nothing: all 0, no preference
    assert a.valid.tolist() == [True] and a.rewards.tolist() == [[0.0] * 4]
    assert group_advantages(a.rewards, scale="group", valid=a.valid).abs().sum() == 0


# ------------------------------------------------------------------------------ extraction
# Published: verifiers/math_verify_wrapper.extract_answer_tag (last <answer>...</answer>,
# case-insensitive, stripped, empty -> None). Ours: extract_answer(style="answer_tag"),
# the recipe's reward.answer_style.

EXTRACT_SAME = [
    ("<think>x</think><answer> B </answer>", "B"),
    ("<answer></answer>", None),
    ("<answer>   </answer>", None),
    ("no tag, the answer is 42", None),
    ("<answer>1</answer> then <answer>2</answer>", "2"),
    ("<ANSWER>3</ANSWER>", "3"),
    ("<answer>5", None),
]


@pytest.mark.parametrize("text, published", EXTRACT_SAME)
def test_extraction_matches_the_published_answer_tag(text, published):
    assert extract_answer(text, style=_recipe().reward.answer_style) == published


def test_extraction_intended_differences():
    """A box inside the tag wins (published keeps "\\boxed{3}", whose vote key then splits
    from "3" though its grade_answer calls them equal); a tag listing two options is a
    hedge, no answer (published: mcq_letter reads its first letter, "A")."""
    style = _recipe().reward.answer_style
    assert extract_answer(r"<answer>\boxed{3}</answer>", style=style) == "3"  # published: "\boxed{3}"
    assert extract_answer("<answer>A. 3 or B. 4</answer>", style=style) is None  # published: "A. 3 or B. 4"
