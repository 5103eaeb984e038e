"""nomic-v1.5's ONNX route without the 274 MB model: choosing the route, cache keys, the missing
extra, the torch graph on small random weights, and which texts go where.

tests/scoring/test_nomic_onnx_model.py runs the real model."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import numpy as np
import pytest

from ctxsel.errors import MissingExtraError, ModelError
from ctxsel.scoring import dense as dense_module
from ctxsel.scoring import get_scorer, onnx_backend
from ctxsel.scoring import gguf_embedders as ge
from ctxsel.scoring import nomic_onnx as no

NOMIC = ge.EMBEDDERS["nomic-v1.5"]


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a scorer checks only that the model could be assembled; nothing loads here."""
    monkeypatch.setattr(ge, "require_embedder", lambda name: ge.get_embedder(name or "") is not None)
    monkeypatch.setattr(dense_module, "require_embedder", lambda name: ge.get_embedder(name or "") is not None)


@pytest.fixture
def vnni(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU with an 8-bit dot product, where ``backend=onnx-int8`` may be named (the check is tested
    on both kinds of CPU in test_dense_backends.py)."""
    monkeypatch.setattr(onnx_backend, "has_int8_dot", lambda cpuinfo=None: True)


def _has_ort(monkeypatch: pytest.MonkeyPatch, present: bool) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: (None if not present else object()) if name == "onnxruntime" else real(name, *a, **k),
    )
    if not present:
        monkeypatch.setitem(sys.modules, "onnxruntime", None)


@pytest.mark.parametrize(
    ("ort", "vnni", "expected"),
    [(True, True, "onnx-int8"), (True, False, "onnx"), (False, True, "llama-f16"), (False, False, "llama-f16")],
)
def test_auto_picks_int8_onnx_on_vnni_else_fp32_onnx_else_llama(
    monkeypatch: pytest.MonkeyPatch, no_model: None, ort: bool, vnni: bool, expected: str
) -> None:
    _has_ort(monkeypatch, ort)
    monkeypatch.setattr(onnx_backend, "has_int8_dot", lambda cpuinfo=None: vnni)
    assert no.resolve_gguf_backend("auto", "nomic-v1.5") == expected
    assert get_scorer("dense[model=nomic-v1.5]").backend == expected  # type: ignore[attr-defined]


def test_every_route_and_dimension_has_its_own_cache_key(no_model: None, vnni: None) -> None:
    pytest.importorskip("onnxruntime")
    ids = [
        get_scorer(f"dense[model=nomic-v1.5,backend={b}{dim}]").model_id  # type: ignore[attr-defined]
        for b in ("llama-f16", "llama-q8_0", "onnx", "onnx-int8")
        for dim in ("", ",dim=256")
    ]
    assert len(set(ids)) == len(ids)
    assert f"nomic-v1.5|onnx-int8-v1-{no.int8_recipe()}" in ids and "nomic-v1.5|onnx-v1|dim=256" in ids


def test_the_onnx_routes_keep_nomics_prefixes(no_model: None, vnni: None) -> None:
    pytest.importorskip("onnxruntime")
    scorer = get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]")
    assert (scorer.query_prefix, scorer.document_prefix) == (NOMIC.query_prefix, NOMIC.document_prefix)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_a_missing_onnxruntime_is_a_one_line_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, no_model: None, backend: str, vnni: None
) -> None:
    _has_ort(monkeypatch, False)
    with pytest.raises(MissingExtraError, match=r"needs onnxruntime: pip install 'ctxsel\[onnx\]'"):
        get_scorer(f"dense[model=nomic-v1.5,backend={backend}]")


# -- the torch graph on small random weights ----------------------------------------------------------------


def _tiny() -> tuple[Any, dict[str, np.ndarray]]:
    from ctxsel.scoring.nomic_torch import NomicConfig

    cfg = NomicConfig(n_layer=2, n_embd=16, n_ff=24, n_head=2, eps=1e-12, rope_base=1000.0, n_ctx_train=64)
    rng = np.random.default_rng(0)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": rng.normal(size=(50, 16)),
        "token_types.weight": rng.normal(size=(2, 16)),
        "token_embd_norm.weight": 1 + 0.1 * rng.normal(size=16),
        "token_embd_norm.bias": 0.1 * rng.normal(size=16),
    }
    for i in range(2):
        t |= {
            f"blk.{i}.attn_qkv.weight": rng.normal(size=(48, 16)) / 4,
            f"blk.{i}.attn_output.weight": rng.normal(size=(16, 16)) / 4,
            f"blk.{i}.ffn_up.weight": rng.normal(size=(24, 16)) / 4,
            f"blk.{i}.ffn_gate.weight": rng.normal(size=(24, 16)) / 4,
            f"blk.{i}.ffn_down.weight": rng.normal(size=(16, 24)) / 5,
        }
        for norm in ("attn_output_norm", "layer_output_norm"):
            t |= {f"blk.{i}.{norm}.weight": np.ones(16), f"blk.{i}.{norm}.bias": np.zeros(16)}
    return cfg, {k: v.astype(np.float32) for k, v in t.items()}


def _reference(cfg: Any, t: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """The same model in plain numpy, one text, written from llama.cpp's nomic-bert graph."""

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg.eps) * t[f"{name}.weight"] + t[f"{name}.bias"]

    hd, n = cfg.n_embd // cfg.n_head, len(ids)
    theta = np.arange(n)[:, None] * cfg.rope_base ** (-np.arange(0, hd, 2) / hd)[None, :]

    def rope(x: np.ndarray) -> np.ndarray:  # x: [n, hd]; NeoX: dimension j pairs with j + hd/2
        a, b = x[:, : hd // 2], x[:, hd // 2 :]
        return np.concatenate([a * np.cos(theta) - b * np.sin(theta), b * np.cos(theta) + a * np.sin(theta)], 1)

    x = ln(t["token_embd.weight"][ids] + t["token_types.weight"][0], "token_embd_norm")
    for i in range(cfg.n_layer):
        q, k, v = np.split(x @ t[f"blk.{i}.attn_qkv.weight"].T, 3, axis=1)
        heads = []
        for h in range(cfg.n_head):
            s = slice(h * hd, (h + 1) * hd)
            att = rope(q[:, s]) @ rope(k[:, s]).T / np.sqrt(hd)
            att = np.exp(att - att.max(1, keepdims=True))
            heads.append(att / att.sum(1, keepdims=True) @ v[:, s])
        x = ln(x + np.concatenate(heads, 1) @ t[f"blk.{i}.attn_output.weight"].T, f"blk.{i}.attn_output_norm")
        gate = x @ t[f"blk.{i}.ffn_gate.weight"].T
        ff = (gate / (1 + np.exp(-gate)) * (x @ t[f"blk.{i}.ffn_up.weight"].T)) @ t[f"blk.{i}.ffn_down.weight"].T
        x = ln(x + ff, f"blk.{i}.layer_output_norm")
    return np.asarray(x.mean(0))


def test_the_torch_graph_is_llama_cpps_nomic_bert_and_padding_changes_nothing() -> None:
    torch = pytest.importorskip("torch")
    from ctxsel.scoring.nomic_torch import build_module

    cfg, tensors = _tiny()
    module = build_module(cfg, tensors)
    texts = [[1, 7, 9, 3, 2], [1, 4, 2]]
    ids = torch.tensor([texts[0], texts[1] + [0, 0]])
    with torch.no_grad():
        out = module(ids, (ids != 0).to(torch.long)).numpy()
    for row, t in zip(out, texts):
        np.testing.assert_allclose(row, _reference(cfg, tensors, t), rtol=1e-4, atol=1e-5)
    assert not np.allclose(out[0], out[1])


def test_a_gguf_of_another_architecture_is_refused(tmp_path: Any) -> None:
    gguf = pytest.importorskip("gguf")
    from ctxsel.scoring.nomic_torch import read_gguf

    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), "bert")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="'bert' model, not nomic-bert"):
        read_gguf(path)


# -- which texts go where --------------------------------------------------------------------------------


class _Session:
    def __init__(self) -> None:
        self.widths: list[tuple[int, int]] = []

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids, mask = feed["input_ids"], feed["attention_mask"]
        self.widths.append(ids.shape)
        return [np.stack([mask.sum(1), np.ones(len(ids)), *[np.zeros(len(ids))] * 766], 1).astype(np.float32)]


class _Long:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        self.seen.extend(texts)
        return np.tile(np.eye(768, dtype=np.float32)[2], (len(texts), 1))


def _backend(quantize: bool) -> Any:
    b: Any = object.__new__(no.NomicOnnxBackend)
    b.gguf, b.dim, b.one_text_per_run, b.max_batch_tokens = NOMIC, None, quantize, 1024
    b.session, b._long, b.workers = _Session(), _Long(), 1
    b.tokenize = lambda text, special=True: [0] * (len(text.split()) + 2)
    return b


@pytest.mark.parametrize("quantize", [True, False])
def test_long_texts_go_to_the_scaled_llama_context_and_int8_reads_one_text_a_run(quantize: bool) -> None:
    b = _backend(quantize)
    texts = ["a b c", " ".join(["w"] * 5000), "d e", "f g h i"]
    vecs = b.encode(texts, batch_size=8)
    assert b._long.seen == [texts[1]]  # the 5,000-token text is read whole, alone
    assert b.session.widths == ([(1, 4), (1, 5), (1, 6)] if quantize else [(3, 6)])
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    assert vecs[1, 2] == pytest.approx(1.0)  # the long text's vector, in its place
    assert vecs[0, 0] / vecs[0, 1] == pytest.approx(5.0)  # each text pooled over its own tokens only


def test_int8_reads_texts_side_by_side_each_in_its_place() -> None:
    b = _backend(True)
    b.workers = 2
    texts = ["a b c", "d e", "f g h i", "j"]
    vecs = b.encode(texts)
    assert sorted(b.session.widths) == [(1, 3), (1, 4), (1, 5), (1, 6)]
    # each vector is its own text's: the first coordinate over the second is its token count
    assert [round(float(v[0] / v[1])) for v in vecs] == [5, 4, 6, 3]


# -- smoothing the MLP before int8 ----------------------------------------------------------------------


def _tiny_onnx(tmp_path: Any) -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from ctxsel.scoring.nomic_torch import build_module

    cfg, tensors = _tiny()
    path = no.export_module(build_module(cfg, tensors), tmp_path / "tiny.onnx")
    return onnx.load(str(path)), tensors


def _pooled(model: Any, ids: list[int]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    batch = np.array([ids], dtype=np.int64)
    return np.asarray(session.run(["pooled"], {"input_ids": batch, "attention_mask": np.ones_like(batch)})[0])


def test_smoothing_moves_the_down_inputs_range_into_the_weights_and_changes_no_output(tmp_path: Any) -> None:
    from onnx import numpy_helper

    model, tensors = _tiny_onnx(tmp_path)
    texts = [[1, 7, 9, 3, 2], [1, 4, 2], [5, 6, 8, 10, 11, 12]]
    before = [_pooled(model, t) for t in texts]
    amax = no.down_input_absmax(model, texts)
    assert amax.shape == (2, 24) and (amax > 0).all()
    assert [o.name for o in model.graph.output] == ["pooled"]  # the calibration's outputs are gone again
    scales = no.smooth_down(model, amax, alpha=0.75)
    w_down = tensors["blk.1.ffn_down.weight"]  # [out, in]: input channel j is column j
    expected = amax[1] ** 0.75 / np.abs(w_down).max(0) ** 0.25
    np.testing.assert_allclose(scales[1], expected, rtol=1e-5)
    assert not np.allclose(scales, 1.0)
    for t, b in zip(texts, before):
        np.testing.assert_allclose(_pooled(model, t), b, rtol=1e-4, atol=1e-5)
    # the smoothed input: each channel's largest |value| is amax / s
    np.testing.assert_allclose(no.down_input_absmax(model, texts), amax / scales, rtol=1e-4)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert not any(np.allclose(w, w_down.T) for w in inits.values() if w.shape == w_down.T.shape)


def test_a_graph_without_the_mlp_projections_is_refused(tmp_path: Any) -> None:
    model, _ = _tiny_onnx(tmp_path)
    for node in model.graph.node:
        node.name = node.name.replace("/down/", "/other/")
    with pytest.raises(ModelError, match="no MLP up/down projections"):
        no.smooth_down(model, np.ones((2, 24)))


def test_a_calibration_for_another_depth_is_refused(tmp_path: Any) -> None:
    model, _ = _tiny_onnx(tmp_path)
    with pytest.raises(ModelError, match="calibration has 12 blocks, the graph 2"):
        no.smooth_down(model, no.smooth_amax())


def test_the_shipped_calibration_has_a_range_per_channel_and_names_the_recipe() -> None:
    import hashlib

    amax = no.smooth_amax()
    assert amax.shape == (12, 3072) and amax.dtype == np.float32 and (amax > 0).all()
    digest = hashlib.sha256(no.smooth_amax_path().read_bytes()).hexdigest()[:8]
    assert no.int8_recipe() == f"{no.INT8_RECIPE}-{digest}"
    assert no.route_id("onnx-int8").endswith(digest) and no.route_id("onnx") == "onnx-v1"


def test_a_build_says_so_once_with_how_long_it_takes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "cache"))
    made: list[str] = []

    def make(folder: Any) -> None:
        made.append(str(folder))
        if not (folder / "model.onnx").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "model.onnx").write_bytes(b"onnx")

    folder = onnx_backend.build_export("tiny-0123", "model.onnx", make, "about a minute on 2 cores")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "ctxsel: building model.onnx of tiny-0123 once for this machine (about a minute on 2 cores) ..."
    assert err[1].startswith(f"ctxsel: built {folder / 'model.onnx'} in ") and err[1].endswith(" s")
    onnx_backend.build_export("tiny-0123", "model.onnx", make)
    assert capsys.readouterr().err == "" and len(made) == 2  # built: the second call is silent
