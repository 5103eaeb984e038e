"""The dense scorer's llama.cpp backend, for the GGUF embedders of :mod:`ctxsel.scoring.gguf_embedders`.

``dense[model=nomic-v1.5]`` runs nomic-embed-text-v1.5 through llama-cpp-python's embedding mode
(mean pooling, as the GGUF's metadata says; the backend checks it) at f16 or at Q8_0
(``backend=llama-f16`` / ``llama-q8_0``; ``auto`` picks :data:`AUTO_QUANT` where onnxruntime is missing,
else the ONNX routes of :mod:`ctxsel.scoring.nomic_onnx`).

- Prefixes: nomic was trained with a task name before each text, ``search_query: `` for the
  question and ``search_document: `` for a chunk. The scorer's own ``query_prefix`` /
  ``document_prefix`` carry them (so they are part of every cache key), and :func:`once` drops a
  prefix the text already starts with, so a question written as ``search_query: ...`` is not
  prefixed twice.
- Window: the GGUF is trained at 2,048 positions and nomic reaches 8,192 by scaling RoPE. A text of
  at most 2,048 tokens is read as trained; a longer one goes, alone, to a second llama.cpp context of
  8,192 tokens with YaRN and a frequency scale of 0.75, the extension nomic's GGUF card gives for
  llama.cpp (the original model scales RoPE only past its trained length too, with dynamic NTK,
  which llama.cpp lacks). So a 5,000-token chunk is read whole; only a chunk past 8,190 text
  tokens is cut, and the scorer's ``long_chunks`` rule applies to it as to MiniLM's 256.
- Batches: short texts are packed into one llama.cpp batch up to ``batch_size`` texts and
  :data:`TOKEN_BUDGET` tokens (attention over a packed batch is computed over all its tokens, masked,
  so a small budget wastes little), texts sorted by length by the scorer.
- Matryoshka (``dim=512`` or ``256``): as nomic's model card does it, the pooled vector is
  layer-normalised (no scale or shift), cut to its first ``dim`` values, then L2-normalised. nomic
  trained the truncated vectors after that layer norm; at the full 768 the vector is only
  L2-normalised (the route that was measured), so ``dim=768`` equals leaving ``dim`` out.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.scoring.gguf_embedders import EMBEDDERS, GGUFEmbedder, embedder_path, get_embedder
from ctxsel.scoring.windows import WINDOW_OVERLAP, ModelWindow

#: The backend ``auto`` picks for a GGUF embedder (see benchmarks/embedding_throughput.py).
AUTO_QUANT = "f16"
LLAMA_BACKENDS = ("llama-f16", "llama-q8_0")
#: Most tokens packed into one llama.cpp batch of short texts.
TOKEN_BUDGET = 1024
#: The positions the GGUF was trained at; longer texts get the RoPE-scaled context.
TRAINED_CTX = 2048
_LONG_ROPE_FREQ_SCALE = 0.75


def once(prefix: str, text: str) -> str:
    """``prefix + text``, unless ``text`` already starts with ``prefix`` (then ``text``)."""
    return text if not prefix or text.startswith(prefix) else prefix + text


def gguf_options(
    model: str | None, backend: str, dim: int | None, query_prefix: str, document_prefix: str
) -> tuple[str, str]:
    """The prefixes a dense scorer over ``model`` uses, after checking ``dim`` (a prefix given by the
    caller wins; nomic's own are the default)."""
    gguf = get_embedder(model or "")
    if gguf is None:
        if dim is not None:
            raise InputError(f"dim= is for Matryoshka GGUF embedders ({', '.join(EMBEDDERS)}), not {model!r}")
        return query_prefix, document_prefix
    if dim is not None and dim not in gguf.dims:
        raise InputError(f"dim must be one of {', '.join(map(str, gguf.dims))} for {gguf.name}, got {dim!r}")
    return query_prefix or gguf.query_prefix, document_prefix or gguf.document_prefix


def resolve_llama_backend(name: str, model: str, others: tuple[str, ...] = ()) -> str:
    """The concrete llama backend for a GGUF embedder (``auto`` -> :data:`AUTO_QUANT`); ``others``:
    further backend names accepted as they are (the ONNX routes)."""
    if name == "auto":
        return f"llama-{AUTO_QUANT}"
    if name not in LLAMA_BACKENDS + others:
        raise InputError(f"{model}: backend must be auto, {', '.join(LLAMA_BACKENDS + others)}; got {name!r}")
    return name


def matryoshka(vecs: np.ndarray, dim: int | None) -> np.ndarray:
    """Pooled vectors -> unit vectors, cut to ``dim`` after a layer norm when ``dim`` is smaller."""
    v = np.asarray(vecs, dtype=np.float32)
    if dim is not None and dim < v.shape[1]:
        v = (v - v.mean(axis=1, keepdims=True)) / np.sqrt(v.var(axis=1, keepdims=True) + 1e-5)
        v = v[:, :dim]
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(v / np.where(norms > 0, norms, 1.0), dtype=np.float32)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """llama.cpp writes its load log to the C stderr; keep it out of a CLI's output."""
    try:
        fd = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)


class LlamaWindow(ModelWindow):
    """The window of a GGUF embedder, counted with its own tokenizer (WordPiece: a text's tokens are
    the sum of its words', so windows are cut between words)."""

    def __init__(self, backend: LlamaEmbedBackend) -> None:  # no super(): there is no HF tokenizer
        self.backend = backend
        self.max_seq_length = backend.gguf.n_ctx
        self.capacity = backend.gguf.n_ctx - 2  # [CLS] ... [SEP]

    def n_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self.backend.tokenize(t, special=False)) for t in texts]

    def windows(self, text: str) -> list[str]:
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        counts = self.n_tokens([text[a:b] for a, b in spans])
        size = max(1, self.capacity - 2)
        out: list[str] = []
        start = 0
        while start < len(spans):
            end, used = start, 0
            while end < len(spans) and (used + counts[end] <= size or end == start):
                used += counts[end]
                end += 1
            out.append(text[spans[start][0] : spans[end - 1][1]])
            if end >= len(spans):
                break
            back, kept = end, 0  # the next window starts WINDOW_OVERLAP of this one's tokens back
            while back - 1 > start and kept + counts[back - 1] <= used * WINDOW_OVERLAP:
                back -= 1
                kept += counts[back]
            start = back
        return out


class LlamaEmbedBackend:
    """Texts -> unit vectors with a GGUF embedder on llama.cpp (see the module docstring)."""

    def __init__(self, name: str, quant: str, *, dim: int | None = None, num_threads: int | None = None) -> None:
        gguf = get_embedder(name)
        if gguf is None:
            raise InputError(f"{name!r} is no GGUF embedder")
        try:
            import llama_cpp
        except ImportError as e:
            raise MissingExtraError(f"{name} runs on llama-cpp-python: {install_hint('local')}") from e
        self.gguf: GGUFEmbedder = gguf
        self.name = f"llama-{quant}"
        self.dim = dim
        self.path = embedder_path(name, quant)
        self.threads = num_threads or min(4, os.cpu_count() or 1)
        self._short = self._context(TRAINED_CTX)
        self._long: Any = None
        pooling = int(self._short.pooling_type())
        if pooling != llama_cpp.LLAMA_POOLING_TYPE_MEAN:
            raise InputError(f"{self.path.name} declares pooling type {pooling}, not mean: not the pinned model")
        self.model_window = LlamaWindow(self)

    def _context(self, n_ctx: int, **rope: Any) -> Any:
        from llama_cpp import Llama

        with quiet_stderr():
            return Llama(
                str(self.path),
                embedding=True,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                flash_attn=True,
                verbose=False,
                **rope,
            )

    def _long_context(self) -> Any:
        if self._long is None:
            import llama_cpp

            self._long = self._context(
                self.gguf.n_ctx,
                rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
                rope_freq_scale=_LONG_ROPE_FREQ_SCALE,
            )
        return self._long

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special``: with [CLS] and [SEP], as the model reads it."""
        return list(self._short.tokenize(text.encode("utf-8", "replace"), add_bos=special))

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim or self.gguf.dims[0]), dtype=np.float32)
        lengths = [len(self.tokenize(t)) for t in texts]
        pooled: list[Any] = [None] * len(texts)
        group: list[int] = []
        used = 0
        for i, n in enumerate(lengths):
            if n > TRAINED_CTX:  # alone, in the RoPE-scaled context (cut at its window by llama.cpp)
                pooled[i] = self._long_context().embed(texts[i], normalize=False, truncate=True)
                continue
            if group and (len(group) >= batch_size or used + n > TOKEN_BUDGET):
                self._embed_group(texts, group, pooled)
                group, used = [], 0
            group.append(i)
            used += n
        if group:
            self._embed_group(texts, group, pooled)
        return matryoshka(np.asarray(pooled, dtype=np.float32), self.dim)

    def _embed_group(self, texts: list[str], group: list[int], pooled: list[Any]) -> None:
        vecs = self._short.embed([texts[i] for i in group], normalize=False, truncate=True)
        for i, v in zip(group, vecs):
            pooled[i] = v


__all__ = [
    "AUTO_QUANT",
    "LLAMA_BACKENDS",
    "LlamaEmbedBackend",
    "LlamaWindow",
    "gguf_options",
    "matryoshka",
    "once",
    "quiet_stderr",
    "resolve_llama_backend",
]
