"""Give freed heap memory back to the system after a large request.

glibc keeps freed memory in its arenas for reuse, so a server that once
tokenized a 4 MB chunk stays hundreds of megabytes larger than it needs for
as long as it lives. ``malloc_trim(0)`` returns the free tops of the heaps
to the system; it is cheap next to such a request and a no-op where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def trim_heap() -> bool:
    """``malloc_trim(0)``; True if memory was given back."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


__all__ = ["trim_heap"]
