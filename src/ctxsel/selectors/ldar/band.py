"""Algorithm 1 of the LDAR paper: a quantile band of the sorted similarities.

Given N similarities and a band 0 <= q_L < q_U <= 1::

    l = max(1, floor(N * q_L))
    u = max(l, floor(N * q_U))
    sort the similarities ascending; keep ranks l..u (1-based, inclusive)

so a band near quantile 1 holds the most similar chunks. This module is
numpy-only (no torch) so the rule can be used and tested on its own.

Where the rule and ctxsel's conventions meet (the paper is silent):

- Ranking. ctxsel ranks descending with ties broken by original position
  (``selectors.base.rank``). The ascending order of Algorithm 1 is that
  ranking reversed, so ascending rank r is descending position N - r
  (0-based): ties keep one consistent order in both directions.
- The top edge. Read literally, u = N needs q_U = 1 exactly, which a Beta
  sample or mean never is in exact arithmetic: the most similar chunk could
  never be selected (PyTorch's float32 Beta sampler does return 1.0 when a
  concentration is small, so a literal implementation reaches the top only
  through rounding while training, and never with the Beta mean at
  inference). With ``snap_top=True`` (ctxsel's default) a band that ends
  less than half a rank below the top, N * q_U > N - 1/2, ends at the top:
  u = N. Every other case is Algorithm 1 unchanged. ``snap_top=False`` is
  the literal rule.
"""

from __future__ import annotations

import math

import numpy as np

from ctxsel.errors import InputError


def band_ranks(n: int, q_l: float, q_u: float, *, snap_top: bool = True) -> tuple[int, int]:
    """1-based ascending ranks (l, u) of the band [q_L, q_U] over n scores.

    ``n`` must be >= 1 and 0 <= q_l <= q_u <= 1 (a ValueError says which
    input is wrong: a NaN quantile from a broken policy must not turn into
    an arbitrary band).
    """
    if n < 1:
        raise InputError(f"a band needs at least one score, got n={n}")
    for name, q in (("q_L", q_l), ("q_U", q_u)):
        if not (math.isfinite(q) and 0.0 <= q <= 1.0):
            raise InputError(f"{name} must be a number in [0, 1], got {q!r}")
    if q_l > q_u:
        raise InputError(f"q_L must not exceed q_U, got q_L={q_l!r} > q_U={q_u!r}")
    l = max(1, math.floor(n * q_l))
    u_raw = n * q_u
    u = n if (snap_top and u_raw > n - 0.5) else math.floor(u_raw)
    u = max(l, min(u, n))
    return l, u


def band_positions(n: int, l: int, u: int) -> tuple[int, int]:
    """The band as a slice [start, stop) of the descending ranking.

    Ascending rank r (1-based) is descending position n - r, so ranks l..u
    are descending positions n-u .. n-l.
    """
    if not 1 <= l <= u <= n:
        raise InputError(f"need 1 <= l <= u <= n, got l={l}, u={u}, n={n}")
    return n - u, n - l + 1


def select_band(order: np.ndarray, l: int, u: int) -> np.ndarray:
    """Indices (into the scores) of ascending ranks l..u, most similar first.

    ``order`` is the descending ranking (``selectors.base.rank``).
    """
    start, stop = band_positions(len(order), l, u)
    return order[start:stop]


__all__ = ["band_positions", "band_ranks", "select_band"]
