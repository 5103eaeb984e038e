"""The dense scorer's backend option, without loading a model: spec parsing, clear errors when
onnxruntime is missing, and cache keys that keep int8 vectors apart from fp32 ones."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel.scoring import get_scorer, parse_scorer_spec
from ctxsel.scoring.cache import EmbeddingCache
from ctxsel.scoring.dense import DEFAULT_MODEL, DenseScorer, resolve_backend, vector_id
from ctxsel.scoring.onnx_backend import INT8_ID
from tests.support.paths import EXAMPLE_MD

#: /proc/cpuinfo of an AMD EPYC with AVX2 and no VNNI (the flags the issue's machine had)
AVX2_ONLY = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 ssse3 sse4_2 avx avx2 fma f16c bmi2\n"


@pytest.fixture
def no_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import onnxruntime`` fail, as on a machine without the extra."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "onnxruntime" else real(name, *a, **k)
    )


@pytest.fixture
def fake_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """An importable onnxruntime stand-in (nothing here runs a session)."""
    monkeypatch.setitem(sys.modules, "onnxruntime", types.ModuleType("onnxruntime"))


class TestSpec:
    def test_plain_name(self) -> None:
        assert parse_scorer_spec("dense") == ("dense", {})

    def test_options(self) -> None:
        assert parse_scorer_spec("dense[backend=onnx]") == ("dense", {"backend": "onnx"})
        assert parse_scorer_spec(" dense[backend=onnx-int8, batch_size=64, show_progress=false] ") == (
            "dense",
            {"backend": "onnx-int8", "batch_size": 64, "show_progress": False},
        )

    @pytest.mark.parametrize("spec", ["dense[backend]", "dense[", "dense[[x=1]]", "", "dense x"])
    def test_bad_specs(self, spec: str) -> None:
        with pytest.raises(ValueError, match="scorer spec"):
            parse_scorer_spec(spec)

    def test_option_twice_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="backend given both"):
            get_scorer("dense[backend=onnx]", backend="torch")

    def test_get_scorer_passes_spec_options(self, fake_onnxruntime: None) -> None:
        sc = get_scorer("dense[backend=onnx-int8,batch_size=8,cache=false]", model="some/local/model")
        assert isinstance(sc, DenseScorer)
        assert (sc.backend, sc.batch_size, sc.cache) == ("onnx-int8", 8, None)
        assert sc._model is None  # nothing loaded yet

    def test_unknown_scorer_with_options(self) -> None:
        with pytest.raises(ValueError, match="unknown scorer 'tfidf'"):
            get_scorer("tfidf[k=1]")


class TestResolveBackend:
    def test_unknown_backend(self) -> None:
        with pytest.raises(ValueError, match=r"unknown dense backend 'tensorrt'; choose auto, torch, onnx, onnx-int8"):
            resolve_backend("tensorrt")

    def test_case_and_spaces(self) -> None:
        assert resolve_backend(" Torch ") == "torch"

    @pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
    def test_missing_onnxruntime_names_the_extra(self, no_onnxruntime: None, backend: str) -> None:
        with pytest.raises(ImportError, match=r"needs onnxruntime: pip install 'ctxsel\[onnx\]'.*backend='torch'"):
            resolve_backend(backend)
        with pytest.raises(ImportError, match=r"ctxsel\[onnx\]"):
            get_scorer(f"dense[backend={backend}]", model="some/local/model")

    def test_auto_falls_back_to_torch_without_onnxruntime(self, no_onnxruntime: None) -> None:
        assert resolve_backend("auto") == "torch"
        assert resolve_backend(None) == "torch"

    def test_auto_with_onnxruntime(self, fake_onnxruntime: None, monkeypatch: pytest.MonkeyPatch) -> None:
        import importlib.util

        from ctxsel.scoring import dense, onnx_backend

        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object())
        for vnni, expected in ((True, "onnx-int8"), (False, "onnx")):
            monkeypatch.setattr(onnx_backend, "has_int8_dot", lambda vnni=vnni: vnni)
            assert dense.default_backend() == expected
            assert resolve_backend("auto") == expected
            assert resolve_backend("auto", DEFAULT_MODEL) == expected
        monkeypatch.setattr(onnx_backend, "has_int8_dot", lambda: True)
        monkeypatch.setenv("CTXSEL_INT8", "off")  # float32 vectors, the same on every CPU
        assert resolve_backend("auto") == "onnx"
        assert resolve_backend("auto", "nomic-v1.5") == "onnx"
        # other models and other devices stay on torch: the ONNX path is measured for the bundled MiniLM
        assert resolve_backend("auto", "/models/e5-small") == "torch"
        assert resolve_backend("auto", None, device="cuda") == "torch"

    @pytest.mark.parametrize(
        ("cpuinfo", "expected"),
        [
            ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16\n", True),
            ("flags\t\t: fpu sse2 avx2 avx_vnni\n", True),
            ("flags\t\t: fpu sse2 avx2 fma avx512f avx512bw\n", False),  # AVX-512 without VNNI
            ("flags\t\t: avx512_vnnix\n", False),  # whole flags only
            ("processor\t: 0\nFeatures\t: fp asimd asimddp\n", False),  # no x86 flags line
            ("", False),
        ],
    )
    def test_int8_dot_is_read_from_the_cpu_flags(self, cpuinfo: str, expected: bool) -> None:
        from ctxsel.scoring.onnx_backend import has_int8_dot

        assert has_int8_dot(cpuinfo) is expected

    def test_named_nomic_int8_without_vnni_is_refused_on_every_surface(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_client: Any
    ) -> None:
        """On a CPU without an 8-bit dot product (the flags source, /proc/cpuinfo, says AVX2 only) the
        int8 nomic route gave every chunk nearly the same score; naming it is refused with the missing
        flag and the backend to use, in the same words on Python, the CLI and HTTP (the rerank option)."""
        import ctxsel
        from ctxsel.scoring import onnx_backend
        from ctxsel.service import ServiceSettings
        from tests.support.cli import run_cli

        monkeypatch.setattr(onnx_backend, "_proc_cpuinfo", lambda: AVX2_ONLY)
        spec = "dense[model=nomic-v1.5,backend=onnx-int8]"
        said = (
            f"{spec} needs a CPU with an 8-bit dot product (the CPU flag avx512_vnni or avx_vnni), and this CPU "
            "has neither: without it ONNX Runtime's int8 kernels add the products in saturating 16-bit lanes and "
            "this model's vectors come out wrong; use dense[model=nomic-v1.5,backend=onnx] (float32, what "
            "backend=auto picks on this CPU)"
        )
        with pytest.raises(ValueError) as python:
            ctxsel.select("How heavy is the meteorite?", ["The meteorite weighs 3 kg.", "Soup."], scorer=spec)
        assert str(python.value) == f"bad options for scorer 'dense': {said}"
        rc, _, err = run_cli(
            capsys, "select", "--document", str(EXAMPLE_MD), "--question", "How heavy?", "--scorer", spec
        )
        assert rc == 2 and err.strip() == f"ctxsel select: error: {python.value}", err
        client = service_client(ServiceSettings(scorer="keywords"))
        body = {"question": "How heavy?", "chunks": ["The meteorite weighs 3 kg.", "Soup."], "rerank": f"{spec}@2"}
        r = client.post("/select", json=body)
        assert r.status_code == 422 and r.json()["message"] == str(python.value), r.text
        # the auto rule picks fp32 there, and the MiniLM int8 route (within its tolerance there) still runs
        assert resolve_backend("auto", "nomic-v1.5") == "onnx"
        assert resolve_backend("onnx-int8") == "onnx-int8"

    def test_named_nomic_int8_with_vnni_is_accepted(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from ctxsel.scoring import onnx_backend

        monkeypatch.setattr(onnx_backend, "_proc_cpuinfo", lambda: "flags\t\t: fpu sse2 avx2 avx512_vnni\n")
        assert resolve_backend("onnx-int8", "nomic-v1.5") == "onnx-int8"

    def test_onnx_on_a_gpu_device_is_refused(self, fake_onnxruntime: None) -> None:
        from ctxsel.scoring.dense import load_backend

        with pytest.raises(ValueError, match="CPU only"):
            load_backend("onnx", "some/model", device="cuda")


class FakeBackend:
    """Deterministic vectors; int8 ones differ slightly, as the real int8 ones do."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for t in texts:
            v = np.random.default_rng(sum(t.encode())).normal(size=8).astype(np.float32)
            if self.name == "onnx-int8":
                v += 0.05
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)


def _scorer(backend: str, cache: Path) -> tuple[DenseScorer, FakeBackend]:
    sc = DenseScorer(model="fake-model", backend=backend, cache=EmbeddingCache(cache))
    fake = FakeBackend(backend)
    sc._model = fake
    return sc, fake


class TestCacheKeys:
    def test_vector_ids(self) -> None:
        assert vector_id(DEFAULT_MODEL, "torch") == DEFAULT_MODEL
        assert vector_id(DEFAULT_MODEL, "onnx") == DEFAULT_MODEL  # same vectors within ~1e-6: shared entries
        assert vector_id(DEFAULT_MODEL, "onnx-int8") == f"{DEFAULT_MODEL}|{INT8_ID}"

    def test_int8_entries_are_separate_and_fp32_ones_shared(self, fake_onnxruntime: None, tmp_path: Path) -> None:
        path = tmp_path / "emb.sqlite"
        texts = ["alpha beta", "gamma delta", "epsilon"]
        torch_sc, torch_be = _scorer("torch", path)
        ref = torch_sc.embed(texts)
        assert len(EmbeddingCache(path)) == 3

        onnx_sc, onnx_be = _scorer("onnx", path)
        assert onnx_sc.model_id == torch_sc.model_id == "fake-model"
        assert np.array_equal(onnx_sc.embed(texts), ref)
        assert onnx_be.calls == []  # served from torch's entries
        assert len(EmbeddingCache(path)) == 3

        int8_sc, int8_be = _scorer("onnx-int8", path)
        assert int8_sc.model_id == f"fake-model|{INT8_ID}"
        got = int8_sc.embed(texts)
        # every text encoded by the int8 backend, none read from the fp32 entries
        assert sorted(t for call in int8_be.calls for t in call) == sorted(texts)
        assert len(EmbeddingCache(path)) == 6
        assert not np.allclose(got, ref, atol=1e-3)
        # and back: torch still gets its own vectors, int8 its own, with no new encoding
        assert np.array_equal(_scorer("torch", path)[0].embed(texts), ref)
        again, again_be = _scorer("onnx-int8", path)
        assert np.array_equal(again.embed(texts), got) and again_be.calls == []
