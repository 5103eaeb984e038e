"""nomic-embed-text-v1.5 on ONNX Runtime: ``dense[model=nomic-v1.5,backend=onnx-int8]`` (and ``onnx``).

The graph is exported once from the verified f16 GGUF (:mod:`ctxsel.scoring.nomic_torch`, torch and
``gguf`` needed then) into ctxsel's cache folder as MiniLM's is (:mod:`ctxsel.scoring.onnx_backend`:
``onnx/nomic-v1.5-<fingerprint>/``, written atomically, the fingerprint naming the GGUF's sha256 and
:data:`EXPORT_VERSION`); ``onnx-int8`` quantises its weights once with ``quantize_dynamic``, per
output channel, as MiniLM's (per-tensor scales lose more fidelity at the same speed). Running needs
onnxruntime, and llama-cpp-python for the tokenizer: the GGUF's own WordPiece vocabulary loaded
vocab-only, so the token ids are the llama route's by construction.

- Prefixes, Matryoshka ``dim`` and the cache keys work as on the llama route
  (:mod:`ctxsel.scoring.llama_embed`); the keys name the route (``nomic-v1.5|onnx-int8-v1``), so
  its vectors never mix with llama.cpp's.
- Window: the graph computes RoPE as trained (2,048 positions). A longer text (rare: a chunk of
  more than about 1,500 words) goes, alone, to the llama.cpp f16 route's YaRN-scaled 8,192-token
  context, exactly as that route reads it; so a 5,000-token chunk is read whole.
- int8 reads one text per run (the activation scale is per tensor, so a batched text's vector would
  depend on its neighbours); fp32 reads length-sorted batches padded only to their longest text.
- ``auto`` picks ``onnx-int8`` for nomic-v1.5 where the CPU has an 8-bit dot product
  (``onnx_backend.has_int8_dot``) and onnxruntime is installed, else ``onnx`` where onnxruntime is
  installed, else llama.cpp: the fastest route whose recall holds, measured by
  benchmarks/nomic_routes.py (results in benchmarks/results/nomic_routes.md).
"""

from __future__ import annotations

import hashlib
import json
import os
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
    cached_export_dir,
    cpu_session,
    default_threads,
    quantize_int8,
    quiet,
    require_onnxruntime,
)

EXPORT_VERSION = 1  # bump when the graph changes
#: Which weights int8 quantises (in the int8 file's name and cache key): every MatMul but the MLP's
#: down projection, whose input (the SwiGLU product) has outliers that one activation scale per
#: tensor cannot hold.
INT8_RECIPE = "keep-down"
ONNX_BACKENDS = ("onnx", "onnx-int8")


def route_id(backend: str) -> str:
    """The backend's part of the vectors' id: ``onnx-v1`` / ``onnx-int8-v1-keep-down``."""
    return f"{backend}-v{EXPORT_VERSION}" + (f"-{INT8_RECIPE}" if backend == "onnx-int8" else "")


def file_name(quantize: bool) -> str:
    return f"model_int8_{INT8_RECIPE}.onnx" if quantize else "model.onnx"


def export_folder(gguf: GGUFEmbedder, quantize: bool) -> Path:
    fp = hashlib.sha256(json.dumps([gguf.sha256, EXPORT_VERSION, OPSET]).encode()).hexdigest()[:16]
    return cached_export_dir(f"{gguf.name}-{fp}", file_name(quantize))


def quantize_nomic(fp32: Path, dest: Path) -> Path:
    """int8 weights per output channel for the MatMuls but the down projections (:data:`INT8_RECIPE`)."""
    import onnx

    graph = onnx.load(str(fp32), load_external_data=False).graph
    down = [n.name for n in graph.node if n.op_type == "MatMul" and "/down/" in n.name]
    if not down:
        raise ModelError(f"{fp32} has no MLP down projection to keep in fp32: not this module's export")
    return quantize_int8(fp32, dest, op_types_to_quantize=["MatMul"], nodes_to_exclude=down)


def export_nomic(gguf_path: Path, dest: Path) -> Path:
    """Export the GGUF's model (token ids + mask -> mean-pooled states) to ``dest``, atomically."""
    import torch

    from ctxsel.scoring.nomic_torch import load_module

    _, module = load_module(gguf_path)
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 2178, 102, 0, 0, 0]])
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
    folder = export_folder(gguf, quantize)
    wanted = folder / file_name(quantize)
    if wanted.is_file():
        return wanted
    fp32 = folder / "model.onnx"
    if not fp32.is_file():
        export_nomic(embedder_path(name, "f16"), fp32)
    if quantize:
        quantize_nomic(fp32, wanted)
    return wanted


def resolve_gguf_backend(name: str, model: str) -> str:
    """The concrete backend for a GGUF embedder: ``auto`` -> ``onnx-int8`` where the CPU has an
    8-bit dot product, else ``onnx``, when onnxruntime is installed; llama.cpp's otherwise."""
    if name == "auto":
        import importlib.util

        from ctxsel.scoring.onnx_backend import has_int8_dot

        if importlib.util.find_spec("onnxruntime") is not None:
            return "onnx-int8" if has_int8_dot() else "onnx"
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
    ) -> None:
        gguf = get_embedder(name)
        if gguf is None:
            raise InputError(f"{name!r} is no GGUF embedder")
        require_onnxruntime()
        self.gguf: GGUFEmbedder = gguf
        self.name = "onnx-int8" if quantize else "onnx"
        self.one_text_per_run = quantize
        self.dim = dim
        self.max_batch_tokens = max_batch_tokens
        self.num_threads = num_threads or default_threads()
        self.path = ensure_nomic_onnx(name, quantize)
        self._vocab = _vocab_only(embedder_path(name, "f16"))
        self.session = cpu_session(self.path, self.num_threads, opt_level=opt_level)
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
        for idx in batches([len(ids[i]) for i in order], order, size, self.max_batch_tokens):
            width = max(len(ids[i]) for i in idx)
            batch = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros_like(batch)
            for row, i in enumerate(idx):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            pooled[idx] = self.session.run(["pooled"], {"input_ids": batch, "attention_mask": mask})[0]
        # the long route's vectors are unit already: Matryoshka's layer norm and the L2 norm ignore scale
        return matryoshka(pooled, self.dim)


def _vocab_only(path: Path) -> Any:
    from llama_cpp import Llama

    with quiet_stderr():
        return Llama(str(path), vocab_only=True, verbose=False)


__all__ = [
    "EXPORT_VERSION",
    "ONNX_BACKENDS",
    "NomicOnnxBackend",
    "ensure_nomic_onnx",
    "export_nomic",
    "resolve_gguf_backend",
    "route_id",
]
