"""A filesystem with no room left, for the full-disk tests (issue 68, items 5 and 7).

Two ways, each test runs both:

- ``tmpfs``: a real one, ``mount -t tmpfs -o size=1m`` (where this machine lets the test mount: root
  in a container that may), filled with a filler file up to ``room`` bytes free; every write in it
  meets the kernel's own ENOSPC, whoever writes (SQLite, torch's exporter, Python);
- ``simulated``: where no tmpfs can be mounted, the same fault at the storage boundary of one Python
  process (:func:`install`, or a ``sitecustomize`` for a subprocess: :meth:`FullFolder.env`): the
  writes that land under the folder (``os.write``, files opened for writing by ``open``, SQLite
  databases, whose ``max_page_count`` keeps them from growing) get ``room`` bytes in all and then fail
  with ENOSPC; ``shutil.disk_usage`` reports what is left. Creating an empty file still works, as on a
  real full disk.

Only the ``tmpfs`` variant is ever skipped (with the reason the mount failed), never a whole test.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
VARIANTS = ["tmpfs", "simulated"]
_ENV = "CTXSEL_TEST_NO_SPACE"  # FOLDER:ROOM, read by the sitecustomize below

SITECUSTOMIZE = f"""\
import os
if os.environ.get({_ENV!r}):
    import importlib.util
    _spec = importlib.util.spec_from_file_location("ctxsel_test_fullfs", {str(HERE)!r})
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _folder, _, _room = os.environ[{_ENV!r}].rpartition(":")
    _mod.install(_folder, int(_room))
"""


# -- the simulated fault --------------------------------------------------------------------------------------


def install(folder: str | os.PathLike[str], room: int) -> Callable[[], None]:
    """Give the writes under ``folder`` ``room`` bytes in all, in this process, then ENOSPC; returns the
    function that takes the fault away again."""
    root = os.path.abspath(os.fspath(folder))
    state = {"left": int(room)}
    real_write, real_open, real_connect, real_usage = os.write, builtins.open, sqlite3.connect, shutil.disk_usage

    def under(name: Any) -> bool:
        try:
            path = os.path.abspath(os.fsdecode(os.fspath(name)))
        except TypeError:  # a file descriptor, not a name
            return False
        return path == root or path.startswith(root + os.sep)

    def take(n: int, name: str) -> None:
        if n > state["left"]:
            state["left"] = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
        state["left"] -= n

    def write(fd: int, data: Any) -> int:
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if name and under(name):
            take(len(data), name)
        return real_write(fd, data)

    class Metered:
        """A file opened for writing under the folder: its writes spend the room."""

        def __init__(self, f: Any, name: str) -> None:
            self._f, self._name = f, name

        def write(self, data: Any) -> int:
            take(len(data.encode("utf-8") if isinstance(data, str) else data), self._name)
            return int(self._f.write(data))

        def writelines(self, lines: Any) -> None:
            for line in lines:
                self.write(line)

        def __enter__(self) -> Metered:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

        def __iter__(self) -> Iterator[Any]:
            return iter(self._f)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, int) and any(c in mode for c in "wax+") and under(file):
            return Metered(f, os.fsdecode(os.fspath(file)))
        return f

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        con = real_connect(database, *args, **kwargs)
        if isinstance(database, (str, os.PathLike)) and under(database):
            try:
                pages, size = (con.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
                con.execute(f"PRAGMA max_page_count={max(int(pages), 1) + state['left'] // int(size)}")
            except sqlite3.DatabaseError:  # not a database: SQLite's own checks say so later
                pass
        return con

    def disk_usage(path: Any) -> Any:
        usage = real_usage(path)
        if under(path):
            return type(usage)(usage.total, usage.total - state["left"], state["left"])
        return usage

    fakes = {(os, "write"): write, (builtins, "open"): open_, (io, "open"): open_}
    fakes.update({(sqlite3, "connect"): connect, (shutil, "disk_usage"): disk_usage})
    reals = {(module, name): getattr(module, name) for module, name in fakes}
    for (module, name), fake in fakes.items():
        setattr(module, name, fake)

    def uninstall() -> None:
        for (module, name), real in reals.items():
            setattr(module, name, real)

    return uninstall


# -- a real tmpfs ---------------------------------------------------------------------------------------------


def mount_tmpfs(where: Path, size: str = "1m") -> str:
    """Mount a tmpfs of ``size`` at ``where``; "" when that worked, else why not (the reason to skip)."""
    where.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        return "no mount command here"
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(where)], capture_output=True, text=True
    )
    if out.returncode != 0:
        return f"cannot mount a tmpfs here ({(out.stderr or out.stdout).strip() or out.returncode})"
    return ""


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path, leave: int) -> Path:
    """Write a filler file in ``folder`` until the filesystem is full, then give ``leave`` bytes back."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        block = bytes(64 * 1024)
        while True:
            try:
                f.write(block)
                f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        for size in (4096, 512, 1):  # the last pieces the big block did not fit
            while True:
                try:
                    f.write(bytes(size))
                    f.flush()
                except OSError:
                    break
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


# -- the fixture's object -------------------------------------------------------------------------------------


class FullFolder:
    """``folder`` on a filesystem with ``room`` bytes left, made the ``variant`` way."""

    def __init__(self, variant: str, base: Path, room: int) -> None:
        self.variant = variant
        self.room = room
        self.base = base
        self.folder = base / "full"
        self._filler: Path | None = None
        self._site = base / "fullfs-site"

    def start(self) -> str:
        """Make the fault ("" when it is made, else the reason the tmpfs cannot be had)."""
        if self.variant == "tmpfs":
            why = mount_tmpfs(self.folder)
            if why:
                return why
            self._filler = fill(self.folder, self.room)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._site.mkdir(exist_ok=True)
            (self._site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        return ""

    def stop(self) -> None:
        if self.variant == "tmpfs":
            umount(self.folder)

    def env(self) -> dict[str, str]:
        """What a subprocess needs in its environment to meet the fault (nothing for a real tmpfs)."""
        if self.variant == "tmpfs":
            return {}
        path = os.pathsep.join([str(self._site), *filter(None, [os.environ.get("PYTHONPATH")])])
        return {"PYTHONPATH": path, _ENV: f"{self.folder}:{self.room}"}

    @contextmanager
    def in_process(self) -> Iterator[None]:
        """The fault in this process for the time of the block (a real tmpfs needs nothing)."""
        if self.variant == "tmpfs":
            yield
            return
        uninstall = install(self.folder, self.room)
        try:
            yield
        finally:
            uninstall()

    def make_room(self) -> None:
        """Free the space again (a subprocess started afterwards without :meth:`env` has room too)."""
        if self._filler is not None:
            self._filler.unlink(missing_ok=True)
            self._filler = None


def full_folder(variant: str, base: Path, room: int = 0) -> Iterator[FullFolder]:
    """The body of a fixture: the fault made the ``variant`` way, taken away afterwards; the tmpfs
    variant is skipped, saying why, where no tmpfs can be mounted."""
    import pytest

    ff = FullFolder(variant, base, room)
    why = ff.start()
    if why:
        pytest.skip(f"{why}: the simulated variant of this test covers the same fault")
    try:
        yield ff
    finally:
        ff.stop()
