"""Learning-rate schedule: linear warm-up, then cosine decay to a floor (Co-RL's defaults:
3% warm-up, cosine to 0.1 x peak)."""

from __future__ import annotations

import math


def lr_multiplier(step: int, total_steps: int, warmup_ratio: float = 0.03,
                  min_ratio: float = 0.1, schedule: str = "cosine") -> float:
    """Multiplier of the peak LR for optimizer step ``step`` (0-based) of ``total_steps``.

    >>> lr_multiplier(0, 100, warmup_ratio=0.1)    # first warm-up step: 1/10 of the peak
    0.1
    >>> round(lr_multiplier(99, 100, warmup_ratio=0.0, min_ratio=0.1), 4)
    0.1
    """
    warmup = int(math.ceil(warmup_ratio * total_steps))
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    decay_steps = max(1, total_steps - warmup - 1)
    progress = min(1.0, (step - warmup) / decay_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
