"""Co-rewarding-II's slowly updated teacher (Zhang et al., arXiv 2508.00410, sec. 3.3): an
exponential moving average (EMA) of an agent's own policy weights, which samples G
answers per prompt whose majority vote labels the policy's rollouts
(``co_rewarding.EMATeacherVote``).

The maths are two pure functions, checked by hand in ``tests/test_co_rewarding.py``:

    alpha(t) = alpha_end + 1/2 (alpha_start - alpha_end) (1 + cos(pi t / T)),
               t = clip(step - 1, 0, T), T = run.steps          (:func:`cosine_alpha`)
    teacher <- (1 - alpha) teacher + alpha policy                (:func:`ema_update_`)

``alpha`` is the policy's weight in one update (the EMA's decay is 1 - alpha); it anneals
from ``reward.ema.alpha_start`` to ``reward.ema.alpha_end``, so the teacher follows the
policy less and less as training goes on. The update runs at the start of every step
``s`` with ``s % reward.ema.every == 0``, before the teacher samples, as the published
code (github.com/tmlr-group/Co-rewarding, Co-rewarding-II: its trainer tests
``global_steps % update_interval == 0``, then its sharding manager's ``update_alpha(step)``
anneals alpha) does. Its defaults (``alpha_start`` 0.01, ``alpha_end`` 1e-5, ``every`` 1)
are the published recipe's, run_corewarding-II.sh; the code's own fallbacks (0.3, 0.05,
30) are not what the paper ran.

Memory and place. The teacher keeps one float32 copy of the weights the policy *trains*
(``requires_grad``): every weight for a full fine-tune, the adapter weights only for a
LoRA agent (the frozen base is the teacher's as it is the policy's). Float32 whatever the
policy's dtype: a bf16 weight cannot hold a step of ``alpha`` = 1e-5 (its spacing near 1
is 2^-7), so a bf16 EMA would never move. That is 4 bytes per trained weight (a 7B full
fine-tune: 28 GB), on the CPU (``reward.ema.device=cpu``, the published recipe offloads
its teacher, ``ref.fsdp_config.param_offload=True``) or beside the policy
(``device=same``: faster swaps, device memory). :attr:`EMATeacher.nbytes` is printed at
setup and logged at step 1 (``teacher/bytes``). While the teacher samples, a copy of the
policy's own values of those weights (in their dtype: 2 bytes each in bf16) is held
there too, to restore them after.

Sampling. The teacher is never a second model: :meth:`EMATeacher.swapped_in` copies the
EMA into the policy's own parameters for the teacher's generation and copies the policy's
values back after it, bit for bit (a copy of the saved values, never a recomputation). The
hf engine samples from the module as it is; the vllm engine is pushed the teacher's
weights and then the policy's again (``rollout.vllm.VLLMEngine.generate_as``).

Agent groups (DeepSpeed ZeRO): each rank keeps the EMA of what it holds. Under stages
0-2 every rank holds the whole weights (only the optimizer state is partitioned), so each
keeps a whole EMA (the same on every rank, as the weights are); under stage 3 a rank holds
its partition of each weight (``param.ds_tensor``) and keeps the EMA of that partition
only; the gathering for generation (``Agent.generation_context``) then assembles the
teacher from every rank's swapped-in partition.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Iterator

import torch

#: ``<agent>/<EMA_FILE>`` in a checkpoint folder (single process); in an agent group each
#: rank writes ``<agent>/ema_teacher-rank<r>.safetensors`` (its own partition under ZeRO-3).
EMA_FILE = "ema_teacher.safetensors"

#: ``reward.ema.device`` values.
EMA_DEVICES = ("cpu", "same")


def cosine_alpha(step: int, total_steps: int, alpha_start: float, alpha_end: float) -> float:
    """The policy's weight in the EMA update of step ``step`` (1-based), annealed by a
    half cosine from ``alpha_start`` (step 1) to ``alpha_end`` (step ``total_steps`` + 1),
    the published code's ``update_alpha``: t = clip(step - 1, 0, T).

    >>> cosine_alpha(1, 4, 0.3, 0.1), round(cosine_alpha(3, 4, 0.3, 0.1), 6)
    (0.3, 0.2)
    """
    if total_steps <= 0:
        return float(alpha_start)
    t = max(0, min(step - 1, total_steps))
    return alpha_end + 0.5 * (alpha_start - alpha_end) * (1.0 + math.cos(math.pi * t / total_steps))


@torch.no_grad()
def ema_update_(teacher: torch.Tensor, policy: torch.Tensor, alpha: float) -> torch.Tensor:
    """``teacher <- (1 - alpha) teacher + alpha policy`` in place (any shape; ``policy`` is
    cast to the teacher's dtype and device); returns ``teacher``.

    >>> ema_update_(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0]), 0.25)
    tensor([1.5000, 1.5000])
    """
    p = policy.detach().to(device=teacher.device, dtype=teacher.dtype)
    return teacher.mul_(1.0 - alpha).add_(p, alpha=alpha)


def held(param: torch.nn.Parameter) -> torch.Tensor:
    """The tensor of ``param`` this rank holds: its ZeRO-3 partition (``ds_tensor``) when
    DeepSpeed partitions it, else the parameter's own data."""
    part = getattr(param, "ds_tensor", None)
    return part.data if part is not None else param.data


def trained_parameters(model) -> list[tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` of every weight ``model`` trains (``requires_grad``), each
    once (tied weights under their first name): all of them for a full fine-tune, the
    LoRA adapter weights for a PEFT model."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


class EMATeacher:
    """The EMA of one agent's trained weights (module docstring): float32 shadows of the
    tensors this rank holds, on ``device`` (``cpu``, or ``same``: beside each weight)."""

    def __init__(self, model, device: str = "cpu"):
        if device not in EMA_DEVICES:
            raise ValueError(f"reward.ema.device: {device!r} is not one of {', '.join(EMA_DEVICES)}")
        self.params = trained_parameters(model)
        if not self.params:
            raise ValueError("the EMA teacher needs a policy with trained weights; this one has none")
        self.device = device
        self.shadow: dict[str, torch.Tensor] = {
            n: held(p).detach().to(self._where(p), dtype=torch.float32, copy=True)
            for n, p in self.params}
        self.updates = 0  # EMA updates applied (saved with the shadows)

    def _where(self, p) -> torch.device:
        return torch.device("cpu") if self.device == "cpu" else held(p).device

    @property
    def nbytes(self) -> int:
        """Bytes the shadows take (4 per held trained weight)."""
        return sum(t.numel() * t.element_size() for t in self.shadow.values())

    @torch.no_grad()
    def update(self, alpha: float) -> None:
        """One EMA step towards the policy's current weights (:func:`ema_update_`)."""
        for n, p in self.params:
            ema_update_(self.shadow[n], held(p), alpha)
        self.updates += 1

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Inside: the policy's parameters hold the teacher's weights (cast to their own
        dtype). After, even on an error: the policy's own values, restored bit for bit
        from a saved copy (kept where the shadows are)."""
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        try:
            with torch.no_grad():
                for n, p in self.params:
                    t = held(p)
                    saved.append((t, t.detach().to(self._where(p), copy=True)))
                    t.copy_(self.shadow[n].to(device=t.device, dtype=t.dtype))
            yield
        finally:
            with torch.no_grad():
                for t, own in saved:
                    t.copy_(own.to(t.device))

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The shadows by parameter name, on the CPU, plus the update count."""
        out = {n: t.detach().cpu().contiguous() for n, t in self.shadow.items()}
        out["__updates__"] = torch.tensor([self.updates], dtype=torch.int64)
        return out

    def load_state_dict(self, state: dict[str, torch.Tensor], where: str = "the checkpoint") -> None:
        """Shadows saved by :meth:`state_dict`; a missing or misshapen one is an error
        (the checkpoint is another model's, or another partitioning's)."""
        missing = [n for n in self.shadow if n not in state]
        if missing:
            raise ValueError(f"{where}: the EMA teacher lacks {len(missing)} weight(s), e.g. "
                             f"{missing[0]!r}; it was saved for another model")
        for n, t in self.shadow.items():
            if state[n].shape != t.shape:
                raise ValueError(f"{where}: EMA teacher weight {n!r} has shape "
                                 f"{tuple(state[n].shape)}, the policy holds {tuple(t.shape)} "
                                 "(resume with the launch it was saved with)")
            t.copy_(state[n].to(t.device, dtype=t.dtype))
        self.updates = int(state["__updates__"][0]) if "__updates__" in state else 0

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(path))

    def load(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        self.load_state_dict(load_file(str(path)), where=str(path))
