"""Learning-rate schedule: linear warm-up, then cosine decay to a floor (Co-RL's defaults:
3% warm-up, cosine to 0.1 x peak)."""

from __future__ import annotations

import math

# Kept instead of transformers' cosine-with-min-lr schedules, which give other multipliers
# (measured with transformers 5.24; e.g. 10 steps, no warm-up, floor 0.1):
# - ``get_cosine_with_min_lr_schedule_with_warmup``: warm-up step s is at s / warmup, so
#   the first optimizer step has LR 0 (here (s + 1) / warmup), and the decay runs over
#   total - warmup steps, so the last step stays above the floor (0.122, here 0.1);
# - ``get_cosine_with_min_lr_schedule_with_warmup_lr_rate``: warm-up as here, but its decay
#   is one step ahead ([0.978, 0.914, ..., 0.1] where ours is [1.0, 0.973, ..., 0.1]).
# With the defaults (100 steps, 3% warm-up) they agree with ours on 1 and 4 of the 100
# steps, so a swap would change every run's learning-rate curve. Both come as a
# ``LambdaLR`` too; ours is used through one (``build_agent``), so resume is the same.


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
