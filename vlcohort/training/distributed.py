"""One launch, A agent groups: how W ranks split, and the few collectives a cohort needs.

    torchrun --standalone --nproc_per_node 2 -m vlcohort train --set distributed.ranks_per_agent=1

W ranks split into A contiguous groups of R = W / A ranks; group a (ranks a*R .. a*R+R-1)
hosts agent a. Within a group the agent is trained data-parallel with DeepSpeed ZeRO, so
agents never share an engine, gradients or optimizer state. Between groups only extracted
answers cross, by one all-gather over all W ranks per step; every rank then computes every
vote with the same deterministic rules, so no label has to be broadcast.

Two process groups per rank, from one rendezvous (the launcher's ``env://`` store):

- torch.distributed's *default* group is the rank's **agent group** (size R). DeepSpeed and
  transformers assume the default group is "the" data-parallel world: ZeRO-3 validates its
  parameter trace with broadcasts from global rank 0 over the default group, and
  ``save_pretrained`` writes only on default-group rank 0. With a world-wide default group
  both break for A > 1 (measured with deepspeed 0.19.8: a ZeRO-3 forward deadlocked on a
  world broadcast while another agent group was elsewhere). With the agent group as the
  default, both are right by construction and DeepSpeed needs no custom parallel unit.
- a gloo group over all W ranks (``cohort``), used only here, for the answer exchange,
  metrics, barriers and the checkpoint folder name (CPU tensors even when training on NCCL).

Without a launcher (``WORLD_SIZE`` unset or 1) there is one rank: every agent lives in the
process (``local_agents`` is all of them), the collectives are identities and DeepSpeed is
not used. That is the path the rest of the trainer was written for; the distributed path
only adds "which agents are mine" and "what did the others answer".

Collectives carry ``distributed.timeout_s``: a rank that dies makes the others fail with a
:class:`DistributedError` (which names the rank, the collective and what to check) within a
bounded time instead of hanging; ``torchrun`` also stops the remaining workers when one
exits with an error.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from vlcohort.errors import RunError


class DistributedError(RunError):
    """A collective failed (a peer rank died, timed out or disagreed): the run cannot go on."""


@dataclass
class Layout:
    """Where this process sits: world size W, its rank, A agents in groups of R ranks."""

    n_agents: int
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    ranks_per_agent: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    cohort: Any = None  # gloo ProcessGroup over all W ranks (the default group: the agent's)
    timeout_s: int = 300

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def agent_index(self) -> int:
        """The agent this rank hosts (distributed); 0 in a single process."""
        return self.rank // self.ranks_per_agent

    @property
    def group_rank(self) -> int:
        """This rank's position within its agent group (0 = the group's leader)."""
        return self.rank % self.ranks_per_agent

    @property
    def local_agents(self) -> list[int]:
        """Indices of the agents trained in this process."""
        return [self.agent_index] if self.distributed else list(range(self.n_agents))

    @property
    def is_logger(self) -> bool:
        """Rank 0 writes metrics.jsonl, plots, the resolved config and checkpoint state."""
        return self.rank == 0

    @property
    def is_group_leader(self) -> bool:
        return self.group_rank == 0

    # -------------------------------------------------------------- collectives

    def gather(self, obj: Any, what: str = "objects") -> list[Any]:
        """Every rank's ``obj``, in global rank order; ``[obj]`` in one process."""
        if not self.distributed:
            return [obj]
        box: list[Any] = []
        self._guard(lambda: box.extend(_all_gather_objects(self.cohort, obj, self.world_size)),
                    what)
        return box

    def group_any(self, flag: bool, what: str = "a flag") -> bool:
        """True on every rank of the agent group when it is True on any of them."""
        if self.ranks_per_agent == 1 or not self.distributed:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        self._guard(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX), what)
        return bool(t.item() > 0)

    def group_sum(self, value: float, what: str = "a sum") -> float:
        """Sum of ``value`` over the agent group's ranks."""
        if self.ranks_per_agent == 1 or not self.distributed:
            return float(value)
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        self._guard(lambda: dist.all_reduce(t, op=dist.ReduceOp.SUM), what)
        return float(t.item())

    def barrier(self, what: str = "a barrier") -> None:
        """All W ranks."""
        if self.distributed:
            self.gather(None, what)

    def broadcast(self, obj: Any, what: str = "an object") -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        return self.gather(obj if self.rank == 0 else None, what)[0]

    def _guard(self, fn: Callable[[], Any], what: str) -> None:
        try:
            fn()
        except RuntimeError as e:  # gloo / nccl (DistBackendError too): peer gone, timeout
            raise DistributedError(
                f"rank {self.rank}/{self.world_size}: collective for {what} failed ({e}). "
                "Another rank probably died or is stuck: look for the first error in the "
                f"other ranks' output (collectives time out after distributed.timeout_s="
                f"{self.timeout_s} s).") from e


@dataclass(frozen=True)
class StepPlan:
    """Which prompts of one step this rank generates and each agent trains on: the rank /
    ``data.decouple`` index arithmetic of a step, in one place.

    P prompts per step: B, or A x B with ``data.decouple`` (prompt b then belongs to agent
    b // B). In an agent group of R ranks, group rank r generates prompts r, r + R, ...
    (``generated``, the row order of its rollouts); every rank still votes on all P.
    """

    n_prompts: int  # P
    generated: tuple[int, ...]  # prompts this rank generates, in rollout row order
    owned: tuple[tuple[int, ...], ...]  # [A] the prompts each agent trains on

    def trained(self, agent: int) -> list[int]:
        """Agent ``agent``'s prompts whose rollouts are on this rank."""
        mine = set(self.generated)
        return [b for b in self.owned[agent] if b in mine]

    def positions(self, prompts: list[int]) -> list[int]:
        """Where ``prompts`` sit among this rank's generated prompts (row blocks of G)."""
        pos = {b: j for j, b in enumerate(self.generated)}
        return [pos[b] for b in prompts]


def step_plan(layout: Layout, n_prompts: int, decouple: bool) -> StepPlan:
    """The :class:`StepPlan` of a step of ``n_prompts`` prompts on this rank."""
    A = layout.n_agents
    generated = tuple(range(layout.group_rank, n_prompts, layout.ranks_per_agent))  # R = 1: all
    if decouple:
        B = n_prompts // A
        owned = tuple(tuple(range(a * B, (a + 1) * B)) for a in range(A))
    else:
        owned = tuple(tuple(range(n_prompts)) for _ in range(A))
    return StepPlan(n_prompts=n_prompts, generated=generated, owned=owned)


def _all_gather_objects(group, obj: Any, world_size: int) -> list[Any]:
    """``all_gather_object`` on a process group object that is not registered with
    torch.distributed (the cohort group): pickled bytes, padded to the longest."""
    import pickle

    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.long)
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world_size)]
    group.allgather([sizes], [size]).wait()
    longest = int(max(int(s.item()) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: data.numel()] = data
    parts = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world_size)]
    group.allgather([parts], [padded]).wait()
    return [pickle.loads(p[: int(n.item())].numpy().tobytes()) for p, n in zip(parts, sizes)]


def cpu_threads(requested: int = 0) -> int:
    """The torch CPU threads a run uses: ``requested``, else ``OMP_NUM_THREADS`` when set,
    else every CPU this process may run on (its affinity mask)."""
    if requested:
        return int(requested)
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_cpu_threads(requested: int = 0) -> int:
    """Set torch's CPU threads for a run, always (returns the number set).

    The thread count changes float reductions, hence sampled tokens a few steps in: a run
    that left it to the process inherited whatever an earlier run in the same process had
    set (``run.threads=1`` in a test, a warm-up worker), so two runs of one config differed
    depending on what ran before them (``test_resume_is_exact`` passed alone and failed in
    the full suite). Setting it from the config every time makes a run depend on its
    config and the machine only."""
    n = cpu_threads(requested)
    torch.set_num_threads(n)  # even when torch reports n already: MKL and OpenMP may not
    return n


def launched_world_size() -> int:
    """W from the launcher's environment (torchrun / accelerate set WORLD_SIZE; ``init``
    keeps it in VLCOHORT_LAUNCH_WORLD_SIZE, since the vLLM engine rewrites WORLD_SIZE to
    its agent group's size)."""
    try:
        return int(os.environ.get("VLCOHORT_LAUNCH_WORLD_SIZE")
                   or os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def launched_rank() -> int:
    """This process's rank in the launch (see :func:`launched_world_size`)."""
    try:
        return int(os.environ.get("VLCOHORT_LAUNCH_RANK") or os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def split(world_size: int, n_agents: int, ranks_per_agent: int) -> int:
    """R, checked: W = A x R (``ranks_per_agent`` 0 means W / A)."""
    if world_size == 1:
        return 1
    if n_agents > world_size:
        raise DistributedError(
            f"{world_size} ranks for {n_agents} agents: each agent needs at least one rank; "
            f"launch with --nproc_per_node {n_agents} (or a multiple), or run in one process")
    R = ranks_per_agent or world_size // n_agents
    if n_agents * R != world_size:
        raise DistributedError(
            f"distributed.ranks_per_agent={ranks_per_agent or 'auto'}: {n_agents} agents x "
            f"{R} ranks != world size {world_size}; launch A x ranks_per_agent processes")
    return R


def init(cfg) -> Layout:
    """The layout of this launch; initialises the process groups when W > 1."""
    A = len(cfg.agents)
    W = launched_world_size()
    d = cfg.distributed
    R = split(W, A, d.ranks_per_agent)
    if W == 1:
        return Layout(n_agents=A, timeout_s=d.timeout_s)
    backend = d.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    timeout = datetime.timedelta(seconds=d.timeout_s)
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    os.environ["VLCOHORT_LAUNCH_RANK"] = str(rank)
    os.environ["VLCOHORT_LAUNCH_WORLD_SIZE"] = str(world)
    agent, group_rank = rank // R, rank % R
    # the default group: this rank's agent group (see the module docstring)
    dist.init_process_group(backend, store=dist.PrefixStore(f"vlcohort/agent{agent}", store),
                            rank=group_rank, world_size=R, timeout=timeout)
    cohort = dist.ProcessGroupGloo(dist.PrefixStore("vlcohort/cohort", store), rank, world,
                                   timeout)
    layout = Layout(n_agents=A, world_size=W, rank=rank, local_rank=local_rank,
                    ranks_per_agent=R, device=device, cohort=cohort, timeout_s=d.timeout_s)
    B = cfg.rollout.prompts_per_step
    if B % R:
        raise DistributedError(f"rollout.prompts_per_step={B} must be divisible by the ranks "
                               f"per agent ({R}): each rank generates B / R prompts")
    return layout


def shutdown(layout: Layout) -> None:
    if layout.distributed:
        layout.barrier("the end of the run")
        if dist.is_initialized():
            dist.destroy_process_group()
        layout.cohort = None


# ------------------------------------------------------------------- DeepSpeed


def deepspeed_config(cfg, layout: Layout, micro_batch_seqs: int, max_grad_norm: float,
                     bf16: bool = False) -> dict[str, Any]:
    """The DeepSpeed config of one agent group, from ``distributed.*`` (+ the JSON in
    ``distributed.deepspeed_config``, whose keys win except batch sizes and optimizer).

    Gradient accumulation is driven by the trainer (``set_gradient_accumulation_boundary``
    per micro-batch, losses already carrying the full batch's normaliser), so DeepSpeed's
    own accumulation count is 1 and it never rescales a loss.
    """
    d = cfg.distributed
    zero: dict[str, Any] = {"stage": d.zero_stage}
    if d.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if d.offload_params:
        zero["offload_param"] = {"device": "cpu"}
    out: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_seqs,
        "gradient_accumulation_steps": 1,
        "train_batch_size": micro_batch_seqs * layout.ranks_per_agent,
        "gradient_clipping": max_grad_norm if max_grad_norm > 0 else 0.0,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # our AdamW, wrapped by ZeRO
        "zero_force_ds_cpu_optimizer": False,
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if d.deepspeed_config:
        user = json.loads(Path(d.deepspeed_config).read_text())
        for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                    "train_batch_size", "optimizer", "scheduler"):
            user.pop(key, None)
        out.update(user)
    return out
