"""Statistics reported next to every pass rate."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054


def wilson_interval(successes: int, total: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval for a proportion; None when there is nothing to estimate.

    Unlike the normal approximation it stays inside [0, 1] and is honest for small samples and
    for rates near 0 or 1, which is where bias tests usually land.
    """
    if total <= 0:
        return None
    if not 0 <= successes <= total:
        raise ValueError(f"successes {successes} must be between 0 and total {total}")
    p = successes / total
    denominator = 1 + z**2 / total
    centre = (p + z**2 / (2 * total)) / denominator
    margin = z * math.sqrt(p * (1 - p) / total + z**2 / (4 * total**2)) / denominator
    return max(0.0, centre - margin), min(1.0, centre + margin)


def intervals_overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    if a is None or b is None:
        return True
    return a[0] <= b[1] and b[0] <= a[1]
