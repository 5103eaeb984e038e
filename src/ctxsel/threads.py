"""torch's thread count for one call, then as it was.

``torch.set_num_threads`` changes the whole process. A thread count a
caller names (LDAR's ``threads``, the dense scorer's ``num_threads``)
applies only while its own work runs, so that one call never changes
another's, and it is bounded by the CPUs the process may use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ctxsel.errors import InputError


def max_threads() -> int:
    """The most threads a call may ask for: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def check_threads(name: str, n: int | None) -> int | None:
    """``n`` when it is None or 1..:func:`max_threads`, else a clear InputError naming ``name``."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_threads():
        raise InputError(f"{name} must be a whole number from 1 to {max_threads()} (this machine's CPUs), got {n!r}")
    return n


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's thread count set to ``n`` while the block runs (None: left alone)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
