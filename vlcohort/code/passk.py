"""pass@k with HumanEval's unbiased estimator (Chen et al. 2021, "Evaluating Large
Language Models Trained on Code", eq. 1).

With n samples of which c pass, pass@k = 1 - C(n-c, k) / C(n, k): the chance that k
samples drawn without replacement include a passing one. The binomials overflow floats
for large n, so it is computed as HumanEval does, as the product
prod_{i=n-c+1}^{n} (1 - k / i), which stays in [0, 1].
"""

from __future__ import annotations

import math
from typing import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """HumanEval's unbiased pass@k for one problem: n samples, c correct, k drawn."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be in 1..n={n}: sample at least k "
                         "completions per problem")
    if n - c < k:  # every draw of k includes a passing sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """The benchmark's pass@k: the mean over problems of pass_at_k(n, c, k)."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("mean_pass_at_k: no problems")
    return sum(values) / len(values)
