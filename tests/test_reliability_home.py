"""Nothing needs a writable home (issue 42, item 5): with the cache folder unwritable, HOME pointing to a
missing folder, or HOME unset and no password entry, every surface still selects (the same chunks),
with one warning; the caches stay in memory and files that must be on disk go to a private temporary
folder. docs/reliability.md lists the cases (H1, H2...).

The tests run as root in CI, where chmod does not stop a write: an unwritable folder here is one under
a regular FILE (it can never be created, whoever asks) or under /proc. "No password entry" is made by a
``sitecustomize`` that makes ``pwd.getpwuid`` fail (for subprocesses), or by monkeypatching it.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel import paths
from ctxsel.errors import NoCacheDir
from ctxsel.llm.base import Completion
from ctxsel.llm.cache import ResponseCache
from ctxsel.scoring.cache import EmbeddingCache
from tests.support import fullfs
from tests.support.cli import ctxsel_command
from tests.support.paths import EXAMPLE_MD
from tests.support.reliability import CHUNKS, EXPECTED_TOP2, QUESTION, example_chunks, fake_dense

WARNING = "ctxsel cannot"  # the start of paths' one warning

NO_PASSWD = (
    "import pwd\n"
    "def _no_entry(uid):\n"
    "    raise KeyError(f'getpwuid(): uid not found: {uid}')\n"
    "pwd.getpwuid = _no_entry\n"
)


@pytest.fixture(autouse=True)
def _fresh_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test checks the folders afresh and has its own temporary folder (TMPDIR for subprocesses)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    paths._forget()
    yield tmp
    paths._forget()


def _under_a_file(tmp_path: Path) -> str:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return str(blocker / "cache")


def _no_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str) -> dict[str, str]:
    """Make the cache folder unusable as ``how`` says, in this process; returns what a subprocess needs
    beyond the environment (PYTHONPATH with the sitecustomize for "no passwd entry")."""
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    if how == "cache folder under a file":
        monkeypatch.setenv("CTXSEL_CACHE_DIR", _under_a_file(tmp_path))
        return {}
    monkeypatch.delenv("CTXSEL_CACHE_DIR", raising=False)
    if how == "cache folder in /proc":
        monkeypatch.setenv("CTXSEL_CACHE_DIR", "/proc/ctxsel-cache")
        return {}
    if how == "HOME missing":
        monkeypatch.setenv("HOME", str(tmp_path / "no-such-home"))
        return {}
    assert how == "HOME unset, no passwd entry"
    monkeypatch.delenv("HOME", raising=False)
    import pwd

    def no_entry(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_PASSWD)
    return {"PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}


HOWS = ["cache folder under a file", "cache folder in /proc", "HOME missing", "HOME unset, no passwd entry"]


def _ctxsel_warnings(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name.startswith("ctxsel") and r.levelno >= logging.WARNING]


# -- the helper: one answer, one warning ------------------------------------------------------------


@pytest.mark.parametrize("how", HOWS)
def test_an_unusable_cache_folder_is_one_warning_naming_why_and_the_variable(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    if how == "cache folder in /proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    _no_home(monkeypatch, tmp_path, how)
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        for _ in range(3):
            assert paths.writable_cache_dir() is None
            assert paths.writable_cache_dir("onnx") is None
    warnings = _ctxsel_warnings(caplog.records)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(WARNING) and "CTXSEL_CACHE_DIR" in warnings[0] and "\n" not in warnings[0]
    expected = {
        "cache folder under a file": "Not a directory",
        "cache folder in /proc": "/proc/ctxsel-cache",
        "HOME missing": "the home folder",
        "HOME unset, no passwd entry": "HOME is not set",
    }[how]
    assert expected in warnings[0], warnings[0]
    assert not (tmp_path / "no-such-home").exists()  # a missing home is never created


def test_chmod_0500_is_unwritable_for_a_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through chmod 0500 (the other cases make a folder unwritable for root too)")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(folder))
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        assert paths.writable_cache_dir() is None
    assert "Permission denied" in _ctxsel_warnings(caplog.records)[0]


def test_a_writable_cache_folder_is_used_without_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "new" / "cache"))
    assert paths.writable_cache_dir("onnx") == tmp_path / "new" / "cache" / "onnx"
    assert paths.files_dir("models") == tmp_path / "new" / "cache" / "models"
    assert not list((tmp_path / "new" / "cache").glob(".ctxsel-write-test-*"))  # the probe leaves nothing


def test_files_go_to_a_private_folder_of_this_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_paths: Path
) -> None:
    monkeypatch.setenv("CTXSEL_CACHE_DIR", _under_a_file(tmp_path))
    folder = paths.files_dir("onnx")
    root = _fresh_paths / f"ctxsel-{os.getuid()}"
    assert folder == root / "onnx" and folder.is_dir()
    st = root.stat()
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


@pytest.mark.parametrize("planted", ["open to everyone", "a symlink"])
def test_a_temporary_folder_someone_else_could_write_is_not_used(
    planted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_paths: Path
) -> None:
    """Another user could put a model of their own into a shared name: a private folder is used instead."""
    name = _fresh_paths / f"ctxsel-{os.getuid()}"
    if planted == "a symlink":
        (tmp_path / "elsewhere").mkdir()
        name.symlink_to(tmp_path / "elsewhere")
    else:
        name.mkdir()
        name.chmod(0o777)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", _under_a_file(tmp_path))
    folder = paths.files_dir("models")
    assert folder.parent != name and folder.parent.parent == _fresh_paths
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    assert not (tmp_path / "elsewhere" / "models").exists()


def test_no_passwd_entry_is_an_oserror_naming_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_home(monkeypatch, tmp_path, "HOME unset, no passwd entry")
    with pytest.raises(NoCacheDir, match="HOME is not set"):
        paths.default_cache_dir()
    assert paths.find_cached("onnx", "x") is None


def test_ctxsel_env_says_where_the_cache_is_and_that_it_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from ctxsel.cli.main import main

    _no_home(monkeypatch, tmp_path, "HOME unset, no passwd entry")
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cache_dir"] is None and info["cache_dir_writable"] is False
    paths._forget()
    assert main(["env"]) == 0
    assert "cache: none (HOME is not set): caches stay in memory" in capsys.readouterr().out


# -- the caches keep working in memory --------------------------------------------------------------


@pytest.mark.parametrize("how", ["cache folder under a file", "HOME unset, no passwd entry"])
def test_the_caches_work_in_memory_after_one_warning(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    _no_home(monkeypatch, tmp_path, how)
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        emb = EmbeddingCache()
        llm = ResponseCache()
        sc = fake_dense(True)
        scores = sc.score(QUESTION, CHUNKS)
        again = sc.score(QUESTION, CHUNKS)
    assert len(_ctxsel_warnings(caplog.records)) == 1, _ctxsel_warnings(caplog.records)
    assert not emb.usable and str(emb.path) == ":memory:"
    # the dense scorer keeps its vectors in memory: the same scores, each text embedded once
    assert np.array_equal(scores, fake_dense(False).score(QUESTION, CHUNKS)) and np.array_equal(scores, again)
    assert len(sc.model.texts) == len(CHUNKS) + 1
    # the LLM response cache is an in-memory SQLite database with the same queries
    assert str(llm.path) == ":memory:"
    llm.put("k", Completion(text="Paris", model="m"))
    hit = llm.get("k")
    assert hit is not None and hit.text == "Paris" and hit.cached
    assert "k" in llm and len(llm) == 1 and llm.keys() == ["k"]
    copy = pickle.loads(pickle.dumps(llm))  # another process's copy starts empty
    assert len(copy) == 0 and copy.get("k") is None
    llm.clear()
    assert len(llm) == 0


def test_a_response_cache_file_that_cannot_be_opened_is_memory_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The folder is writable but the default file is not a database SQLite can open (a folder here)."""
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "llm_responses.sqlite").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        llm = ResponseCache()
    assert str(llm.path) == ":memory:"
    assert any("replies are cached in memory" in m for m in _ctxsel_warnings(caplog.records))
    llm.put("k", Completion(text="x", model="m"))
    assert llm.get("k") is not None
    with pytest.raises(sqlite3.Error, match="cannot open the LLM response cache"):  # a path the caller names
        ResponseCache(tmp_path / "cache" / "llm_responses.sqlite")


# -- files that must be on disk: the ONNX export and the local models --------------------------------


def _model_folder(root: Path) -> Path:
    folder = root / "tiny-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_the_onnx_export_goes_to_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_paths: Path
) -> None:
    from ctxsel.scoring.onnx_backend import export_dir, export_name

    model = _model_folder(tmp_path)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", _under_a_file(tmp_path))
    assert export_dir(model) == _fresh_paths / f"ctxsel-{os.getuid()}" / "onnx" / export_name(model)


def test_an_export_already_in_a_read_only_cache_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_paths: Path
) -> None:
    """A cache folder filled ahead of time (a container image) and mounted read-only: its export is
    read; one without the int8 file gets that from the temporary folder."""
    from ctxsel.scoring import onnx_backend
    from ctxsel.scoring.onnx_backend import export_dir, export_name

    model = _model_folder(tmp_path)
    cache = tmp_path / "image-cache"
    ready = cache / "onnx" / export_name(model)
    ready.mkdir(parents=True)
    (ready / "model.onnx").write_bytes(b"onnx")
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(cache))
    monkeypatch.setattr(onnx_backend, "writable_cache_dir", lambda sub="": None)  # as a read-only mount is
    assert export_dir(model) == ready
    assert export_dir(model, quantize=True) == _fresh_paths / f"ctxsel-{os.getuid()}" / "onnx" / export_name(model)


# -- the three surfaces with the real model ----------------------------------------------------------


def _cli_select(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra_env}
    args = [
        "select",
        "--document",
        str(EXAMPLE_MD),
        "--question",
        QUESTION,
        "--method",
        "top-k@2",
        "--scorer",
        "dense",
        "--json",
    ]
    return subprocess.run([*ctxsel_command(), *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def writable_reference() -> list[tuple[str, float]]:
    """``ctxsel select``'s chunks and scores with the session's (writable) cache folder."""
    out = _cli_select({})
    assert out.returncode == 0, out.stderr
    assert WARNING not in out.stderr
    return [(c["id"], c["score"]) for c in json.loads(out.stdout)["chunks"]]


@pytest.fixture(scope="module")
def _one_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temporary folder for the real-model tests: the first exports the ONNX model into it (the fault
    the issue met), the others reuse that export, as later processes of a user do."""
    return tmp_path_factory.mktemp("shared-tmp")


@pytest.fixture
def shared_tmp(_one_export: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(_one_export))
    monkeypatch.setenv("TMPDIR", str(_one_export))
    return _one_export


def _same(got: list[tuple[str, float]], reference: list[tuple[str, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in reference] == EXPECTED_TOP2
    assert np.allclose([s for _, s in got], [s for _, s in reference], atol=1e-5)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("how", ["cache folder under a file", "HOME unset, no passwd entry"])
def test_cli_select_without_a_writable_home(
    how: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writable_reference: list[tuple[str, float]],
    shared_tmp: Path,
) -> None:
    extra = _no_home(monkeypatch, tmp_path, how)
    out = _cli_select(extra)
    assert out.returncode == 0, out.stderr
    _same([(c["id"], c["score"]) for c in json.loads(out.stdout)["chunks"]], writable_reference)
    lines = _without_build_lines(out.stderr)
    assert len(lines) == 1 and lines[0].startswith(WARNING) and "CTXSEL_CACHE_DIR" in lines[0], out.stderr
    # the ONNX export went to this user's temporary folder
    assert list((shared_tmp / f"ctxsel-{os.getuid()}" / "onnx").glob("*/model.onnx"))


@pytest.mark.model
@pytest.mark.parametrize("how", ["cache folder under a file", "HOME unset, no passwd entry"])
def test_python_select_without_a_writable_home(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any, writable_reference: Any, shared_tmp: Path
) -> None:
    import ctxsel

    _no_home(monkeypatch, tmp_path, how)
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        sel = ctxsel.select(QUESTION, example_chunks(), "top-k@2", scorer="dense")
    scores = [s for s in sel.scores if s is not None]
    assert len(scores) == len(sel.ids)
    _same(list(zip(sel.ids, scores)), writable_reference)
    warnings = _ctxsel_warnings(caplog.records)
    assert len(warnings) == 1 and warnings[0].startswith(WARNING), warnings


@pytest.mark.model
def test_service_in_process_without_a_writable_cache(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    service_client: Callable[..., Any],
    caplog: Any,
    shared_tmp: Path,
) -> None:
    from ctxsel.service import ServiceSettings

    _no_home(monkeypatch, tmp_path, "cache folder under a file")
    with caplog.at_level(logging.WARNING, logger="ctxsel"):
        client = service_client(ServiceSettings(scorer="dense", threads=1))
        assert client.get("/health").status_code == 200
        body = {"question": QUESTION, "chunks": [c.text for c in example_chunks()], "method": "top-k@2"}
        r = client.post("/select", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["ids"] == EXPECTED_TOP2
    assert sum(m.startswith(WARNING) for m in _ctxsel_warnings(caplog.records)) == 1


@pytest.mark.model
@pytest.mark.slow
def test_ctxsel_serve_with_a_missing_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_tmp: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from tests.support.server_process import ServerProcess

    _no_home(monkeypatch, tmp_path, "HOME missing")  # the server inherits this process's environment
    body = {"question": QUESTION, "chunks": [c.text for c in example_chunks()], "method": "top-k@2"}
    with ServerProcess(["--scorer", "dense", "--threads", "1"], token=None, start_timeout=240) as srv:
        status, _, sel = srv.request("POST", "/select", body, timeout=240)
        lines = srv.log_lines()
    assert status == 200, sel
    assert sel["ids"] == EXPECTED_TOP2
    warnings = [x for x in lines if x.get("level") == "warning"]
    assert len(warnings) == 1 and warnings[0]["logger"] == "ctxsel.cache", warnings
    assert warnings[0]["event"].startswith(WARNING) and "CTXSEL_CACHE_DIR" in warnings[0]["event"]
    assert not any("Traceback" in json.dumps(x) for x in lines)


# -- issue 68, item 5: the cache folder on a full disk -----------------------------------------------------------
# A real tmpfs where this machine lets the test mount one, else (and always, too) the same fault simulated at
# the storage boundary (tests/support/fullfs.py). "full": not a byte left, so the first write (paths' probe)
# fails; "nearly full": 256 KiB left, so the caches open and the ONNX export (about 90 MB) fails part way.

FULL_CASES = [(v, room) for v in fullfs.VARIANTS for room in ("full", "nearly full")]


@pytest.fixture(params=FULL_CASES, ids=[f"{v}-{room}" for v, room in FULL_CASES])
def full_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[fullfs.FullFolder]:
    variant, room = request.param
    yield from fullfs.full_folder(variant, tmp_path, room=0 if room == "full" else 256 * 1024)


def _without_build_lines(stderr: str) -> list[str]:
    """stderr's lines without the two that a first build of the ONNX model prints (checked here: both, in
    order, or none)."""
    lines = [x for x in stderr.splitlines() if x.strip()]
    build = [x for x in lines if x.startswith("ctxsel: buil")]
    assert build == [] or (
        len(build) == 2 and build[0].startswith("ctxsel: building ") and build[1].startswith("ctxsel: built ")
    ), build
    return [x for x in lines if x not in build]


def _one_full_warning(lines: list[str], folder: Path) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{WARNING} write its cache folder {folder} (disk full"), lines[0]
    assert " free there" in lines[0] and "CTXSEL_CACHE_DIR" in lines[0] and "\n" not in lines[0]


@pytest.mark.model
@pytest.mark.slow
def test_cli_select_with_the_cache_on_a_full_disk(
    full_cache: fullfs.FullFolder, writable_reference: list[tuple[str, float]], shared_tmp: Path
) -> None:
    """Was: exit 2 with "[Errno 28] No space left on device" (the ONNX export did not fall back)."""
    folder = full_cache.folder / "cache"
    out = _cli_select({"CTXSEL_CACHE_DIR": str(folder), **full_cache.env()})
    assert out.returncode == 0, out.stderr
    _same([(c["id"], c["score"]) for c in json.loads(out.stdout)["chunks"]], writable_reference)
    _one_full_warning(_without_build_lines(out.stderr), folder)
    assert list((shared_tmp / f"ctxsel-{os.getuid()}" / "onnx").glob("*/model.onnx"))
    assert not list(folder.rglob("*.tmp"))  # nothing half-written left in the full folder


@pytest.mark.model
@pytest.mark.parametrize("variant", fullfs.VARIANTS)
def test_python_select_with_the_cache_on_a_full_disk(
    variant: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: Any,
    writable_reference: list[tuple[str, float]],
    shared_tmp: Path,
) -> None:
    import ctxsel

    for ff in fullfs.full_folder(variant, tmp_path, room=0):
        folder = ff.folder / "cache"
        monkeypatch.setenv("CTXSEL_CACHE_DIR", str(folder))
        with ff.in_process(), caplog.at_level(logging.WARNING, logger="ctxsel"):
            sel = ctxsel.select(QUESTION, example_chunks(), "top-k@2", scorer="dense")
        scores = [s for s in sel.scores if s is not None]
        _same(list(zip(sel.ids, scores)), writable_reference)
        _one_full_warning(_ctxsel_warnings(caplog.records), folder)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("variant", fullfs.VARIANTS)
def test_ctxsel_serve_with_the_cache_on_a_full_disk(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_tmp: Path
) -> None:
    """Was: `serve` exited 2 advising "check --scorer and --model"."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from tests.support.server_process import ServerProcess

    for ff in fullfs.full_folder(variant, tmp_path, room=0):
        folder = ff.folder / "cache"
        monkeypatch.setenv("CTXSEL_CACHE_DIR", str(folder))  # the server inherits this process's environment
        for key, value in ff.env().items():
            monkeypatch.setenv(key, value)
        body = {"question": QUESTION, "chunks": [c.text for c in example_chunks()], "method": "top-k@2"}
        with ServerProcess(["--scorer", "dense", "--threads", "1"], token=None, start_timeout=240) as srv:
            status, _, sel = srv.request("POST", "/select", body, timeout=240)
            lines = srv.log_lines()
        assert status == 200, sel
        assert sel["ids"] == EXPECTED_TOP2
        warnings = [x for x in lines if x.get("level") == "warning"]
        assert len(warnings) == 1 and warnings[0]["logger"] == "ctxsel.cache", warnings
        _one_full_warning([warnings[0]["event"]], folder)
        assert not any("Traceback" in json.dumps(x) for x in lines)
