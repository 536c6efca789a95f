"""The vote: plurality over equivalence classes, with tie and abstain rules, and who teaches whom.

A pseudo-label is the answer most samples agree on. "Agree" must mean what the grader
means, or the vote and the reward disagree: with string hashing, "C" and "C. 45°" (or
"0.5" and "\\frac{1}{2}") split one opinion into two votes, so a right majority can lose
to a wrong plurality. Here answers are first turned into grader keys (option letters, or
normalised math forms), and distinct keys the grader calls equivalent (``2\\sqrt{3}`` and
``\\sqrt{12}``) are merged into one class.

**The vote and the reward are one decision.** The grader's equivalence is not transitive
(``\\sqrt2`` equal to both ``1.414`` and ``1.4142``, two rounded values of it that differ;
``50%`` equal to both ``50`` and ``0.5``), so
"the class of an answer" needs a rule, and the reward must use the same one. Rule: the
distinct keys are *seeded* in a canonical order, most frequent first, then by key; each
key joins the first class (in seeding order) whose seed the grader calls it equivalent to,
else it seeds a new class. A class is labelled by its seed (its most common form), so every
member is equivalent to the label. A rollout is rewarded iff its answer is in the teacher's
*winning class* (:func:`in_winning_class`): for the self vote, iff the vote assigned it
there; for a peer vote, the student's answer is put into the teacher's classes by the same
rule (a key the teacher also wrote goes where the teacher's went; another key goes to the
first class whose label it is equivalent to), so a student's answer counts for the class
the teacher's own identical answer would have counted for.

Why seeding and not connected components of the equivalence graph: components chain
(``1.414 ~ \\sqrt2 ~ 1.4142`` though the ends differ) and bridge distinct
answers (one ``50%`` would merge ``50`` and ``0.5`` into one "majority"); seeding keeps
each class a ball around its label, centred on the most common form, so a lone bridging
answer cannot move it. Both are independent of sample order; seeding also costs at most
the K(K-1)/2 comparisons of K distinct keys that first-seen clustering cost (K <= G),
and rewarding a student's answer usually one comparison (the winner is normally the first
seed), as ``is_equivalent(answer, label)`` did.

>>> v = majority_vote(["C", "(C)", "C. 45°", "B", None], options=["30°", "40°", "45°"])
>>> v.label, v.share, v.counts
('C', 0.6, {'C': 3, 'B': 1})
>>> majority_vote(["1/2", "0.5", "2"]).label
'0.5'
>>> majority_vote(["A", "B"]).label is None      # a tie abstains by default
True
>>> v = majority_vote(["1.414", "\\sqrt{2}", "1.4142", "1.4142", "1.4142"])
>>> v.label, v.counts, [in_winning_class(x, v) for x in ["\\sqrt{2}", "1.414"]]
('1.4142', {'1.414': 1, '1.4142': 4}, [True, False])
>>> teacher_indices("ring", 3), teacher_indices("ring", 3, ring="next")
(((2,), (0,), (1,)), ((1,), (2,), (0,)))
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from vlcohort.answers.grading import CorrectedGrader, Grader

__all__ = [
    "RING_DIRECTIONS",
    "SHARE_BASES",
    "TIE_RULES",
    "TOPOLOGIES",
    "Vote",
    "in_winning_class",
    "majority_vote",
    "teacher_indices",
    "teacher_labels",
    "teacher_votes",
]

#: ``abstain``: no label on a tie (default). ``first``: the tied class seen first in
#: sample order, as the published Co-RL code's ``Counter.most_common`` does (DrStranded/Co-RL,
#: ``co_label_utils._majority_vote``). ``canonical``: the smallest label, the same on
#: every rank whatever the order in which samples were gathered.
TIE_RULES = ("abstain", "first", "canonical")

#: ``ring``: agent a is taught by agent a-1 (``previous``) or a+1 (``next``); two agents
#: teach each other either way. ``self``: each agent by its own vote (TTRL).
#: ``all_peers``: by the majority of the other agents' labels.
TOPOLOGIES = ("ring", "self", "all_peers")

#: Ring direction (``reward.ring``). ``previous``: agent n is taught by agent n-1, as the
#: Co-RL paper's text has it (default). ``next``: by agent n+1, as the published Co-RL code does
#: (DrStranded/Co-RL ``co_rl_trainer.py``: ``teacher = self.peers[0]``, peers listed
#: teacher-first, so A <- B, B <- C, C <- A).
RING_DIRECTIONS = ("previous", "next")

#: What ``min_share`` (and ``Vote.share``) divides the winner's count by
#: (``reward.min_share_of``). ``all``: every sample, unparsed ones included (default), so a
#: vote most samples could not even answer does not teach. ``parsed``: the samples with an
#: answer key, as the published Co-RL code's ``top_count / len(valid)``.
SHARE_BASES = ("all", "parsed")

_CORRECTED = CorrectedGrader()


@dataclass(frozen=True)
class Vote:
    """The outcome of one vote over the G samples of one prompt.

    ``label`` is the winning class's label, its seed key (None when abstaining);
    ``share`` is the winner's count over *all* samples, unparsed ones included, so 3
    agreeing answers out of 8 samples is 0.375 however many of the other 5 parsed (over
    the parsed ones only with ``share_of="parsed"``). ``counts`` maps each class label to
    its count in first-seen order; ``assignments`` gives each sample's class label (None
    when it had no answer); ``reason`` says why there is no label: ``"no_answer"``,
    ``"tie"`` or ``"min_share"``. ``classes`` maps each class label to its member keys, in
    seeding order (the order :func:`in_winning_class` places a new answer by).
    """

    label: str | None
    share: float
    counts: dict[str, int] = field(default_factory=dict)
    assignments: tuple[str | None, ...] = ()
    reason: str | None = None
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def abstained(self) -> bool:
        return self.label is None

    @property
    def n_samples(self) -> int:
        return len(self.assignments)


def majority_vote(
    answers: Sequence[str | None],
    options: Sequence[str] | None = None,
    tie: str = "abstain",
    min_share: float = 0.0,
    grader: Grader | None = None,
    share_of: str = "all",
) -> Vote:
    """Plurality vote over equivalence classes of the non-None ``answers``.

    ``answers`` are extracted answer spans (None where extraction found nothing).
    ``options`` are the question's option texts, so letters and option texts vote
    together. ``tie`` is one of :data:`TIE_RULES`. With ``min_share`` > 0 the vote
    abstains unless the winner holds at least that share of *all* samples
    (``share_of="all"``) or of the parsed ones (``"parsed"``, :data:`SHARE_BASES`): a gate
    that keeps weak majorities from teaching. ``grader`` defaults to the corrected grader;
    the legacy grader hashes its keys without merging, as the published Co-RL code did. Classes
    are seeded as the module docstring says, so they do not depend on sample order.

    >>> majority_vote(["4", "4.0", "x = 4", "5", None, None, None, None], min_share=0.5).reason
    'min_share'
    >>> majority_vote(["4", "4.0", "x = 4", "5", None, None, None, None], min_share=0.5,
    ...               share_of="parsed").label
    '4'
    >>> majority_vote(["B", "A", "A", "B"], tie="first").label
    'B'
    >>> majority_vote(["B", "A", "A", "B"], tie="canonical").label
    'A'
    """
    if tie not in TIE_RULES:
        raise ValueError(f"unknown tie rule {tie!r}; choose one of: {', '.join(TIE_RULES)}")
    if share_of not in SHARE_BASES:
        raise ValueError(f"unknown share base {share_of!r}; choose one of: {', '.join(SHARE_BASES)}")
    if not 0.0 <= min_share <= 1.0:
        raise ValueError(f"min_share must be within [0, 1], got {min_share!r}")
    grader = grader or _CORRECTED
    options = _hashable(options)
    keys = [grader.canonical(answer, options) for answer in answers]
    classes = _cluster(keys, grader, merge=_merges(grader, options))
    home = {key: label for label, members in classes.items() for key in members}
    assignments = tuple(None if key is None else home[key] for key in keys)
    counts: dict[str, int] = {}
    for label in assignments:  # first-seen order: the ``first`` tie rule reads it
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        return Vote(None, 0.0, counts, assignments, "no_answer", classes)
    n = len(answers) if share_of == "all" else sum(counts.values())
    top = max(counts.values())
    share = top / n
    tied = [label for label, count in counts.items() if count == top]  # first-seen order
    if len(tied) > 1 and tie == "abstain":
        return Vote(None, share, counts, assignments, "tie", classes)
    winner = min(tied) if tie == "canonical" else tied[0]
    if share < min_share:
        return Vote(None, share, counts, assignments, "min_share", classes)
    return Vote(winner, share, counts, assignments, None, classes)


def in_winning_class(answer: str | None, vote: Vote | None, options: Sequence[str] | None = None,
                     grader: Grader | None = None) -> bool:
    """Whether ``answer`` belongs to ``vote``'s winning class: the reward of a rollout
    taught by that vote (its own, or a peer's over the peer's samples of the same prompt).

    The answer's key is placed among the vote's classes by the rule the vote used (module
    docstring): the class holding that very key, else the first class in seeding order
    whose label the grader calls it equivalent to (only where the vote merges: free-form
    answers under a merging grader). For the vote's own samples this is exactly their
    assignment, so a sample is rewarded iff it was counted for the winner.

    The legacy grader (which never merges) keeps the published Co-RL code's rule, its own
    ``is_equivalent(answer, label)`` (math-verify), since reproducing results published
    with it is its purpose: there, as in the published Co-RL code, a vote and a reward may
    disagree.

    >>> v = majority_vote(["0.5", "1/2", "0.5", "3"])
    >>> [in_winning_class(x, v) for x in ["\\\\frac{1}{2}", "3", None]]
    [True, False, False]
    """
    if vote is None or vote.label is None:
        return False
    grader = grader or _CORRECTED
    options = _hashable(options)
    if not grader.merges_classes:
        return bool(grader.is_equivalent(answer, vote.label, options))
    key = grader.canonical(answer, options)
    if key is None:
        return False
    for label, members in vote.classes.items():
        if key in members:
            return label == vote.label
    if not _merges(grader, options):
        return False
    for label in vote.classes:  # seeding order; classes after the winner cannot matter
        if grader.is_equivalent(key, label):
            return label == vote.label
        if label == vote.label:
            return False
    return False


def _hashable(options: Sequence[str] | None) -> Sequence[str] | None:
    """Option texts as a tuple of strings (hashable, converted once per vote)."""
    return tuple("" if o is None else str(o) for o in options) if options else options


def _merges(grader: Grader, options: Sequence[str] | None) -> bool:
    """Whether distinct keys may share a class: free-form answers under a merging grader
    (option letters never need merging)."""
    return bool(grader.merges_classes and not options)


def _cluster(keys: Sequence[str | None], grader: Grader, merge: bool) -> dict[str, tuple[str, ...]]:
    """Distinct keys into classes: label (seed) -> member keys, in seeding order.

    Keys are seeded most frequent first, then by key, so the classes depend on the
    multiset of keys only, never on sample order. Equal keys always share a class; with
    ``merge`` a key joins the first class whose seed the grader calls it equivalent to.
    """
    freq = Counter(key for key in keys if key is not None)
    classes: dict[str, list[str]] = {}
    for key in sorted(freq, key=lambda k: (-freq[k], k)):
        home = None
        if merge:
            home = next((seed for seed in classes if grader.is_equivalent(key, seed)), None)
        if home is None:
            classes[key] = [key]
        else:
            classes[home].append(key)
    return {seed: tuple(members) for seed, members in classes.items()}


def teacher_indices(topology: str, n_agents: int, ring: str = "previous") -> tuple[tuple[int, ...], ...]:
    """For each agent, the agents whose votes teach it (``ring``: :data:`RING_DIRECTIONS`).

    A one-agent ring (or all-peers) has no peer; rather than silently becoming self-vote,
    which is a different method (TTRL), it is an error.

    >>> teacher_indices("ring", 2), teacher_indices("self", 2), teacher_indices("all_peers", 3)
    (((1,), (0,)), ((0,), (1,)), ((1, 2), (0, 2), (0, 1)))
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown teacher topology {topology!r}; choose one of: {', '.join(TOPOLOGIES)}")
    if ring not in RING_DIRECTIONS:
        raise ValueError(f"unknown ring direction {ring!r}; choose one of: {', '.join(RING_DIRECTIONS)}")
    if not isinstance(n_agents, int) or n_agents < 1:
        raise ValueError(f"n_agents must be a positive integer, got {n_agents!r}")
    if topology == "self":
        return tuple((a,) for a in range(n_agents))
    if n_agents == 1:
        raise ValueError(
            f"topology {topology!r} needs at least 2 agents, got 1: a lone agent has no peer "
            "to learn from; use topology 'self' for self-vote (TTRL) or add an agent"
        )
    if topology == "ring":
        step = -1 if ring == "previous" else 1
        return tuple(((a + step) % n_agents,) for a in range(n_agents))
    return tuple(tuple(b for b in range(n_agents) if b != a) for a in range(n_agents))


def _peers_vote(labels: Sequence[str | None], options: Sequence[str] | None, tie: str,
                grader: Grader | None) -> Vote | None:
    """``all_peers``: the peers' labels put to a vote (abstaining peers do not vote; None
    when all abstain)."""
    known = [label for label in labels if label is not None]
    return majority_vote(known, options, tie=tie, grader=grader) if known else None


def teacher_labels(
    labels: Sequence[str | None],
    topology: str,
    options: Sequence[str] | None = None,
    tie: str = "abstain",
    grader: Grader | None = None,
    ring: str = "previous",
) -> tuple[str | None, ...]:
    """Each agent's teaching label for one prompt, from every agent's own vote label.

    ``labels[a]`` is agent a's vote label (None when it abstained). With ``all_peers`` the
    peers' labels are themselves put to a vote (same ``tie`` rule); abstaining peers do
    not vote.

    >>> teacher_labels(["A", "B"], "ring")
    ('B', 'A')
    >>> teacher_labels(["A", "B", "B"], "all_peers")
    ('B', None, None)
    """
    sources = teacher_indices(topology, len(labels), ring)
    if topology != "all_peers":
        return tuple(labels[s[0]] for s in sources)
    votes = [_peers_vote([labels[p] for p in peers], options, tie, grader) for peers in sources]
    return tuple(None if v is None else v.label for v in votes)


def teacher_votes(
    votes: Sequence[Vote],
    topology: str,
    options: Sequence[str] | None = None,
    tie: str = "abstain",
    grader: Grader | None = None,
    ring: str = "previous",
) -> tuple[Vote | None, ...]:
    """Each agent's teaching *vote* for one prompt, from every agent's own vote: the
    teacher's own vote (``ring``, ``self``), or with ``all_peers`` the vote over the peers'
    labels (None when every peer abstained). Agent a's rollout is rewarded iff
    ``in_winning_class(answer, teacher_votes(...)[a])``; the labels are those of
    :func:`teacher_labels`.

    >>> mine, theirs = majority_vote(["3", "3", "4"]), majority_vote(["4", "4", "3"])
    >>> [v.label for v in teacher_votes([mine, theirs], "ring")]
    ['4', '3']
    """
    sources = teacher_indices(topology, len(votes), ring)
    if topology != "all_peers":
        return tuple(votes[s[0]] for s in sources)
    return tuple(_peers_vote([votes[p].label for p in peers], options, tie, grader)
                 for peers in sources)
