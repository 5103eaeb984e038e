"""matplotlib, when the ``plots`` extra is installed.

Plots are a by-product of evaluation and training: without matplotlib the run still writes its
results, draws nothing, and says so in one warning per process (not one per figure).
"""

from __future__ import annotations

import warnings
from typing import Any

from ctxsel.errors import install_hint

_warned = False


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None (with one warning) when it is not installed."""
    global _warned
    try:
        import matplotlib
    except ImportError:
        if not _warned:
            _warned = True
            warnings.warn(f"no plots: matplotlib is not installed ({install_hint('plots')})", stacklevel=2)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


__all__ = ["pyplot"]
