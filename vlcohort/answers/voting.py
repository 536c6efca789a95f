"""The vote: plurality over equivalence classes, with tie and abstain rules, and who teaches whom.

A pseudo-label is the answer most samples agree on. "Agree" must mean what the grader
means, or the vote and the reward disagree: with string hashing, "C" and "C. 45°" (or
"0.5" and "\\frac{1}{2}") split one opinion into two votes, so a right majority can lose
to a wrong plurality. Here answers are first turned into grader keys (option letters, or
normalised math forms), and distinct keys the grader calls equivalent (``2\\sqrt{3}`` and
``\\sqrt{12}``) are merged into one class.

>>> v = majority_vote(["C", "(C)", "C. 45°", "B", None], options=["30°", "40°", "45°"])
>>> v.label, v.share, v.counts
('C', 0.6, {'C': 3, 'B': 1})
>>> majority_vote(["1/2", "0.5", "2"]).label
'0.5'
>>> majority_vote(["A", "B"]).label is None      # a tie abstains by default
True
>>> teacher_indices("ring", 3)
((2,), (0,), (1,))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from vlcohort.answers.grading import CorrectedGrader, Grader

__all__ = [
    "TIE_RULES",
    "TOPOLOGIES",
    "Vote",
    "majority_vote",
    "teacher_indices",
    "teacher_labels",
]

#: ``abstain``: no label on a tie (default). ``first``: the tied class seen first, as the
#: published code does. ``canonical``: the smallest key, the same on every rank whatever
#: the order in which samples were gathered.
TIE_RULES = ("abstain", "first", "canonical")

#: ``ring``: agent a is taught by agent a-1 (two agents teach each other). ``self``: each
#: agent by its own vote (TTRL). ``all_peers``: by the majority of the other agents' labels.
TOPOLOGIES = ("ring", "self", "all_peers")

_CORRECTED = CorrectedGrader()


@dataclass(frozen=True)
class Vote:
    """The outcome of one vote over the G samples of one prompt.

    ``label`` is the winning class's key (None when abstaining); ``share`` is the winner's
    count over *all* samples, unparsed ones included, so 3 agreeing answers out of 8
    samples is 0.375 however many of the other 5 parsed. ``counts`` maps each class key to
    its count in first-seen order; ``assignments`` gives each sample's class key (None when
    it had no answer); ``reason`` says why there is no label: ``"no_answer"``, ``"tie"``
    or ``"min_share"``.
    """

    label: str | None
    share: float
    counts: dict[str, int] = field(default_factory=dict)
    assignments: tuple[str | None, ...] = ()
    reason: str | None = None

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
) -> Vote:
    """Plurality vote over equivalence classes of the non-None ``answers``.

    ``answers`` are extracted answer spans (None where extraction found nothing).
    ``options`` are the question's option texts, so letters and option texts vote
    together. ``tie`` is one of :data:`TIE_RULES`. With ``min_share`` > 0 the vote
    abstains unless the winner holds at least that share of *all* samples (a gate that
    keeps weak majorities from teaching). ``grader`` defaults to the corrected grader;
    the legacy grader hashes its keys without merging, as the published code did.

    >>> majority_vote(["4", "4.0", "x = 4", "5", None, None, None, None], min_share=0.5).reason
    'min_share'
    >>> majority_vote(["B", "A", "A", "B"], tie="first").label
    'B'
    >>> majority_vote(["B", "A", "A", "B"], tie="canonical").label
    'A'
    """
    if tie not in TIE_RULES:
        raise ValueError(f"unknown tie rule {tie!r}; choose one of: {', '.join(TIE_RULES)}")
    if not 0.0 <= min_share <= 1.0:
        raise ValueError(f"min_share must be within [0, 1], got {min_share!r}")
    grader = grader or _CORRECTED
    if options:
        options = tuple("" if o is None else str(o) for o in options)  # hashable, once
    keys = [grader.canonical(answer, options) for answer in answers]
    classes = _cluster(keys, grader, merge=grader.merges_classes and not options)
    # Each class is labelled by its smallest key, so the label does not depend on order.
    labels = {rep: min(members) for rep, members in classes.items()}
    key_to_label = {key: labels[rep] for rep, members in classes.items() for key in members}
    assignments = tuple(None if key is None else key_to_label[key] for key in keys)
    counts: dict[str, int] = {}
    for label in assignments:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    n = len(answers)
    if not counts:
        return Vote(None, 0.0, counts, assignments, "no_answer")
    top = max(counts.values())
    share = top / n
    tied = [label for label, count in counts.items() if count == top]  # first-seen order
    if len(tied) > 1 and tie == "abstain":
        return Vote(None, share, counts, assignments, "tie")
    winner = min(tied) if tie == "canonical" else tied[0]
    if share < min_share:
        return Vote(None, share, counts, assignments, "min_share")
    return Vote(winner, share, counts, assignments, None)


def _cluster(keys: Sequence[str | None], grader: Grader, merge: bool) -> dict[str, list[str]]:
    """Group distinct keys into classes: representative (first seen) -> member keys.

    Equal keys always share a class; with ``merge`` a new key joins the first class whose
    representative the grader calls equivalent. Option letters never need merging.
    """
    classes: dict[str, list[str]] = {}
    seen: set[str] = set()
    for key in keys:
        if key is None or key in seen:
            continue
        seen.add(key)
        home = None
        if merge:
            home = next((rep for rep in classes if grader.is_equivalent(key, rep)), None)
        if home is None:
            classes[key] = [key]
        else:
            classes[home].append(key)
    return classes


def teacher_indices(topology: str, n_agents: int) -> tuple[tuple[int, ...], ...]:
    """For each agent, the agents whose votes teach it.

    A one-agent ring (or all-peers) has no peer; rather than silently becoming self-vote,
    which is a different method (TTRL), it is an error.

    >>> teacher_indices("ring", 2), teacher_indices("self", 2), teacher_indices("all_peers", 3)
    (((1,), (0,)), ((0,), (1,)), ((1, 2), (0, 2), (0, 1)))
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown teacher topology {topology!r}; choose one of: {', '.join(TOPOLOGIES)}")
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
        return tuple(((a - 1) % n_agents,) for a in range(n_agents))
    return tuple(tuple(b for b in range(n_agents) if b != a) for a in range(n_agents))


def teacher_labels(
    labels: Sequence[str | None],
    topology: str,
    options: Sequence[str] | None = None,
    tie: str = "abstain",
    grader: Grader | None = None,
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
    sources = teacher_indices(topology, len(labels))
    if topology != "all_peers":
        return tuple(labels[s[0]] for s in sources)
    out = []
    for peers in sources:
        peer_labels = [labels[p] for p in peers if labels[p] is not None]
        out.append(majority_vote(peer_labels, options, tie=tie, grader=grader).label if peer_labels else None)
    return tuple(out)
