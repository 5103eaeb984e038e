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
together up to the limit. Without it a single long line (a minified file, a
log) would be one chunk of millions of tokens. ``max_chunk_tokens=None`` turns the limit off.

Markdown headings (ATX ``#`` .. ``######`` lines and setext underlines,
outside fenced code) join the text that follows them (``headings="attach"``,
the default): the heading lines prefix the first chunk of their section, and
every chunk of the section carries ``meta["heading"]`` (the innermost title)
and ``meta["headings"]`` (the path, outermost first). A heading alone is a
few tokens that share the question's words, so as its own chunk it ranked
first for the dense scorer and crowded the cut. A heading with no text of its
own (the next heading is not below it, or the document ends) stays a chunk.
``headings="separate"`` splits as before: a heading paragraph is a chunk.
Token windows ignore headings (they cut the raw text).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np

from ctxsel.errors import InputError, InputTypeError
from ctxsel.tokens import count_tokens, token_offsets
from ctxsel.types import Chunk

Method = Literal["paragraphs", "sentences", "tokens", "semantic"]
Headings = Literal["attach", "separate"]
HEADINGS: tuple[str, ...] = ("attach", "separate")

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


def _make_chunks(texts: Sequence[str], doc_id: str, metas: Sequence[dict[str, Any]] | None = None) -> list[Chunk]:
    def cid(i: int) -> str:
        return str(i) if doc_id == "doc" else f"{doc_id}#{i}"

    metas = metas or [{}] * len(texts)
    return [
        Chunk(id=cid(i), text=t, doc_id=doc_id, position=i, meta=dict(m))
        for i, (t, m) in enumerate(zip(texts, metas, strict=True))
    ]


# -- Markdown headings ------------------------------------------------------------------------------------------

# ATX: up to 3 spaces, 1-6 '#', then a space or the line's end (``#tag`` is no heading); setext: a text
# line underlined with '=' (level 1) or '-' (level 2); fences: ``` or ~~~ (their lines are never headings)
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NOT_SETEXT_TEXT = re.compile(r"^\s*(?:[-*+>|]|\d+[.)]\s)")


def _heading(lines: list[str], i: int, block_start: bool) -> tuple[int, str, int] | None:
    """The heading at ``lines[i]``: (level, title, lines it spans), or None."""
    m = _ATX.match(lines[i])
    if m:
        return len(m.group(1)), _ATX_CLOSE.sub("", m.group(2) or "").strip(), 1
    if (
        block_start
        and i + 1 < len(lines)
        and lines[i].strip()
        and not _NOT_SETEXT_TEXT.match(lines[i])
        and (u := _SETEXT.match(lines[i + 1]))
    ):
        return (1 if u.group(1)[0] == "=" else 2), lines[i].strip(), 2
    return None


def markdown_sections(text: str) -> list[tuple[str, tuple[str, ...], str]]:
    """``text`` as ``(heading lines, heading path, body)`` in reading order.

    The heading lines are those waiting for the body (a run of headings, each below the last, e.g.
    the title and the first section's heading); a run whose last heading is followed by one at its own
    level or above, or by the end, has no body of its own and comes out with ``body == ""``. The path
    is the titles of the headings the body sits under, outermost first."""
    lines = text.split("\n")
    out: list[tuple[str, tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []  # the open headings: (level, title)
    run: list[str] = []  # heading lines not yet followed by text
    run_level = 0
    run_path: tuple[str, ...] = ()
    body: list[str] = []
    fence = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        found = None
        if fence:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = ""
        elif m := _FENCE.match(line):
            fence = m.group(1)
        else:
            found = _heading(lines, i, block_start=i == 0 or not lines[i - 1].strip() or bool(run and not body))
        if found is None:
            body.append(line)
            i += 1
            continue
        level, title, span = found
        if "\n".join(body).strip():
            out.append(("\n".join(run), run_path, "\n".join(body)))
            run = []
        elif run and level <= run_level:  # the run has no text of its own
            out.append(("\n".join(run), run_path, ""))
            run = []
        body = []
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        run += [ln.strip() for ln in lines[i : i + span]]
        run_level, run_path = level, tuple(t for _, t in stack)
        i += span
    if "\n".join(body).strip() or run:
        out.append(("\n".join(run), run_path, "\n".join(body) if "\n".join(body).strip() else ""))
    return out


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
    headings: Headings = "attach",
) -> list[Chunk]:
    """Chunk one document. ``semantic`` needs ``embed`` (e.g. DenseScorer().embed).

    Paragraphs, sentences and semantic segments longer than ``max_chunk_tokens`` are split
    (module docstring); token windows are bounded by ``size`` already. ``headings``: attach
    Markdown headings to the text after them (default) or keep them as text of their own
    ("separate"; the module docstring says which chunks each gives)."""
    if not isinstance(text, str):
        raise InputTypeError(f"text must be str, got {type(text).__name__}")
    if max_chunk_tokens is not None and (
        isinstance(max_chunk_tokens, bool) or not isinstance(max_chunk_tokens, int) or max_chunk_tokens < 1
    ):
        raise InputError(f"max_chunk_tokens must be a positive integer or None, got {max_chunk_tokens!r}")
    if headings not in HEADINGS:
        raise InputError(f"unknown headings option {headings!r}: attach or separate")
    split: Callable[[str], list[str]]
    if method == "paragraphs":
        split = split_paragraphs
    elif method == "sentences":
        split = split_sentences
    elif method == "tokens":
        return _make_chunks(split_token_windows(text, size, overlap), doc_id)
    elif method == "semantic":
        if embed is None:
            from ctxsel.scoring.dense import DenseScorer

            embed = DenseScorer().embed
        model = embed

        def split(body: str) -> list[str]:
            return split_semantic(body, model, threshold)
    else:
        raise InputError(f"unknown chunking method {method!r}: paragraphs, sentences, tokens or semantic")
    if headings == "separate":
        return _make_chunks(_bounded(split(text), max_chunk_tokens), doc_id)
    texts: list[str] = []
    metas: list[dict[str, Any]] = []
    for heading, path, body in markdown_sections(text):
        parts = split(body) if body.strip() else []
        if heading:
            parts = [heading + ("\n" + parts[0] if parts else ""), *parts[1:]]
        parts = _bounded(parts, max_chunk_tokens)
        texts += parts
        metas += [{"heading": path[-1], "headings": list(path)} if path else {} for _ in parts]
    return _make_chunks(texts, doc_id, metas)
