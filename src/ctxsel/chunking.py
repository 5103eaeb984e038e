"""Split a document into Chunks: paragraphs, sentences, token windows, or
semantic segments.

Every chunk records its document and position (reading order, neighbours)
and its cl100k token count. Ids are ``"{i}"`` for a single unnamed
document, ``"{doc_id}#{i}"`` otherwise.

No chunk is longer than ``max_chunk_tokens`` (default
``DEFAULT_MAX_CHUNK_TOKENS`` = 1,000 cl100k tokens, several ordinary
paragraphs): a longer paragraph, sentence or semantic segment is split at
sentence ends, then between words, then (a "word" of thousands of
characters) at token boundaries, and consecutive pieces are packed back
together up to the limit. Without it one 50 MB line became one chunk of
10.5M tokens. ``max_chunk_tokens=None`` turns the limit off.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import numpy as np

from ctxsel.errors import InputError, InputTypeError
from ctxsel.tokens import count_tokens, token_offsets
from ctxsel.types import Chunk

Method = Literal["paragraphs", "sentences", "tokens", "semantic"]

_PARA = re.compile(r"\n\s*\n")
# Sentence ends: . ! ? (optionally followed by closing quotes/brackets) then
# whitespace and something that can start a sentence.
_SENT_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_SPACE_RUN = re.compile(r"\s+")
#: The default longest chunk, in cl100k tokens (see the module docstring).
DEFAULT_MAX_CHUNK_TOKENS = 1000
_ABBREV = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "u.s",
        "u.k",
        "no",
        "fig",
        "al",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
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
            for end in _sentence_starts(line):
                out.append(line[start:end].strip())
                start = end
            if line[start:].strip():
                out.append(line[start:].strip())
    return out


def _sentence_starts(line: str) -> Iterator[int]:
    """Offsets in ``line`` where a new sentence starts (not after an abbreviation or an initial)."""
    start = 0
    for m in _SENT_END.finditer(line):
        head = line[start : m.start()].rstrip("\"'\u201d\u2019)]")
        last = head[-40:].rsplit(None, 1)[-1] if head.strip() else ""
        word = last.rstrip(".!?").lower()
        if last.endswith(".") and (word in _ABBREV or (len(word) == 1 and word.isalpha())):
            continue
        yield m.end()
        start = m.end()


# -- the longest chunk ------------------------------------------------------------------------------------------


def _fits(text: str, max_tokens: int) -> bool:
    """Whether ``text`` has at most ``max_tokens`` cl100k tokens, without tokenising what is clearly
    short (ASCII: a token spans at least one character) or clearly huge (64+ characters a token)."""
    if len(text) <= max_tokens and text.isascii():
        return True
    if len(text) > 64 * max_tokens:
        return False
    return count_tokens(text) <= max_tokens


def _spans(text: str, level: int, max_tokens: int) -> list[int]:
    """Cut points in ``text`` (excluding 0 and len): sentence starts and line breaks (level 0), word
    starts (1), every ``max_tokens`` characters (2)."""
    if level == 0:
        cuts = set(_sentence_starts(text)) | {m.end() for m in re.finditer(r"\n\s*", text)}
    elif level == 1:
        cuts = {m.end() for m in _SPACE_RUN.finditer(text)}
    else:
        cuts = set(range(max_tokens, len(text), max_tokens))
    return sorted(c for c in cuts if 0 < c < len(text))


def _token_cut(text: str, max_tokens: int) -> list[str]:
    """The last resort, for a short run of many-token characters: cut at token boundaries."""
    offsets = token_offsets(text)
    starts = [offsets[i] for i in range(0, len(offsets), max_tokens)] + [len(text)]
    return [text[a:b] for a, b in zip(starts, starts[1:]) if text[a:b]]


def fit_to_max_tokens(text: str, max_tokens: int, level: int = 0) -> list[str]:
    """``text`` as consecutive pieces of at most ``max_tokens`` tokens each, cut at the coarsest
    boundary that works (sentences, words, characters) and packed greedily; pieces are stripped."""
    if _fits(text, max_tokens):
        return [text.strip()] if text.strip() else []
    if level > 2:
        return [p.strip() for p in _token_cut(text, max_tokens) if p.strip()]
    bounds = [0, *_spans(text, level, max_tokens), len(text)]
    if len(bounds) == 2:
        return fit_to_max_tokens(text, max_tokens, level + 1)
    out: list[str] = []
    start, used = 0, 0  # the piece being packed: text[start:a], ``used`` tokens
    for a, b in zip(bounds, bounds[1:]):
        piece = text[a:b]
        n = count_tokens(piece) if len(piece) <= 64 * max_tokens else max_tokens + 1
        if n > max_tokens:  # this span alone is too long: close the pack, split the span finer
            if text[start:a].strip():
                out.append(text[start:a].strip())
            out += fit_to_max_tokens(piece, max_tokens, level + 1)
            start, used = b, 0
        elif used + n > max_tokens:
            if text[start:a].strip():
                out.append(text[start:a].strip())
            start, used = a, n
        else:
            used += n
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def _bounded(parts: list[str], max_tokens: int | None) -> list[str]:
    if max_tokens is None:
        return parts
    return [piece for part in parts for piece in fit_to_max_tokens(part, max_tokens)]


def split_token_windows(text: str, size: int = 600, overlap: int = 100) -> list[str]:
    """Windows of ``size`` cl100k tokens, each starting ``size - overlap``
    after the last (LDAR's LaRA setting: 600 / 100)."""
    if size <= 0:
        raise InputError(f"size must be > 0, got {size}")
    if not 0 <= overlap < size:
        raise InputError(f"overlap must be in [0, size), got {overlap}")
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
    max_chunk_tokens: int | None = DEFAULT_MAX_CHUNK_TOKENS,
) -> list[Chunk]:
    """Chunk one document. ``semantic`` needs ``embed`` (e.g. DenseScorer().embed).

    Paragraphs, sentences and semantic segments longer than ``max_chunk_tokens`` are split
    (module docstring); token windows are bounded by ``size`` already."""
    if not isinstance(text, str):
        raise InputTypeError(f"text must be str, got {type(text).__name__}")
    if max_chunk_tokens is not None and (
        isinstance(max_chunk_tokens, bool) or not isinstance(max_chunk_tokens, int) or max_chunk_tokens < 1
    ):
        raise InputError(f"max_chunk_tokens must be a positive integer or None, got {max_chunk_tokens!r}")
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
        raise InputError(f"unknown chunking method {method!r}: paragraphs, sentences, tokens or semantic")
    if method != "tokens":
        parts = _bounded(parts, max_chunk_tokens)
    return _make_chunks(parts, doc_id)
