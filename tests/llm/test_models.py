"""Assembling a local model from its PyPI part packages: order, hash check, atomic write, clear errors."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ctxsel.llm import models
from ctxsel.llm.models import MODELS, LocalModel, get_model, gguf_path


def _fake_parts(root: Path, pieces: list[bytes], prefix: str = "fakepart") -> tuple[str, ...]:
    """Part packages like the real ones: ``<prefix>N/data/partNN.bin``, importable from ``root``."""
    names = []
    for i, data in enumerate(pieces, start=1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        names.append(pkg.name)
    return tuple(names)


@pytest.fixture
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pieces = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]
    whole = b"".join(pieces)
    root = tmp_path / "site"
    names = _fake_parts(root, pieces)
    monkeypatch.syspath_prepend(str(root))
    model = LocalModel(
        name="fake",
        title="Fake 1B",
        file_name="fake.gguf",
        part_modules=names,
        pip="fake-parts",
        sha256=hashlib.sha256(whole).hexdigest(),
        size=len(whole),
        chat=True,
        n_ctx_train=4096,
        license="none",
    )
    monkeypatch.setitem(MODELS, "fake", model)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "cache"))
    return model, whole


def test_parts_are_joined_in_order_verified_and_stamped(fake_model) -> None:
    model, whole = fake_model
    path = gguf_path("fake")
    assert path == Path(sys.modules["os"].environ["CTXSEL_CACHE_DIR"]) / "models" / "fake.gguf"
    assert path.read_bytes() == whole
    assert path.with_name("fake.gguf.sha256").read_text() == model.sha256
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left behind
    mtime = path.stat().st_mtime_ns
    assert gguf_path("fake") == path and path.stat().st_mtime_ns == mtime  # verified once, not rewritten


def test_a_changed_part_is_an_error_and_leaves_no_file(fake_model, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = fake_model
    monkeypatch.setitem(MODELS, "fake", replace(model, sha256="0" * 64))
    with pytest.raises(OSError, match="is not the pinned file.*reinstall fake-parts"):
        gguf_path("fake")
    cache = Path(sys.modules["os"].environ["CTXSEL_CACHE_DIR"]) / "models"
    assert not (cache / "fake.gguf").exists() and not list(cache.glob(".*.tmp"))


def test_a_missing_part_package_says_what_to_install(fake_model, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = fake_model
    monkeypatch.setitem(MODELS, "fake", replace(model, part_modules=(*model.part_modules, "no_such_part_pkg")))
    assert not MODELS["fake"].installed()
    with pytest.raises(ImportError, match=r'not installed \(fake-parts\): pip install "ctxsel\[local\]"'):
        gguf_path("fake")


def test_a_stamped_file_in_the_cache_needs_no_part_packages(fake_model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that cannot install the parts (a GPU box without a registry) gets the assembled file
    copied into its cache; the pinned stamp, not the packages, vouches for it."""
    model, whole = fake_model
    path = gguf_path("fake")
    monkeypatch.setitem(MODELS, "fake", replace(model, part_modules=("no_such_part_pkg",)))
    assert gguf_path("fake") == path and path.read_bytes() == whole
    path.with_name("fake.gguf.sha256").write_text("0" * 64)  # a stamp of another file: assemble again
    with pytest.raises(ImportError, match=r'not installed \(fake-parts\): pip install "ctxsel\[local\]"'):
        gguf_path("fake")


@pytest.mark.parametrize("how", ["cache folder under a file", "HOME unset, no passwd entry"])
def test_without_a_writable_cache_the_model_is_assembled_in_the_temporary_folder(
    how: str, fake_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing needs a writable home (docs/reliability.md H8): assembled into this user's private
    temporary folder, with the same hash check and atomic rename, and reused by the next call."""
    import logging
    import os
    import pwd
    import stat
    import tempfile

    from ctxsel import paths

    model, whole = fake_model
    if how == "cache folder under a file":
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    else:
        monkeypatch.delenv("CTXSEL_CACHE_DIR")
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        monkeypatch.delenv("HOME", raising=False)

        def no_entry(uid: int) -> pwd.struct_passwd:
            raise KeyError(uid)

        monkeypatch.setattr(pwd, "getpwuid", no_entry)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    paths._forget()
    try:
        with caplog.at_level(logging.WARNING, logger="ctxsel"):
            path = gguf_path("fake")
            mtime = path.stat().st_mtime_ns
            assert gguf_path("fake") == path and path.stat().st_mtime_ns == mtime  # verified once, reused
        root = tmp_path / "tmp" / f"ctxsel-{os.getuid()}"
        assert path == root / "models" / "fake.gguf" and path.read_bytes() == whole
        assert path.with_name("fake.gguf.sha256").read_text() == model.sha256
        assert stat.S_IMODE(root.stat().st_mode) == 0o700 and not list(path.parent.glob(".*.tmp"))
        assert [r.name for r in caplog.records] == ["ctxsel.cache"]  # the one warning
        monkeypatch.setitem(MODELS, "fake", replace(model, sha256="0" * 64))  # the hash is still checked
        with pytest.raises(OSError, match="is not the pinned file"):
            gguf_path("fake")
    finally:
        paths._forget()


def test_unknown_model_names_list_the_choices() -> None:
    with pytest.raises(ValueError, match="qwen-1.5b, qwen-0.5b, gemma-270m"):
        get_model("llama-70b")


def test_registry_pins_hashes_and_windows() -> None:
    for name in ("qwen-1.5b", "qwen-0.5b"):
        m = get_model(name)
        assert len(m.sha256) == 64 and m.size > 400_000_000 and m.chat and m.n_ctx_train == 32768
        assert "Apache-2.0" in m.license
    assert not get_model("gemma-270m").chat
    assert models.DEFAULT_LOCAL_MODEL in MODELS
