"""Algorithm 1 of the LDAR paper: a quantile band of the sorted similarities.

Given N similarities and a band 0 <= q_L < q_U <= 1::

    l = max(1, floor(N * q_L))
    u = max(l, floor(N * q_U))
    sort the similarities ascending; keep ranks l..u (1-based, inclusive)

so a band near quantile 1 holds the most similar chunks. This module is
numpy-only (no torch) so the rule, and :class:`LDARBand`, the record of the band a selection
kept, can be used and tested on their own.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxsel.errors import InputError
from ctxsel.types import MethodDetails, meta_key


@dataclass(frozen=True, slots=True)
class LDARBand(MethodDetails):
    """LDAR's decision: the band of ascending ranks ``l..u`` of ``n_ranked`` finite scores, the
    quantiles and Beta parameters it came from (a band head), or the picks (a Bernoulli head:
    ``l`` and ``u`` are None)."""

    n_ranked: int
    #: which policy decided: its folder, or "bundled ldar policy sha256:<first 12 hex>" (None: a policy
    #: object passed in)
    policy: str | None = field(default=None, metadata=meta_key())
    #: the reward that trained the policy (its description), the network's variant, and whether
    #: the band was drawn (None in the light selections training builds for its rewards)
    reward: dict[str, Any] | None = None
    variant: str | None = None
    sample: bool = False
    l: int | None = None
    u: int | None = None
    q_l: float | None = field(default=None, metadata=meta_key("q_L"))
    q_d: float | None = field(default=None, metadata=meta_key("q_D"))
    q_u: float | None = field(default=None, metadata=meta_key("q_U"))
    alpha_l: float | None = field(default=None, metadata=meta_key("alpha_L"))
    beta_l: float | None = field(default=None, metadata=meta_key("beta_L"))
    alpha_d: float | None = field(default=None, metadata=meta_key("alpha_D"))
    beta_d: float | None = field(default=None, metadata=meta_key("beta_D"))
    n_picked: int | None = field(default=None, metadata=meta_key())
    mean_p: float | None = field(default=None, metadata=meta_key())
    #: True when the policy ranks more scores than it was trained on (None: unknown)
    beyond_training_n: bool | None = field(default=None, metadata=meta_key())
    #: set when the band was widened to the selector's min_k
    widened_to_min_k: int | None = field(default=None, metadata=meta_key())
    #: the scorer whose scores the policy read through a score map onto its own scale (None: no map)
    score_map: str | None = field(default=None, metadata=meta_key())

    @property
    def ranks(self) -> tuple[int, int] | None:
        """``(l, u)`` for a band, None for Bernoulli picks."""
        return None if self.l is None or self.u is None else (self.l, self.u)

    def kept_band(self) -> tuple[int, int] | None:
        """Ascending ranks l..u are descending ranks n-u+1 .. n-l+1; None for Bernoulli picks."""
        if self.l is None or self.u is None:
            return None
        return self.n_ranked - self.u + 1, self.n_ranked - self.l + 1


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


__all__ = ["LDARBand", "band_positions", "band_ranks", "select_band"]
