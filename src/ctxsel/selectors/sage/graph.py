"""SAGE's implicit graph: sentences are vertices, nothing is built ahead.

Vertices are the document's sentences in reading order (``split_sentences``
of each chunk; a chunk with no sentence break is one vertex). Edges are
never stored: *semantic* edges are found at query time by keyword
relevance, *contextual* edges are the preceding and following sentences of
the same document. The only work beyond splitting is the per-sentence word
set, made lazily on the first retrieval and reused by later rounds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ctxsel.chunking import split_sentences
from ctxsel.scoring.keywords import key_words, words
from ctxsel.types import Chunk


def sentence_vertices(chunks: Sequence[Chunk]) -> list[Chunk]:
    """One Chunk per sentence, in (doc_id, position) order.

    Ids are ``<chunk id>#s<j>``; ``meta["parent"]`` is the chunk's id (recall
    of gold paragraphs counts a paragraph found when any of its sentences
    is), ``position`` is the sentence's index in its document.
    """
    out: list[Chunk] = []
    next_pos: dict[str, int] = {}
    for c in sorted(chunks, key=lambda c: (c.doc_id, c.position)):
        sentences = split_sentences(c.text) or ([c.text] if c.text.strip() else [])
        for j, s in enumerate(sentences):
            pos = next_pos.get(c.doc_id, 0)
            next_pos[c.doc_id] = pos + 1
            out.append(Chunk(f"{c.id}#s{j}", s, doc_id=c.doc_id, position=pos, meta={"parent": c.id}))
    return out


class SentenceGraph:
    """Retrieval and neighbour expansion over a document's sentence vertices."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.vertices = sentence_vertices(chunks)
        self._words: list[set[str]] | None = None

    def __len__(self) -> int:
        return len(self.vertices)

    def text(self, evidence: Iterable[int]) -> str:
        """The evidence as SAGE's prompts list it: one sentence a line, in document order."""
        order = sorted(evidence)  # vertex indices are in document order
        return "\n".join(self.vertices[i].text for i in order) if order else "(nothing yet)"

    def relevance(self, keys: Iterable[str]) -> np.ndarray:
        """relevance(c, keys) = |WordsOf(c) & keys| for every vertex (SAGE Sec. 4.2)."""
        if self._words is None:
            self._words = [words(v.text) for v in self.vertices]
        ks = key_words(keys)
        return np.fromiter((len(w & ks) for w in self._words), dtype=np.int64, count=len(self.vertices))

    def retrieve(self, keys: Iterable[str], k: int) -> tuple[list[int], np.ndarray]:
        """The ``k`` most relevant vertices (relevance > 0), ties by position; and all relevances."""
        rel = self.relevance(keys)
        order = np.argsort(-rel, kind="stable")
        return [int(i) for i in order[:k] if rel[i] > 0], rel

    def neighbours(self, seeds: Sequence[int], total: int) -> list[int]:
        """Up to ``total`` preceding and following sentences of ``seeds``, shared evenly.

        Each seed gets ``total // len(seeds)`` offsets (the first seeds one more
        when it does not divide) in the order -1, +1, -2, +2, ...; offsets that
        leave the seed's document are skipped, not moved to another seed.
        Returned once each, without the seeds themselves.
        """
        if not seeds or total <= 0:
            return []
        base, extra = divmod(total, len(seeds))
        out: list[int] = []
        skip = set(seeds)
        for s_i, s in enumerate(seeds):
            want = base + (1 if s_i < extra else 0)
            offsets = [sign * d for d in range(1, want // 2 + 2) for sign in (-1, 1)][:want]
            for off in offsets:
                j = s + off
                if 0 <= j < len(self.vertices) and self.vertices[j].doc_id == self.vertices[s].doc_id and j not in skip:
                    out.append(j)
                    skip.add(j)
        return out

    def count_mentions(self, variants: Iterable[str]) -> tuple[int, list[int]]:
        """Occurrences of any variant (whole words, case-insensitive), and the vertices holding them.

        Overlapping matches of several variants ("Tom" inside "Tom Sawyer")
        count once: longer variants are matched first and a span already
        counted is not counted again.
        """
        pats = [
            re.compile(r"(?<!\w)" + re.escape(v.strip()) + r"(?!\w)", re.IGNORECASE)
            for v in sorted({v.strip() for v in variants if v.strip()}, key=len, reverse=True)
        ]
        total, where = 0, []
        for i, v in enumerate(self.vertices):
            spans: list[tuple[int, int]] = []
            for p in pats:
                for m in p.finditer(v.text):
                    if all(m.end() <= a or m.start() >= b for a, b in spans):
                        spans.append((m.start(), m.end()))
            if spans:
                total += len(spans)
                where.append(i)
        return total, where


__all__ = ["SentenceGraph", "sentence_vertices"]
