"""The vote over equivalence classes, its tie and abstain rules, and teacher topologies."""

from __future__ import annotations

from itertools import permutations

import pytest

from vlcohort.answers.grading import CorrectedGrader, LegacyGrader
from vlcohort.answers.voting import (
    RING_DIRECTIONS,
    SHARE_BASES,
    TIE_RULES,
    TOPOLOGIES,
    Vote,
    in_winning_class,
    majority_vote,
    teacher_indices,
    teacher_labels,
    teacher_votes,
)
from vlcohort.data.problems import Problem
from vlcohort.training.rewards import RewardInputs, reward_of, score, vote_all

OPTIONS = ["30°", "40°", "45°", "50°"]


def test_one_option_named_four_ways_is_one_vote():
    vote = majority_vote(["C", "(C)", "C. 45°", "45°", "B", "B", "B", None], OPTIONS)
    assert vote.label == "C"
    assert vote.counts == {"C": 4, "B": 3}
    assert vote.share == 4 / 8
    assert vote.assignments == ("C", "C", "C", "C", "B", "B", "B", None)
    assert vote.reason is None and not vote.abstained and vote.n_samples == 8


def test_string_hashing_would_have_lost_this_vote():
    """Plain string hashing (``reward.grader=legacy``) splits 'C' and 'C. text', so a wrong
    plurality wins. The published Co-RL vision-language code keys letters A-E together,
    but splits an option's text from its letter the same way
    (tests/test_peer_vote_parity.py)."""
    answers = ["C", "C. Pythagorean theorem", "C: Pythagorean theorem", "B", "B"]
    assert majority_vote(answers).label == "C"
    legacy = majority_vote(answers, grader=LegacyGrader())
    assert legacy.label == "B" and legacy.counts["B"] == 2


def test_free_form_classes_merge_equivalent_forms():
    vote = majority_vote(["1/2", "0.5", "\\frac{1}{2}", "$0.50$", "2\\sqrt{3}", "\\sqrt{12}", "3.4641", None])
    assert vote.counts == {"0.5": 4, "2\\sqrt{3}": 3}
    assert vote.label == "0.5" and vote.share == 0.5


def test_units_degrees_and_spacing_vote_together():
    vote = majority_vote(["12 cm", "12", "x = 12", "12.0", "13"])
    assert vote.label == "12" and vote.counts == {"12": 4, "13": 1}


@pytest.mark.parametrize(
    "tie, expected",
    [("abstain", None), ("first", "B"), ("canonical", "A")],
)
def test_ties_under_each_rule(tie, expected):
    vote = majority_vote(["B", "A", "A", "B", None], tie=tie)
    assert vote.label == expected
    assert vote.share == 2 / 5
    assert vote.reason == ("tie" if tie == "abstain" else None)


def test_canonical_tie_break_does_not_depend_on_sample_order():
    a = majority_vote(["7", "3", "3", "7"], tie="canonical")
    b = majority_vote(["3", "7", "7", "3"], tie="canonical")
    assert a.label == b.label == "3"


def test_all_none_abstains():
    vote = majority_vote([None] * 8)
    assert vote == Vote(None, 0.0, {}, (None,) * 8, "no_answer")
    assert majority_vote(["", "   ", None]).reason == "no_answer"


def test_empty_list_abstains():
    vote = majority_vote([])
    assert vote.label is None and vote.share == 0.0 and vote.reason == "no_answer"


def test_one_answer():
    vote = majority_vote(["42"])
    assert vote.label == "42" and vote.share == 1.0 and vote.counts == {"42": 1}


def test_sixty_four_identical():
    vote = majority_vote(["\\boxed{7}"] * 64)
    assert vote.label == "7" and vote.share == 1.0 and vote.counts == {"7": 64}


def test_min_share_gate_counts_unparsed_samples():
    answers = ["A", "A", "A", "A", "A", None, None, "B"]  # 5 of 8 = 0.625
    assert majority_vote(answers, min_share=0.6).label == "A"
    gated = majority_vote(answers, min_share=0.75)
    assert gated.label is None and gated.reason == "min_share" and gated.share == 5 / 8
    assert majority_vote(["A"] * 6 + ["B"] * 2, min_share=0.75).label == "A"


def test_answers_naming_no_option_do_not_vote():
    vote = majority_vote(["E", "D is the midpoint", "45°", "N 23.5° E"], OPTIONS)
    assert vote.counts == {"C": 1} and vote.label == "C" and vote.share == 0.25


def test_duplicate_option_texts_only_letters_vote():
    vote = majority_vote(["50", "50", "C", "A"], ["15", "100", "50", "50"], tie="first")
    assert vote.counts == {"C": 1, "A": 1} and vote.label == "C"


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="abstain"):
        majority_vote(["A"], tie="random")
    with pytest.raises(ValueError, match="min_share"):
        majority_vote(["A"], min_share=1.5)
    assert TIE_RULES == ("abstain", "first", "canonical")


def test_vote_time_on_bad_input_is_bounded():
    answers = ["x" * 1_000_000, "{" * 10_000, "\\boxed{", "\\frac{1}{x}^{10^{10}}", "３", "3", None, ""]
    vote = majority_vote(answers)
    assert vote.label is None or vote.label == "3"


# ----------------------------------------------------------------------------- topologies


def test_ring_topology():
    assert teacher_indices("ring", 2) == ((1,), (0,))  # two agents teach each other
    assert teacher_indices("ring", 3) == ((2,), (0,), (1,))


def test_self_and_all_peers_topologies():
    assert teacher_indices("self", 1) == ((0,),)
    assert teacher_indices("self", 3) == ((0,), (1,), (2,))
    assert teacher_indices("all_peers", 3) == ((1, 2), (0, 2), (0, 1))
    assert teacher_indices("all_peers", 2) == teacher_indices("ring", 2)


@pytest.mark.parametrize("topology", ["ring", "all_peers"])
def test_one_agent_peer_topology_is_an_error_not_self_vote(topology):
    with pytest.raises(ValueError, match="self"):
        teacher_indices(topology, 1)


def test_topology_errors_name_the_choices():
    with pytest.raises(ValueError, match="ring"):
        teacher_indices("star", 2)
    with pytest.raises(ValueError, match="positive"):
        teacher_indices("ring", 0)
    assert TOPOLOGIES == ("ring", "self", "all_peers")


def test_teacher_labels():
    assert teacher_labels(["A", "B"], "ring") == ("B", "A")
    assert teacher_labels(["A", "B"], "self") == ("A", "B")
    assert teacher_labels(["A", None, "C"], "ring") == ("C", "A", None)
    assert teacher_labels(["A", "B", "B"], "all_peers") == ("B", None, None)
    assert teacher_labels(["A", "B", "B"], "all_peers", tie="canonical") == ("B", "A", "A")
    assert teacher_labels(["0.5", "1/2", None], "all_peers") == ("0.5", "0.5", "0.5")
    with pytest.raises(ValueError):
        teacher_labels(["A"], "ring")


# ----------------------------------------------------------- the vote and the reward are one decision

# The grader's equivalence is not transitive: a decimal written to 4 places stands for
# the reals that round to it, so 1.414 ~ sqrt(2) ~ 1.4142, but the two decimals are two
# exact values, 1.414 !~ 1.4142 (checked below).
CHAIN = ["1.414", "\\sqrt{2}", "1.4142", "1.4142", "1.4142"]
# Two classes of 3 with one bridge: 50% reads as 50 or 0.5.
TIED = ["50", "5 \\cdot 10", "50", "0.5", "50%", "0.5"]
_CORRECTED = CorrectedGrader()


def _rewards(source, answers_by_agent, agent=0, problem=None, **kw):
    """Agent ``agent``'s 1 / 0 rewards [G] on one prompt through the trainer's reward path
    (vote_all -> reward_of), every agent voting on its own answers."""
    problem = problem or Problem(id="p", text="q")
    kw.setdefault("grader", _CORRECTED)
    votes = [vote_all([row], [problem], tie=kw.get("tie", "abstain"), grader=kw["grader"])
             for row in answers_by_agent]
    x = RewardInputs(agent=agent, answers=[answers_by_agent[agent]], votes=votes, problems=[problem],
                     trained=[0], token_stats=lambda: None, group_size=len(answers_by_agent[agent]),
                     **kw)
    return reward_of(source, x).scored.rewards[0].tolist()


def test_the_grader_is_not_transitive_on_the_chain():
    from vlcohort.answers.grading import is_equivalent

    assert is_equivalent("1.414", "\\sqrt{2}") and is_equivalent("\\sqrt{2}", "1.4142")
    assert not is_equivalent("1.414", "1.4142")


def test_self_vote_rewards_exactly_the_rollouts_counted_for_the_winner():
    """On the non-transitive chain, sqrt(2) is counted for the winner (not for the losing
    class, which would give the label 1.4142 with counts {1.414: 2, 1.4142: 3} and
    reward 4 rollouts), and the reward is the count."""
    vote = majority_vote(CHAIN)
    # seeding by hand: keys by (count desc, key): 1.4142 (3), 1.414 (1), \sqrt{2} (1);
    # 1.4142 seeds; 1.414 !~ 1.4142 seeds; \sqrt{2} ~ 1.4142, the first seed: joins it
    assert vote.classes == {"1.4142": ("1.4142", "\\sqrt{2}"), "1.414": ("1.414",)}
    assert vote.label == "1.4142" and vote.counts == {"1.414": 1, "1.4142": 4}
    assert vote.assignments == ("1.414", "1.4142", "1.4142", "1.4142", "1.4142")
    rewards = _rewards("self_vote", [CHAIN])
    assert rewards == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert sum(rewards) == vote.counts[vote.label]


def test_a_tie_broken_first_rewards_the_winning_class_only():
    """Two classes of 3: {0.5 x2, 50%} (seeded first: the smaller key among the count-2
    keys) and {50 x2, 5 \\cdot 10}; ``first`` picks the class of sample 0. 50% is
    equivalent to the label 50 but was counted for the other class: no reward
    (``is_equivalent(answer, label)`` gave it one)."""
    vote = majority_vote(TIED, tie="first")
    assert vote.classes == {"0.5": ("0.5", "50%"), "50": ("50", "5\\cdot10")}
    assert vote.counts == {"50": 3, "0.5": 3} and vote.label == "50"
    assert _rewards("self_vote", [TIED], tie="first") == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_peer_vote_places_the_students_answers_in_the_teachers_classes():
    """Agent 0 is taught by agent 1 (ring of two). The teacher's classes, by hand:
    {0.5: (0.5, 50%), 50: (50, 5 \\cdot 10)}, tie broken first: winner 50. Student
    answers: 50% is a key of the teacher's losing class -> 0 (the teacher's own 50%
    counted there); 5 \\cdot 10 a key of the winner -> 1; 2 \\cdot 25 is no teacher key:
    the first seed it equals is 50 (it is not 0.5) -> 1; 1 - 0.5 equals 0.5 -> 0;
    None -> 0."""
    student = ["50%", "5 \\cdot 10", "2 \\cdot 25", "1 - 0.5", None, "7"]
    rewards = _rewards("peer_vote", [student, TIED], agent=0, tie="first")
    assert rewards == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # the same decision as the teacher's own: each teacher sample against its own vote
    vote = majority_vote(TIED, tie="first")
    assert [in_winning_class(x, vote) for x in TIED] == [a == vote.label for a in vote.assignments]


@pytest.mark.parametrize("answers", [CHAIN, ["50%", "50", "50", "0.5", "0.5", "0.5"], TIED])
@pytest.mark.parametrize("tie", ["abstain", "canonical"])
def test_classes_and_labels_do_not_depend_on_sample_order(answers, tie):
    """Every distinct order gives the same classes, label and counts (as a multiset), and
    rewards the same answers: seeding, not first-seen clustering, where CHAIN's order
    would decide whether sqrt(2) joins 1.414 or 1.4142."""
    reference = majority_vote(answers, tie=tie)
    for order in set(permutations(answers)):
        vote = majority_vote(list(order), tie=tie)
        assert vote.classes == reference.classes and vote.label == reference.label
        assert vote.counts == reference.counts  # dict equality ignores the order of keys
        assert sorted(a for a, r in zip(order, _rewards("self_vote", [list(order)], tie=tie)) if r) \
            == sorted(a for a, r in zip(answers, _rewards("self_vote", [answers], tie=tie)) if r)


def test_a_bridging_answer_does_not_merge_two_answers():
    """50% equals both 50 and 0.5 (two readings), 50 and 0.5 differ: connected components
    would make one class of 6. Seeded: 0.5 (3) seeds, 50 (2) seeds, 50% joins 0.5."""
    vote = majority_vote(["50%", "50", "50", "0.5", "0.5", "0.5"])
    assert vote.classes == {"0.5": ("0.5", "50%"), "50": ("50",)}
    assert vote.counts == {"0.5": 4, "50": 2} and vote.label == "0.5"


def test_multiple_choice_rewards_unchanged_by_membership():
    opts = ["30°", "40°", "45°", "50°"]
    problem = Problem(id="p", text="q", options=opts)
    answers = ["C", "(C)", "45°", "B", "E", None]
    assert _rewards("self_vote", [answers], problem=problem) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    vote = majority_vote(answers, opts)
    old_rule = [bool(a is not None and vote.label is not None
                     and __import__("vlcohort").is_equivalent(a, vote.label, opts)) for a in answers]
    assert [in_winning_class(a, vote, opts) for a in answers] == old_rule


def test_legacy_grader_keeps_the_published_reward_rule():
    grader = LegacyGrader()
    vote = majority_vote(["1/2", "1/2", "0.5"], grader=grader)
    assert vote.counts == {"1/2": 2, "0.5": 1}  # hashed, not merged
    assert in_winning_class("0.5", vote, grader=grader)  # math-verify: 0.5 == 1/2


def test_gold_is_graded_by_the_grader():
    problem = Problem(id="p", text="q", gold="\\frac{1}{2}")
    assert _rewards("ground_truth", [["0.5", "1/2", "2", None]], problem=problem) == [1.0, 1.0, 0.0, 0.0]


def test_score_takes_votes_golds_and_no_label():
    problems = [Problem(id=str(i), text="q") for i in range(3)]
    answers = [CHAIN, ["4", "4.0", "5", "x", None], ["1", "2", "3", "4", "5"]]
    sc = score(answers, [majority_vote(CHAIN), "4", None], problems, CorrectedGrader(), 0.5)
    assert sc.rewards.tolist() == [[0.5, 1.5, 1.5, 1.5, 1.5], [1.5, 1.5, 0.5, 0.5, 0.0], [0.0] * 5]
    assert sc.valid.tolist() == [True, True, False]


# ----------------------------------------------------------------------- shares and ring directions


def test_ring_direction_with_three_agents():
    """previous (the paper's text): A <- C, B <- A, C <- B. next (the published Co-RL code,
    ``teacher = self.peers[0]`` with peers teacher-first): A <- B, B <- C, C <- A."""
    assert RING_DIRECTIONS == ("previous", "next")
    assert teacher_indices("ring", 3) == teacher_indices("ring", 3, "previous") == ((2,), (0,), (1,))
    assert teacher_indices("ring", 3, ring="next") == ((1,), (2,), (0,))
    assert teacher_labels(["A", "B", "C"], "ring", ring="next") == ("B", "C", "A")
    assert teacher_labels(["A", "B", "C"], "ring") == ("C", "A", "B")
    assert teacher_indices("ring", 2, ring="next") == teacher_indices("ring", 2) == ((1,), (0,))
    votes = [majority_vote(x) for x in (["1", "1"], ["2", "2"], ["3", "3"])]
    assert [v.label for v in teacher_votes(votes, "ring", ring="next")] == ["2", "3", "1"]
    with pytest.raises(ValueError, match="previous, next"):
        teacher_indices("ring", 3, ring="clockwise")


def test_ring_direction_reaches_the_reward():
    """Three agents answering 1, 2, 3: agent A's rollouts answering 3 are rewarded under
    previous (taught by C), those answering 2 under next (taught by B)."""
    a = ["1", "2", "3", "3"]
    cohort = [a, ["2", "2", "2", "2"], ["3", "3", "3", "3"]]
    assert _rewards("peer_vote", cohort, ring="previous") == [0.0, 0.0, 1.0, 1.0]
    assert _rewards("peer_vote", cohort, ring="next") == [0.0, 1.0, 0.0, 0.0]


def test_min_share_of_all_or_parsed():
    """3 of 8 samples agree and 4 parsed: share 3/8 = 0.375 over all, 3/4 = 0.75 over parsed."""
    answers = ["A", "A", "A", "B", None, None, None, None]
    assert SHARE_BASES == ("all", "parsed")
    v_all = majority_vote(answers, min_share=0.5)
    v_parsed = majority_vote(answers, min_share=0.5, share_of="parsed")
    assert (v_all.label, v_all.share, v_all.reason) == (None, 0.375, "min_share")
    assert (v_parsed.label, v_parsed.share, v_parsed.reason) == ("A", 0.75, None)
    assert majority_vote(answers, min_share=0.8, share_of="parsed").reason == "min_share"
    assert majority_vote([None, None], share_of="parsed").reason == "no_answer"
    with pytest.raises(ValueError, match="all, parsed"):
        majority_vote(answers, share_of="valid")


def _seed_majority_vote(answers, threshold):
    """DrStranded/Co-RL ``co_label_utils._majority_vote``, verbatim in effect: a Counter over
    the parsed (hashed) answers, ``most_common`` (ties: first inserted), share over parsed."""
    from collections import Counter

    valid = [a for a in answers if a is not None]
    if not valid:
        return None, 0.0
    top_answer, top_count = Counter(valid).most_common(1)[0]
    top_freq = top_count / len(valid)
    return (None if top_freq < threshold else top_answer), top_freq


@pytest.mark.parametrize("answers", [["B", "A", "A", "B"], ["C", None, "A", "C", "A", None, "D", "D"],
                                     ["A", "B", "C", "D"], [None, "B", "B", "A"], ["D", "C", "B", "A", "A"]])
@pytest.mark.parametrize("threshold", [0.0, 0.4, 0.5, 0.6])
def test_first_and_parsed_are_the_seeds_vote(answers, threshold):
    """``tie=first, share_of=parsed`` equals the published Co-RL code's Counter-based vote, label and share,
    on plain letters (which the published Co-RL code's string hashing and our classes agree on)."""
    vote = majority_vote(answers, tie="first", min_share=threshold, share_of="parsed",
                         grader=LegacyGrader())
    assert (vote.label, vote.share) == _seed_majority_vote(answers, threshold)


def test_all_peers_rewards_the_winning_class_of_the_peers_labels():
    """Own votes: A '2', B '2' (from 2.0, 2, 7), C '9'. C's peers A and B both say 2: its
    rollout answering 2 is rewarded. A's peers say 2 (B) and 9 (C): a tie, which abstains
    (no signal) or, taken first, is B's 2."""
    cohort = [["2", "2", "5"], ["2.0", "2", "7"], ["9", "9", "2"]]
    assert _rewards("peer_vote", cohort, agent=2, topology="all_peers") == [0.0, 0.0, 1.0]
    assert _rewards("peer_vote", cohort, agent=0, topology="all_peers") == [0.0, 0.0, 0.0]
    assert _rewards("peer_vote", cohort, agent=0, topology="all_peers", tie="first") == [1.0, 1.0, 0.0]
