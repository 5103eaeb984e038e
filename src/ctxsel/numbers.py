"""How a score or a gap prints in explanations, pages and tables: one rule everywhere."""

from __future__ import annotations

import math


def short_number(x: float, places: int = 3) -> str:
    """A score or gap as an explanation prints it: ``places`` decimals in the usual range, and a few
    significant digits past it (``1e+308``, ``2.5e-07``), so extreme scores never print hundreds of digits."""
    x = float(x)
    if not math.isfinite(x) or x == 0 or 10.0**-places <= abs(x) < 1e6:
        return f"{x:.{places}f}" if math.isfinite(x) else str(x)
    return f"{x:.{places}g}"


__all__ = ["short_number"]
