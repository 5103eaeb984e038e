"""Where ctxsel keeps its caches (standard library only, so every layer can use it)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$CTXSEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxsel``, else ``~/.cache/ctxsel``."""
    if os.environ.get("CTXSEL_CACHE_DIR"):
        return Path(os.environ["CTXSEL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxsel"
