"""nomic-embed-text-v1.5 on ONNX Runtime: ``dense[model=nomic-v1.5,backend=onnx-int8]`` (and ``onnx``).

The graph is exported once from the verified f16 GGUF (:mod:`ctxsel.scoring.nomic_torch`, torch and
``gguf`` needed then) into ctxsel's cache folder as MiniLM's is (:mod:`ctxsel.scoring.onnx_backend`:
``onnx/nomic-v1.5-<fingerprint>/``, written atomically, the fingerprint naming the GGUF's sha256 and
:data:`EXPORT_VERSION`); ``onnx-int8`` quantises its weights once with ``quantize_dynamic``, per
output channel, as MiniLM's (per-tensor scales lose more fidelity at the same speed), after smoothing. Running needs
onnxruntime, and llama-cpp-python for the tokenizer: the GGUF's own WordPiece vocabulary loaded
vocab-only, so the token ids are the llama route's by construction.

- Prefixes, Matryoshka ``dim`` and the cache keys work as on the llama route
  (:mod:`ctxsel.scoring.llama_embed`); the keys name the route (``nomic-v1.5|onnx-int8-v1``), so
  its vectors never mix with llama.cpp's.
- Window: the graph computes RoPE as trained (2,048 positions). A longer text (rare: a chunk of
  more than about 1,500 words) goes, alone, to the llama.cpp f16 route's YaRN-scaled 8,192-token
  context, exactly as that route reads it; so a 5,000-token chunk is read whole.
- int8 reads one text per run (the activation scale is per tensor, so a batched text's vector would
  depend on its neighbours), and by default as many texts side by side as it has threads, one
  thread each: on an idle machine that beats one text on all threads (benchmarks/nomic_routes.py
  measures both; ``texts_at_once=1`` is the other); fp32 reads length-sorted batches padded only
  to their longest text.
- int8 recipe (:data:`INT8_RECIPE`): the MLP down projection's input is smoothed first
  (:func:`smooth_down`, SmoothQuant) with scales from a shipped calibration (hotpotqa-long
  train-split paragraphs, benchmarks/nomic_calibrate.py), so that every weight MatMul can be int8
  without losing fidelity to f16.
- ``auto`` picks ``onnx-int8`` for nomic-v1.5 where the CPU has an 8-bit dot product
  (``onnx_backend.has_int8_dot``) and onnxruntime is installed, else ``onnx`` where onnxruntime is
  installed, else llama.cpp: the fastest route whose recall holds, measured by
  benchmarks/nomic_routes.py (results in benchmarks/results/nomic_routes.md).
- ``onnx-int8`` named on a CPU without an 8-bit dot product is refused
  (``onnx_backend.require_int8_dot``, :func:`refuse_int8_here`): there ONNX Runtime's int8 kernels add
  pairs of products in saturating 16-bit lanes, which the smoothed weights overflow, and every text
  got nearly the same vector (cosine 0.03-0.10 to f16). ``onnx`` is the route to use there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.errors import InputError, ModelError
from ctxsel.scoring.gguf_embedders import GGUFEmbedder, embedder_path, get_embedder
from ctxsel.scoring.llama_embed import (
    TRAINED_CTX,
    LlamaEmbedBackend,
    LlamaWindow,
    matryoshka,
    quiet_stderr,
    resolve_llama_backend,
)
from ctxsel.scoring.onnx_backend import (
    MAX_BATCH_TOKENS,
    OPSET,
    atomic_target,
    batches,
    build_export,
    cpu_session,
    default_threads,
    quantize_int8,
    quiet,
    require_onnxruntime,
)

EXPORT_VERSION = 1  # bump when the graph changes
#: The int8 recipe (in the int8 file's name and cache key): every weight MatMul int8 per output
#: channel, after smoothing the MLP down projection's input (:func:`smooth_down`), whose SwiGLU
#: product has outlier channels that one activation scale per tensor cannot hold unsmoothed.
INT8_RECIPE = "smooth-a0.75"
#: In ctxsel/data: the calibration, made on hotpotqa-long train-split paragraphs by
#: benchmarks/nomic_calibrate.py.
SMOOTH_AMAX_FILE = "nomic-v1.5-smooth-amax.npy"
#: SmoothQuant's migration strength: how much of the activation's range moves into the weights.
SMOOTH_ALPHA = 0.75
ONNX_BACKENDS = ("onnx", "onnx-int8")


def route_id(backend: str) -> str:
    """The backend's part of the vectors' id: ``onnx-v1`` / ``onnx-int8-v1-smooth-a0.75-<calibration hash>``."""
    return f"{backend}-v{EXPORT_VERSION}" + (f"-{int8_recipe()}" if backend == "onnx-int8" else "")


def file_name(quantize: bool) -> str:
    return f"model_int8_{int8_recipe()}.onnx" if quantize else "model.onnx"


def export_folder_name(gguf: GGUFEmbedder) -> str:
    fp = hashlib.sha256(json.dumps([gguf.sha256, EXPORT_VERSION, OPSET]).encode()).hexdigest()[:16]
    return f"{gguf.name}-{fp}"


def smooth_amax_path() -> Path:
    """The shipped calibration: per block, each down-projection input channel's largest |value|."""
    from importlib.resources import files

    return Path(str(files("ctxsel") / "data" / SMOOTH_AMAX_FILE))


@functools.cache
def int8_recipe() -> str:
    """:data:`INT8_RECIPE` and the calibration file's hash (in the int8 file's name and cache key)."""
    path = smooth_amax_path()
    if not path.is_file():
        raise ModelError(f"{path} is missing: reinstall ctxsel (the int8 nomic route is calibrated by it)")
    return f"{INT8_RECIPE}-{hashlib.sha256(path.read_bytes()).hexdigest()[:8]}"


def smooth_amax() -> np.ndarray:
    int8_recipe()  # the file is there
    return np.asarray(np.load(smooth_amax_path(), allow_pickle=False), dtype=np.float32)


def _mlp_pairs(model: Any) -> list[tuple[Any, Any]]:
    """Each block's (up, down) MatMul nodes; refuses a graph without them."""
    nodes = {n.name: n for n in model.graph.node if n.op_type == "MatMul"}
    pairs = [(nodes.get(name.replace("/down/", "/up/")), node) for name, node in nodes.items() if "/down/" in name]
    if not pairs or any(up is None for up, _ in pairs):
        raise ModelError("the graph has no MLP up/down projections to smooth: not this module's export")
    return pairs


def down_input_absmax(model: Any, token_ids: list[list[int]]) -> np.ndarray:
    """Per block, each channel's largest |value| at the down projection's input over the texts
    (fp32 graph, one text a run); ``model``'s outputs are left as they were."""
    import onnx

    ort = require_onnxruntime()
    names = [down.input[0] for _, down in _mlp_pairs(model)]
    outputs = list(model.graph.output)
    del model.graph.output[:]
    model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names)
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = default_threads()
        so.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    finally:
        del model.graph.output[:]
        model.graph.output.extend(outputs)
    amax: np.ndarray | None = None
    for ids in token_ids:
        batch = np.array([ids], dtype=np.int64)
        runs = session.run(names, {"input_ids": batch, "attention_mask": np.ones_like(batch)})
        now = np.stack([np.abs(r).reshape(-1, r.shape[-1]).max(0) for r in runs])
        amax = now if amax is None else np.maximum(amax, now)
    if amax is None:
        raise ModelError("no calibration text to smooth the int8 graph with")
    return amax


def smooth_down(model: Any, amax: np.ndarray, alpha: float = SMOOTH_ALPHA) -> np.ndarray:
    """SmoothQuant on each MLP, in place: the down projection's input ``silu(gate) * up`` is linear in
    the up projection's output, so channel j's scale ``s_j = amax_j^alpha / max|W_down[j]|^(1-alpha)``
    divides up's column j and multiplies down's row j, exact in real arithmetic, and the activation's
    outlier channels shrink before one scale per tensor quantises them. Returns the scales."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    pairs = _mlp_pairs(model)
    if amax.shape[0] != len(pairs):
        raise ModelError(f"the calibration has {amax.shape[0]} blocks, the graph {len(pairs)}: not this model's")
    scales = []
    for k, (up, down) in enumerate(pairs):
        w_up, w_down = (numpy_helper.to_array(inits[n.input[1]]) for n in (up, down))
        s = np.maximum(amax[k], 1e-5) ** alpha / np.maximum(np.abs(w_down).max(1), 1e-5) ** (1 - alpha)
        inits[down.input[1]].CopyFrom(numpy_helper.from_array((w_down * s[:, None]).astype(np.float32), down.input[1]))
        inits[up.input[1]].CopyFrom(numpy_helper.from_array((w_up / s[None, :]).astype(np.float32), up.input[1]))
        scales.append(s)
    return np.stack(scales)


def quantize_nomic(fp32: Path, dest: Path, amax: np.ndarray) -> Path:
    """int8 weights per output channel for every weight MatMul, the MLPs smoothed first with the
    calibration ``amax`` (:data:`INT8_RECIPE`); the smoothed fp32 graph is a temporary file."""
    import onnx

    model = onnx.load(str(fp32))
    smooth_down(model, amax)
    smoothed = atomic_target(dest.with_name(dest.stem + "-smoothed.onnx"))
    try:
        onnx.save(model, str(smoothed))
        del model
        return quantize_int8(smoothed, dest, op_types_to_quantize=["MatMul"])
    finally:
        smoothed.unlink(missing_ok=True)


def export_nomic(gguf_path: Path, dest: Path) -> Path:
    """Export the GGUF's model (token ids + mask -> mean-pooled states) to ``dest``, atomically."""
    from ctxsel.scoring.nomic_torch import load_module

    return export_module(load_module(gguf_path)[1], dest)


def export_module(module: Any, dest: Path) -> Path:
    """Export a :mod:`ctxsel.scoring.nomic_torch` module to ``dest``, atomically."""
    import torch

    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 2178, 102, 0, 0, 0]]) % module.tok.num_embeddings
    mask = (ids != 0).to(torch.long)
    tmp = atomic_target(dest)
    try:
        with quiet(), torch.no_grad():
            torch.onnx.export(
                module,
                (ids, mask),
                str(tmp),
                input_names=["input_ids", "attention_mask"],
                output_names=["pooled"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "seq"},
                    "attention_mask": {0: "batch", 1: "seq"},
                    "pooled": {0: "batch"},
                },
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def ensure_nomic_onnx(name: str, quantize: bool) -> Path:
    """The ONNX file of GGUF embedder ``name`` (fp32 or int8), exported / quantised first if missing."""
    gguf = get_embedder(name)
    if gguf is None:
        raise InputError(f"{name!r} is no GGUF embedder")
    wanted = file_name(quantize)

    def make(folder: Path) -> None:
        if (folder / wanted).is_file():
            return
        fp32 = folder / "model.onnx"
        if not fp32.is_file():
            export_nomic(embedder_path(name, "f16"), fp32)
        if quantize:
            quantize_nomic(fp32, folder / wanted, smooth_amax())

    about = "about a minute on 2 cores" if quantize else "about 30 s"
    return build_export(export_folder_name(gguf), wanted, make, about) / wanted


def refuse_int8_here(model: str) -> None:
    """The int8 route of GGUF embedder ``model`` on a CPU without an 8-bit dot product: refused, naming
    the CPU flag and ``onnx``, the backend to use instead."""
    from ctxsel.scoring.onnx_backend import require_int8_dot

    require_int8_dot(
        f"dense[model={model},backend=onnx-int8]",
        f"dense[model={model},backend=onnx] (float32, what backend=auto picks on this CPU)",
    )


def resolve_gguf_backend(name: str, model: str) -> str:
    """The concrete backend for a GGUF embedder: ``auto`` -> ``onnx-int8`` where the CPU has an
    8-bit dot product, else ``onnx``, when onnxruntime is installed; llama.cpp's otherwise.
    ``onnx-int8`` named on a CPU without that product is refused (:func:`refuse_int8_here`)."""
    if name == "onnx-int8":
        refuse_int8_here(model)
    if name == "auto":
        import importlib.util

        from ctxsel.scoring.onnx_backend import auto_int8

        if importlib.util.find_spec("onnxruntime") is not None:
            return "onnx-int8" if auto_int8() else "onnx"
        return resolve_llama_backend(name, model)
    if name in ONNX_BACKENDS:
        require_onnxruntime()
    return resolve_llama_backend(name, model, ONNX_BACKENDS)


class NomicOnnxBackend:
    """Texts -> unit vectors with a GGUF embedder's ONNX export (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        quantize: bool = True,
        dim: int | None = None,
        num_threads: int | None = None,
        opt_level: str = "all",
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        texts_at_once: int | None = None,
    ) -> None:
        gguf = get_embedder(name)
        if gguf is None:
            raise InputError(f"{name!r} is no GGUF embedder")
        if quantize:
            refuse_int8_here(name)
        require_onnxruntime()
        self.gguf: GGUFEmbedder = gguf
        self.name = "onnx-int8" if quantize else "onnx"
        self.one_text_per_run = quantize
        self.dim = dim
        self.max_batch_tokens = max_batch_tokens
        self.num_threads = num_threads or default_threads()
        # int8, one text a run: ``texts_at_once`` (default: one a thread) side by side, sharing the threads
        at_once = self.num_threads if texts_at_once is None else texts_at_once
        self.workers = max(1, min(at_once, self.num_threads)) if quantize else 1
        self.path = ensure_nomic_onnx(name, quantize)
        self._vocab = _vocab_only(embedder_path(name, "f16"))
        self.session = cpu_session(self.path, max(1, self.num_threads // self.workers), opt_level=opt_level)
        self._long: LlamaEmbedBackend | None = None
        self.model_window = LlamaWindow(self)  # type: ignore[arg-type]  # needs only gguf and tokenize

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """Token ids of ``text`` (the llama route's); ``special``: with [CLS] and [SEP]."""
        return list(self._vocab.tokenize(text.encode("utf-8", "replace"), add_bos=special))

    def _long_route(self) -> LlamaEmbedBackend:
        if self._long is None:
            self._long = LlamaEmbedBackend(self.gguf.name, "f16", num_threads=self.num_threads)
        return self._long

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim or self.gguf.dims[0]), dtype=np.float32)
        ids = [self.tokenize(t) for t in texts]
        pooled = np.zeros((len(texts), self.gguf.dims[0]), dtype=np.float32)
        long_idx = [i for i, t in enumerate(ids) if len(t) > TRAINED_CTX]
        if long_idx:  # past the trained positions: llama.cpp's RoPE-scaled context, one at a time
            pooled[long_idx] = self._long_route().encode([texts[i] for i in long_idx], batch_size=1)
        order = sorted((i for i, t in enumerate(ids) if len(t) <= TRAINED_CTX), key=lambda i: len(ids[i]))
        size = 1 if self.one_text_per_run else batch_size
        runs = list(batches([len(ids[i]) for i in order], order, size, self.max_batch_tokens))

        def run(idx: list[int]) -> np.ndarray:
            width = max(len(ids[i]) for i in idx)
            batch = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros_like(batch)
            for row, i in enumerate(idx):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            return np.asarray(self.session.run(["pooled"], {"input_ids": batch, "attention_mask": mask})[0])

        workers = min(self.workers, len(runs))
        if workers > 1:  # onnxruntime releases the GIL while it runs
            with ThreadPoolExecutor(workers) as pool:
                for idx, out in zip(runs, pool.map(run, runs)):
                    pooled[idx] = out
        else:
            for idx in runs:
                pooled[idx] = run(idx)
        # the long route's vectors are unit already: Matryoshka's layer norm and the L2 norm ignore scale
        return matryoshka(pooled, self.dim)


def _vocab_only(path: Path) -> Any:
    from llama_cpp import Llama

    with quiet_stderr():
        return Llama(str(path), vocab_only=True, verbose=False)


__all__ = [
    "EXPORT_VERSION",
    "INT8_RECIPE",
    "ONNX_BACKENDS",
    "NomicOnnxBackend",
    "down_input_absmax",
    "ensure_nomic_onnx",
    "export_module",
    "export_nomic",
    "int8_recipe",
    "quantize_nomic",
    "refuse_int8_here",
    "resolve_gguf_backend",
    "route_id",
    "smooth_amax",
    "smooth_amax_path",
    "smooth_down",
]
