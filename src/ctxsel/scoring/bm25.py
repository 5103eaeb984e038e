"""BM25 relevance with bm25s (numpy only). The index over a chunk set is
kept for the next question on the same chunks (one pool, many questions)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.inputs import as_float
from ctxsel.types import Chunk


class BM25Scorer:
    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: str | None = "en") -> None:
        try:
            import bm25s
        except ImportError as e:  # pragma: no cover
            raise MissingExtraError(f"BM25 scoring needs bm25s: {install_hint('bm25')}") from e
        self._bm25s = bm25s
        self.k1, self.b = as_float("k1", k1), as_float("b", b)
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise InputError(f"BM25 needs k1 >= 0 and b in [0, 1], got k1={k1!r}, b={b!r}")
        try:  # bm25s names its stopword lists ("en", "german", ...) and checks the name only when it tokenizes
            bm25s.tokenize(["a"], stopwords=stopwords, show_progress=False)
        except ValueError as e:
            raise InputError(f"stopwords: {e}") from None
        self.stopwords = stopwords
        self._key: str | None = None
        self._index: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable: settings only; the module and the index are rebuilt where it is used."""
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def _fit(self, chunks: Sequence[Chunk]) -> Any:
        h = hashlib.sha256()
        for c in chunks:
            h.update(c.id.encode() + b"\0" + c.text.encode() + b"\0")
        key = h.hexdigest()
        if key != self._key:
            tokens = self._bm25s.tokenize([c.text for c in chunks], stopwords=self.stopwords, show_progress=False)
            index = None
            if tokens.vocab:
                index = self._bm25s.BM25(k1=self.k1, b=self.b)
                index.index(tokens, show_progress=False)
            self._key, self._index = key, index
        return self._index

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        q = self._bm25s.tokenize([question], stopwords=self.stopwords, show_progress=False, return_ids=False)
        if not q or not q[0]:  # only stopwords (or nothing): no term can match
            return np.zeros(len(chunks), dtype=np.float32)
        index = self._fit(chunks)
        if index is None:  # no chunk has an indexable word
            return np.zeros(len(chunks), dtype=np.float32)
        return np.asarray(index.get_scores(q[0]), dtype=np.float32)
