"""The vote over equivalence classes, its tie and abstain rules, and teacher topologies."""

from __future__ import annotations

import pytest

from vlcohort.answers.grading import LegacyGrader
from vlcohort.answers.voting import TIE_RULES, TOPOLOGIES, Vote, majority_vote, teacher_indices, teacher_labels

OPTIONS = ["30°", "40°", "45°", "50°"]


def test_one_option_named_four_ways_is_one_vote():
    vote = majority_vote(["C", "(C)", "C. 45°", "45°", "B", "B", "B", None], OPTIONS)
    assert vote.label == "C"
    assert vote.counts == {"C": 4, "B": 3}
    assert vote.share == 4 / 8
    assert vote.assignments == ("C", "C", "C", "C", "B", "B", "B", None)
    assert vote.reason is None and not vote.abstained and vote.n_samples == 8


def test_string_hashing_would_have_lost_this_vote():
    """The published failure: 'C' and 'C. text' split, so a wrong plurality won."""
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
