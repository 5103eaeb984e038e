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

A folder that fills up (ENOSPC, a quota, a file size limit) or turns
read-only while a run writes is the same case met later: whoever meets it
calls :func:`out_of_room`, which gives that one warning (naming the folder
and the space left on it) and makes :func:`writable_cache_dir` answer None
from then on, so the caches keep to memory and the files that must be on disk
go to the temporary folder. :func:`is_out_of_room` says which errors those
are (the OS's and SQLite's), :func:`room_reason` words them.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
from pathlib import Path

from ctxsel.errors import DiskFull, NoCacheDir

ENV_VAR = "CTXSEL_CACHE_DIR"

log = logging.getLogger("ctxsel.cache")

_lock = threading.Lock()
#: configured folder (or why there is none) -> the writable folder, or None once warned
_checked: dict[str, Path | None] = {}
_temp_root: Path | None = None

#: errors that say no more can be written there: a full disk, a quota, a file size limit, a read-only mount
ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
_SQLITE_READONLY, _SQLITE_FULL = 8, 13


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


def is_out_of_room(e: BaseException) -> bool:
    """Whether ``e`` says nothing more can be written there: ENOSPC, EDQUOT, EFBIG (a file size
    limit) or EROFS from the OS, SQLITE_FULL or SQLITE_READONLY from SQLite, or an error caused by one."""
    seen: set[int] = set()
    err: BaseException | None = e
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in ROOM_ERRNOS:
            return True
        if isinstance(err, sqlite3.Error):
            code = getattr(err, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in (_SQLITE_FULL, _SQLITE_READONLY):
                return True
            if code is None and "disk is full" in str(err).lower():
                return True
        err = err.__cause__ or err.__context__
    return False


def free_space(folder: str | os.PathLike[str]) -> str:
    """How much the filesystem holding ``folder`` (or its nearest existing parent) has free, in words:
    "0 bytes free", "12.0 KiB free"; "" where that cannot be asked."""
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return ""
    return f"{_size(free)} free"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def room_reason(e: BaseException, folder: str | os.PathLike[str] | None) -> str:
    """Why nothing more can be written in ``folder``, in words: "disk full (No space left on device),
    0 bytes free there" (or "read-only filesystem (...)", "file size limit (...)"); without a folder,
    no space is named."""
    code = next(
        (x.errno for x in (e, e.__cause__, e.__context__) if isinstance(x, OSError) and x.errno in ROOM_ERRNOS),
        None,
    )
    kind = {errno.EROFS: "read-only filesystem", errno.EFBIG: "file size limit", errno.EDQUOT: "disk quota full"}
    what = kind.get(code, "disk full") if code is not None else "disk full"
    if isinstance(e, OSError) and e.strerror:
        detail = e.strerror
    else:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    free = free_space(folder) if folder is not None else ""
    return f"{what} ({detail}){', ' + free + ' there' if free else ''}"


def _probe(folder: Path) -> str:
    """Create ``folder`` and a file in it, and write a block to it; "" if that worked, else why not.
    Only a real write tells: root writes through chmod 0500, a read-only mount refuses even root, and
    a full disk still makes an empty file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".ctxsel-write-test-", dir=folder)
        try:
            os.write(fd, bytes(4096))
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        if is_out_of_room(e):
            return room_reason(e, folder)
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
        "process; %sset %s to a writable folder to keep them between runs",
        where,
        reason,
        "free some space there or " if reason.startswith(("disk full", "disk quota", "file size")) else "",
        ENV_VAR,
    )


def in_cache_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the cache folder or in it (not resolved: the names the caches build)."""
    configured, _ = _configured()
    p = Path(path)
    return configured is not None and (p == configured or configured in p.parents)


def disk_full(path: str | os.PathLike[str], error: BaseException, then: str = "") -> DiskFull:
    """The :class:`DiskFull` for ``error`` (one that :func:`is_out_of_room`) met writing ``path``: "disk
    full (No space left on device), 0 bytes free there: cannot write PATH; THEN" (``then``: what the
    user can do; by default, free some space and run again)."""
    where = Path(path)
    then = then or "free some space there (or write somewhere else) and run the command again"
    out = DiskFull(f"{room_reason(error, where)}: cannot write {where}; {then}")
    out.__cause__ = error
    return out


def os_error_words(e: BaseException) -> str:
    """An error as the CLI prints it: a full disk (or a read-only one) in words, with the file and the
    space left; any other error as it is."""
    if isinstance(e, DiskFull) or not isinstance(e, OSError) or not is_out_of_room(e):
        return str(e)
    if e.filename:
        return str(disk_full(e.filename, e))
    return f"{room_reason(e, None)}: free some space (or write somewhere else) and run the command again"


def out_of_room(folder: str | os.PathLike[str], error: BaseException) -> bool:
    """``folder``, in the cache folder, could not be written for lack of room (:func:`is_out_of_room`):
    give the one warning, naming the cache folder, the error and the space left, once a process, and
    have :func:`writable_cache_dir` answer None from then on (the caches keep to memory, files go to
    the temporary folder); True. For a folder outside the cache folder (a path the caller named),
    nothing is done and False is returned: the caller says what it skips."""
    path = Path(folder)
    if not in_cache_dir(path):
        return False
    configured, _ = _configured()
    reason = room_reason(error, path)
    with _lock:
        key = str(configured)
        if _checked.get(key, configured) is not None:  # not warned yet (or not asked yet)
            _checked[key] = None
            _warn(configured, reason)
    return True


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
    "ROOM_ERRNOS",
    "default_cache_dir",
    "disk_full",
    "files_dir",
    "find_cached",
    "free_space",
    "in_cache_dir",
    "is_out_of_room",
    "os_error_words",
    "out_of_room",
    "room_reason",
    "temp_files_dir",
    "writable_cache_dir",
]
