"""Reward sources as registered objects: where an agent's reward comes from, and everything
the source needs besides the step's answers and votes, declared in one place.

The step (``recipes/step.py``), the agent (``training/agent.py``), the checkpoint
(``training/checkpoint.py``) and the config checks (``config_checks.py``) call a source's
hooks and never compare its name, so a new source is one module: a subclass of
:class:`RewardSource` decorated with :func:`register` (a name registered twice is
refused, as ``training/grpo.py``'s registries refuse one).

What a source declares:

* ``reward(x)``: the rewards of one agent's rollouts (``x``: ``rewards.RewardInputs``),
  the only hook every source implements;
* ``methods``: the ``method`` presets that choose it (``co_rl`` -> ``peer_vote``);
* ``intrinsic``: its reward is its verdict (self-certainty, entropy: no label, nothing to
  be correct against); ``needs_gold``: training records must carry a gold answer;
  ``min_agents``: the cohort size it needs (a peer vote: 2); ``keeps_teacher``: its
  per-agent state is a teacher whose weights can stand as the KL reference
  (``grpo.kl_reference=teacher``);
* ``check(cfg, agents)``: its config check, for the agents that use it;
* ``wordings(cfg)``: the prompts it needs (:class:`Wordings`: each question also in the
  agent's rephrasing);
* ``new_state(agent, cfg)``: per-agent state kept across steps (:class:`AgentState`: the
  EMA teacher), saved in the agent's folder of every full checkpoint and restored on
  resume;
* ``before_step(cohort, step, timing)`` and ``round_inputs(cohort, step, prompts, plan,
  round_, timing)``: work at the start of a step (the EMA update) and extra rollouts per round
  (the teacher's samples and vote), whose result reaches the agent's ``reward`` as
  ``x.extra``;
* ``metrics``: the patterns of the keys it logs and their docs, added to
  ``monitoring.metrics.METRIC_DOCS`` when it registers.

The built-in sources register from ``training/rewards.py`` (votes, gold, intrinsic) and
``training/co_rewarding.py`` (Co-rewarding I and II); :func:`registry` imports them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from vlcohort.config_schema import Config

#: The modules that register the built-in sources, imported by :func:`registry`.
BUILTIN_MODULES = ("vlcohort.training.rewards", "vlcohort.training.co_rewarding")


@dataclass(frozen=True)
class Wordings:
    """The prompts a source needs. ``both``: the round holds every question twice, as asked
    and in each agent's rephrasing (``agents.N.view``), P = 2B; ``teacher_other``: its
    extra rollouts answer the other wording of the policy's question. ``why``: the reason,
    for the config error of an agent without a rephrasing."""

    both: bool = False
    teacher_other: bool = False
    why: str = ""

    @property
    def rephrased(self) -> bool:
        return self.both or self.teacher_other


class AgentState:
    """State a source keeps per agent across steps, saved with every full checkpoint in the
    agent's folder and restored on resume (a missing one is a ``CheckpointError``, never a
    silently fresh state)."""

    def save(self, folder: Path, layout) -> None:
        """Write the state into the agent's checkpoint ``folder`` (``layout``: the run's
        ``distributed.Layout``; each rank of an agent group calls this)."""
        raise NotImplementedError

    def load(self, folder: Path, layout) -> None:
        """Read the state back from the agent's checkpoint ``folder``."""
        raise NotImplementedError

    def describe(self, agent: str) -> str:
        """One line about agent ``agent``'s state, printed at setup (its size, where it
        lives); "" for none."""
        return ""


class RewardSource:
    """A reward source (module docstring). Subclasses set the class attributes they need
    and implement :meth:`reward`."""

    name: ClassVar[str] = ""
    methods: ClassVar[tuple[str, ...]] = ()
    intrinsic: ClassVar[bool] = False
    needs_gold: ClassVar[bool] = False
    min_agents: ClassVar[int] = 1
    keeps_teacher: ClassVar[bool] = False
    metrics: ClassVar[dict[str, str]] = {}

    def reward(self, x) -> Any:
        """The rewards (``rewards.Reward``) of one agent's rollouts."""
        raise NotImplementedError

    def check(self, cfg: Config, agents: list[int]) -> None:
        """Raise ``ConfigError`` for a setting this source cannot run with (``agents``: the
        indices of the agents that use it)."""

    def wordings(self, cfg: Config) -> Wordings:
        return Wordings()

    def new_state(self, agent, cfg: Config) -> AgentState | None:
        """The per-agent state of an agent rewarded by this source (built after the agent's
        model and engine), or None."""
        return None

    def before_step(self, cohort, step: int, timing: dict[str, float]) -> dict[int, dict[str, float]]:
        """Work at the start of step ``step``, before any sampling; {agent: metrics}.
        ``cohort``: the step's frozen view of the run (``recipes.step.Cohort``: cfg, layout,
        agents and their ``local`` indices, names, grader, answer kind, progress)."""
        return {}

    def round_inputs(self, cohort, step: int, prompts, plan, round_: int,
                     timing: dict[str, float]) -> dict[int, Any]:
        """Extra work per round before the policies generate (every rank calls it: it may
        hold collectives); {local agent: what its ``reward`` reads as ``x.extra``}."""
        return {}


#: name -> the registered source (one instance each).
SOURCES: dict[str, RewardSource] = {}


def register(cls: type[RewardSource]) -> type[RewardSource]:
    """Class decorator: register one instance of ``cls`` under ``cls.name``, and document
    its metrics where every logged key is documented (``monitoring.metrics.METRIC_DOCS``)."""
    from vlcohort.monitoring.metrics import METRIC_DOCS

    if not cls.name:
        raise ValueError(f"reward source {cls.__name__} has no name")
    if cls.name in SOURCES and type(SOURCES[cls.name]) is not cls:
        raise ValueError(f"reward source {cls.name!r} is registered twice "
                         f"({type(SOURCES[cls.name]).__name__} and {cls.__name__})")
    taken = {m: s.name for s in SOURCES.values() for m in s.methods if s.name != cls.name}
    for m in cls.methods:
        if m in taken:
            raise ValueError(f"method {m!r} presets two reward sources ({taken[m]!r} and "
                             f"{cls.name!r})")
    SOURCES[cls.name] = cls()
    METRIC_DOCS.update(cls.metrics)
    return cls


def registry() -> dict[str, RewardSource]:
    """Every registered source, the built-in ones imported first."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return SOURCES


def source(name: str) -> RewardSource:
    """The source registered as ``name``."""
    try:
        return registry()[name]
    except KeyError:
        raise ValueError(f"unknown reward source {name!r}; registered: "
                         + ", ".join(registry())) from None


def method_sources() -> dict[str, str]:
    """``method`` -> the source it presets, from every source's ``methods``."""
    return {m: s.name for s in registry().values() for m in s.methods}


def sources_of(cfg: Config) -> dict[str, list[int]]:
    """Each source the cohort uses -> the agents it rewards (``agents.N.reward_source``,
    else ``reward.source``), in agent order; none for a recipe without reward sources
    (self-play, CoMAS)."""
    from vlcohort.config_schema import agent_reward_source

    out: dict[str, list[int]] = {}
    for i in range(len(cfg.agents)):
        name = agent_reward_source(cfg, i)
        if name is not None:
            out.setdefault(name, []).append(i)
    return out


def wordings_of(cfg: Config) -> Wordings:
    """The prompts the cohort's sources need, together."""
    ws = [source(name).wordings(cfg) for name in sources_of(cfg) if name in registry()]
    return Wordings(both=any(w.both for w in ws), teacher_other=any(w.teacher_other for w in ws),
                    why=next((w.why for w in ws if w.rephrased), ""))


def cross_view_partners(n_prompts: int, n_blocks: int = 1) -> list[int]:
    """The pairing of a round that holds both wordings (:attr:`Wordings.both`) [P]: each of
    ``n_blocks`` blocks of 2B prompts holds B original questions then their B rephrasings
    in the same order, so prompt b's other view is b + B in the first half of its block
    and b - B in the second.

    >>> cross_view_partners(4), cross_view_partners(4, n_blocks=2)
    ([2, 3, 0, 1], [1, 0, 3, 2])
    """
    if n_blocks < 1 or n_prompts % (2 * n_blocks):
        raise ValueError(f"cross-view pairing: {n_prompts} prompts do not split into "
                         f"{n_blocks} block(s) of originals and rephrasings")
    half = n_prompts // (2 * n_blocks)  # B
    return [b + half if b % (2 * half) < half else b - half for b in range(n_prompts)]
