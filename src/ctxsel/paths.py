"""Where ctxsel keeps its caches (standard library only, so every layer can use it).

Nothing needs a writable home: a container with a read-only HOME, a service
user whose HOME is ``/nonexistent``, or a process with no HOME and no
password entry must still select, read and serve. Every place that writes
asks :func:`writable_cache_dir` (the folder, or None), and then:

- the caches (embeddings, LLM replies) stay in memory for the process;
- files that must be on disk (the ONNX export, the assembled GGUF models,
  converted LoRA adapters) go to :func:`temp_files_dir`, a folder of this
  user's under ``tempfile.gettempdir()`` (mode 0700, checked to be ours), so
  later processes of the same user still reuse them.

The reason is logged once per process (per cache folder), as one line that
names the folder, why it cannot be written, and ``CTXSEL_CACHE_DIR``.
Files already in a read-only cache folder (a model assembled into an image)
are still read: see :func:`find_cached`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from ctxsel.errors import NoCacheDir

ENV_VAR = "CTXSEL_CACHE_DIR"

log = logging.getLogger("ctxsel.cache")

_lock = threading.Lock()
#: configured folder (or why there is none) -> the writable folder, or None once warned
_checked: dict[str, Path | None] = {}
_temp_root: Path | None = None


def default_cache_dir() -> Path:
    """``$CTXSEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxsel``, else ``~/.cache/ctxsel``.

    Raises :class:`NoCacheDir` (an OSError) when the home folder cannot be found at all."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "ctxsel"
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError) as e:
        raise NoCacheDir("HOME is not set and this user has no home folder in the password database") from e
    return home / ".cache" / "ctxsel"


def _configured() -> tuple[Path | None, str]:
    """The cache folder and why it cannot be used ("" when nothing is known against it yet)."""
    try:
        folder = default_cache_dir()
    except NoCacheDir as e:
        return None, str(e)
    if not os.environ.get(ENV_VAR) and not os.environ.get("XDG_CACHE_HOME"):
        home = folder.parent.parent
        if not home.is_dir():  # never create a missing home (HOME=/nonexistent for service users)
            return folder, f"the home folder {home} does not exist"
    return folder, ""


def _probe(folder: Path) -> str:
    """Create ``folder`` and a file in it; "" if that worked, else why not. Only a real write tells:
    root writes through chmod 0500, a read-only mount refuses even root."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".ctxsel-write-test-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        return f"{e.strerror}: {e.filename}" if e.strerror and e.filename else str(e)
    return ""


def writable_cache_dir(sub: str = "") -> Path | None:
    """The cache folder (its ``sub`` folder, created) if this process can write there; else None, after
    one warning per process that says why and to set ``CTXSEL_CACHE_DIR``.

    The answer is remembered per process and folder, so a run that cannot write warns once, whichever
    cache asks first."""
    folder, reason = _configured()
    key = str(folder) if folder is not None else ""
    with _lock:
        if key not in _checked:
            if folder is not None and not reason:
                reason = _probe(folder)
            _checked[key] = None if reason else folder
            if reason:
                _warn(folder, reason)
        base = _checked[key]
    if base is None or not sub:
        return base
    reason = _probe(base / sub)
    if not reason:
        return base / sub
    with _lock:  # the folder was written a moment ago: ``sub`` is not ours, or it went away or filled up since
        if _checked.get(key) is not None:
            _checked[key] = None
            _warn(base / sub, reason)
    return None


def _warn(folder: Path | None, reason: str) -> None:
    """The one warning (the caller holds the lock and records the answer, so it is not repeated)."""
    where = f"write its cache folder {folder}" if folder is not None else "name a cache folder"
    log.warning(
        "ctxsel cannot %s (%s): caches are kept in memory and model files go to a temporary folder for this "
        "process; set %s to a writable folder to keep them between runs",
        where,
        reason,
        ENV_VAR,
    )


def find_cached(sub: str, name: str) -> Path | None:
    """``<cache folder>/sub/name`` if it exists, even in a folder this process cannot write (files made
    ahead of time, e.g. in a container image); None if it does not, or no cache folder can be named."""
    try:
        path = default_cache_dir() / sub / name
        return path if path.exists() else None
    except OSError:
        return None


def _private_root() -> Path:
    """``<tmp>/ctxsel-<uid>``, mode 0700 and owned by this user; if another user holds that name (or
    made it open to others), a fresh folder of this process's own, removed when it exits."""
    tmp = Path(tempfile.gettempdir())
    uid = os.getuid() if hasattr(os, "getuid") else None
    root = tmp / f"ctxsel-{uid if uid is not None else 'user'}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    try:
        st = root.lstat()
        ours = stat.S_ISDIR(st.st_mode) and (uid is None or (st.st_uid == uid and not st.st_mode & 0o077))
    except OSError:
        ours = False
    if ours:
        return root
    own = Path(tempfile.mkdtemp(prefix="ctxsel-"))
    atexit.register(shutil.rmtree, own, ignore_errors=True)
    return own


def temp_files_dir(sub: str) -> Path:
    """A folder for files that must be on disk when the cache folder cannot be written: ``sub`` in this
    user's private folder under the system's temporary folder (see :func:`_private_root`)."""
    global _temp_root
    with _lock:
        if _temp_root is None or not _temp_root.is_dir():
            _temp_root = _private_root()
        folder = _temp_root / sub
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def files_dir(sub: str) -> Path:
    """Where to write files that must be on disk (exports, models): the cache folder's ``sub`` when
    it can be written, else :func:`temp_files_dir`."""
    return writable_cache_dir(sub) or temp_files_dir(sub)


def _forget() -> None:
    """Forget what was checked (tests that change the environment within one process)."""
    global _temp_root
    with _lock:
        _checked.clear()
        _temp_root = None


__all__ = [
    "ENV_VAR",
    "default_cache_dir",
    "files_dir",
    "find_cached",
    "temp_files_dir",
    "writable_cache_dir",
]
