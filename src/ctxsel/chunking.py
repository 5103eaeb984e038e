"""Split a document into Chunks: paragraphs, sentences, token windows, or
semantic segments.

Every chunk records its document and position (reading order, neighbours)
and its cl100k token count. Ids are ``"{i}"`` for a single unnamed
document, ``"{doc_id}#{i}"`` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ctxsel.tokens import token_offsets
from ctxsel.types import Chunk

Method = Literal["paragraphs", "sentences", "tokens", "semantic"]

_PARA = re.compile(r"\n\s*\n")
# Sentence ends: . ! ? (optionally followed by closing quotes/brackets) then
# whitespace and something that can start a sentence.
_SENT_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_ABBREV = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e u.s u.k no fig al approx dept est inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


def _make_chunks(texts: Sequence[str], doc_id: str) -> list[Chunk]:
    def cid(i: int) -> str:
        return str(i) if doc_id == "doc" else f"{doc_id}#{i}"

    return [Chunk(id=cid(i), text=t, doc_id=doc_id, position=i) for i, t in enumerate(texts)]


def split_paragraphs(text: str) -> list[str]:
    """Blocks separated by blank lines, whitespace-trimmed, empties dropped."""
    return [p.strip() for p in _PARA.split(text) if p.strip()]


def split_sentences(text: str) -> list[str]:
    """Rule-based English sentence splitter (no model download).

    Splits after . ! ? when the next word starts like a sentence, except after
    common abbreviations and single initials ("J. R. R. Tolkien"). Newline-
    separated blocks (paragraphs, list items) are always split.
    """
    out: list[str] = []
    for block in split_paragraphs(text):
        for line in (ln.strip() for ln in block.split("\n")):
            if not line:
                continue
            start = 0
            for m in _SENT_END.finditer(line):
                head = line[start : m.start()].rstrip("\"'\u201d\u2019)]")
                last = head.rsplit(None, 1)[-1] if head.split() else ""
                word = last.rstrip(".!?").lower()
                if last.endswith(".") and (word in _ABBREV or (len(word) == 1 and word.isalpha())):
                    continue
                out.append(line[start : m.end()].strip())
                start = m.end()
            if line[start:].strip():
                out.append(line[start:].strip())
    return out


def split_token_windows(text: str, size: int = 600, overlap: int = 100) -> list[str]:
    """Windows of ``size`` cl100k tokens, each starting ``size - overlap``
    after the last (LDAR's LaRA setting: 600 / 100)."""
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be in [0, size), got {overlap}")
    # Cut the original text at token start offsets rather than decoding id
    # slices, so a window edge inside a multi-token character cannot produce U+FFFD.
    offsets = token_offsets(text)
    if not offsets:
        return []
    n, step = len(offsets), size - overlap
    windows = []
    for start in range(0, n, step):
        end = offsets[start + size] if start + size < n else len(text)
        piece = text[offsets[start] : end]
        if piece:
            windows.append(piece)
        if start + size >= n:
            break
    return windows


def split_semantic(
    text: str,
    embed: Callable[[list[str]], np.ndarray],
    threshold: float = 0.75,
) -> list[str]:
    """Group consecutive sentences; start a new chunk where the cosine
    similarity of neighbouring sentences falls below ``threshold``
    (Context-Picker uses 0.75). ``embed`` returns L2-normalised rows."""
    sents = split_sentences(text)
    if len(sents) <= 1:
        return sents
    vecs = np.asarray(embed(sents), dtype=np.float32)
    sims = np.sum(vecs[:-1] * vecs[1:], axis=1)
    chunks, cur = [], [sents[0]]
    for sent, sim in zip(sents[1:], sims):
        if sim < threshold:
            chunks.append(" ".join(cur))
            cur = []
        cur.append(sent)
    chunks.append(" ".join(cur))
    return chunks


def chunk_text(
    text: str,
    method: Method = "paragraphs",
    *,
    doc_id: str = "doc",
    size: int = 600,
    overlap: int = 100,
    threshold: float = 0.75,
    embed: Callable[[list[str]], np.ndarray] | None = None,
) -> list[Chunk]:
    """Chunk one document. ``semantic`` needs ``embed`` (e.g. DenseScorer().embed)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if method == "paragraphs":
        parts = split_paragraphs(text)
    elif method == "sentences":
        parts = split_sentences(text)
    elif method == "tokens":
        parts = split_token_windows(text, size, overlap)
    elif method == "semantic":
        if embed is None:
            from ctxsel.scoring.dense import DenseScorer

            embed = DenseScorer().embed
        parts = split_semantic(text, embed, threshold)
    else:
        raise ValueError(f"unknown chunking method {method!r}: paragraphs, sentences, tokens or semantic")
    return _make_chunks(parts, doc_id)
