"""The rules every surface (Python, CLI, HTTP, framework adapters) applies to what a user hands in.

One place, so ``ctxsel.select``, the selectors, the command line and the
service reject the same inputs with the same words: a message that names
the input, the rule it broke and what to do instead.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Iterable, KeysView, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError

_SURROGATE = re.compile("[\ud800-\udfff]")

#: The most tokens one chunk may count (``n_tokens``): a billion, a hundred times the longest model
#: context there is, so no real chunk is refused; and with it a 64-bit sum of the counts (the
#: budget cuts' running sums) cannot wrap around below nine billion chunks, far more than any pool
#: holds in memory. A larger count is a mistake (a byte size, a sentinel, 2**63) that would break a
#: budget silently, so it is refused.
MAX_CHUNK_TOKENS = 1_000_000_000
#: The longest question, chunk id (and doc_id) and spec (method, expansion, rerank, stage), in
#: characters: the same limits on every surface (HTTP's request model declares them too).
MAX_QUESTION_CHARS = 100_000
MAX_ID_CHARS = 1024
MAX_SPEC_CHARS = 1000
#: The largest seed: numpy's and most generators' limit (seeds are 32-bit on every surface).
MAX_SEED = 2**32 - 1
#: Characters that draw nothing and are neither whitespace nor of a category below: the Hangul
#: fillers (a "blank" character that fonts show as nothing).
FILLERS = frozenset("\u115f\u1160\u3164\uffa0")
#: Unicode categories that carry no text to rank by: control (Cc: NUL, escapes), format (Cf:
#: zero-width space, joiners, the byte order mark, direction marks) and combining marks (Mn, Mc,
#: Me: they only modify a base character, and alone there is none).
_INVISIBLE = frozenset({"Cc", "Cf", "Mn", "Mc", "Me"})


def check_text(text: str, what: str) -> None:
    """Reject a lone surrogate (U+D800-U+DFFF): it is not valid Unicode, cannot be encoded as
    UTF-8, and tokenizers fail on it deep inside. It comes from decoding bytes with
    ``errors="surrogateescape"`` or from a JSON ``"\\ud800"`` escape."""
    if text.isascii():  # the common case, checked at C speed
        return
    m = _SURROGATE.search(text)
    if m is not None:
        raise InputError(
            f"{what} contains a lone surrogate U+{ord(m.group()):04X} at character {m.start()}, which is not "
            "valid Unicode: decode the source bytes with errors='replace' (or remove the character)"
        )


def is_invisible(ch: str) -> bool:
    """Whether ``ch`` is nothing to read: whitespace, a control or format character, a combining mark
    or a filler (:data:`FILLERS`)."""
    return ch.isspace() or ch in FILLERS or unicodedata.category(ch) in _INVISIBLE


def is_blank(text: str) -> bool:
    """Whether ``text`` has nothing to read: nothing is left after removing whitespace, control (Cc)
    and format (Cf) characters, combining marks (Mn, Mc, Me) and the Hangul fillers (U+115F,
    U+1160, U+3164, U+FFA0). A question of NUL bytes or of lone accents would select arbitrary chunks."""
    if text.isascii():
        stripped = text.strip()
        if not stripped or stripped.isprintable():  # the common cases, at C speed
            return not stripped
        return not any(c.isprintable() and not c.isspace() for c in stripped)
    return all(map(is_invisible, text))


def unicode_name(ch: str) -> str:
    """``U+200B ZERO WIDTH SPACE``: a character as a message names it."""
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}"


def utf8_fault(e: UnicodeDecodeError) -> str:
    """Where bytes stop being UTF-8, as every reader of files and standard input says it:
    ``byte 0xFF at offset 1: invalid start byte``."""
    obj = e.object if isinstance(e.object, (bytes, bytearray)) else b""
    shown = f"byte 0x{obj[e.start]:02X}" if e.start < len(obj) else "a byte"
    return f"{shown} at offset {e.start}: {e.reason}"


def check_argv(text: str, flag: str, instead: str) -> None:
    """The same for a command-line argument: Python reads argv bytes that are not UTF-8 as lone
    surrogates U+DC80-U+DCFF (``surrogateescape``), which name the byte (a Latin-1 terminal)."""
    m = _SURROGATE.search(text)
    if m is not None and 0xDC80 <= ord(m.group()) <= 0xDCFF:
        offset = len(text[: m.start()].encode("utf-8", "surrogateescape"))
        raise InputError(
            f"{flag} is not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02X} at offset {offset}); set a UTF-8 "
            f"locale, or {instead}"
        )


def check_question(question: Any) -> str:
    """The question as a non-empty string; an empty, whitespace-only or zero-width-only one would select
    arbitrary chunks."""
    if not isinstance(question, str):
        raise InputTypeError(f"question must be a string, got {type(question).__name__}: pass the question's text")
    if len(question) > MAX_QUESTION_CHARS:
        raise InputError(
            f"question is too long: {len(question):,} characters, over the limit of {MAX_QUESTION_CHARS:,}; "
            "ask a shorter question (long context goes in the chunks)"
        )
    check_text(question, "question")
    if is_blank(question):
        shown = next((ch for ch in question if not ch.isspace()), "")
        also = f"; its only other characters are invisible ({unicode_name(shown)})" if shown else ""
        raise InputError(
            f"question is empty (or only whitespace){also}: there is nothing to rank the chunks against; "
            "pass the question's text"
        )
    return question


def check_chunk_sequence(items: Any, what: str = "chunks") -> None:
    """A sequence of chunks must not be one str or bytes: iterating it would make one chunk per character."""
    if isinstance(items, (str, bytes, bytearray)):
        kind = type(items).__name__
        raise InputTypeError(
            f"{what} must be a sequence of chunk texts or Chunks, got a single {kind} of {len(items):,} "
            f"{'characters' if kind == 'str' else 'bytes'}: pass [text] for one chunk, or split a document with "
            "ctxsel.chunking.chunk_text(text)"
        )
    if isinstance(items, Mapping):
        if "text" in items:
            raise InputTypeError(
                f"{what} must be a sequence of chunks, got one chunk object (a {type(items).__name__} with 'text'): "
                "pass [chunk] for one chunk"
            )
        entries = "1 entry" if len(items) == 1 else f"{len(items):,} entries"
        raise InputTypeError(
            f"{what} must be a sequence of chunks, got a {type(items).__name__} of {entries}: "
            "iterating it would read its keys as the texts; pass list(d.values()) for the texts, or "
            '[{"id": k, "text": v} for k, v in d.items()] to keep the keys as ids'
        )
    if isinstance(items, AbstractSet) and not isinstance(items, KeysView):
        raise InputTypeError(
            f"{what} must be a sequence of chunks, got a {type(items).__name__}: a set has no order (it changes "
            "from run to run), and scores are matched to chunks by position; pass a list, e.g. sorted(chunks)"
        )
    if items is None or not hasattr(items, "__iter__"):
        raise InputTypeError(f"{what} must be a sequence of chunk texts or Chunks, got {type(items).__name__}")


#: The fields a chunk given as a mapping may have (HTTP's ChunkIn, a JSONL line, a dict in Python).
CHUNK_FIELDS = ("id", "text", "doc_id", "position", "n_tokens", "meta")


def as_chunk_id(value: object, what: str) -> str:
    """A chunk (or document) id as a non-empty string. One rule on every surface: a string, or an
    integer written as its decimal string (ids from a database are ints; every output id is a
    string, so ``1`` comes back as ``"1"``); a float, bool or null is refused."""
    if isinstance(value, str):
        if not value:
            raise InputError(f"{what} is empty: give each chunk a non-empty id")
        check_id_text(value, what)
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        if abs(int(value)) >= _INT_ID_BOUND:  # checked before str(): Python refuses to print a huge int
            raise InputError(f"{what} is too long: an integer of over {MAX_ID_CHARS:,} digits; {_ID_LIMIT}")
        return str(int(value))
    raise InputTypeError(
        f'{what} must be a string or an integer, got {value!r} (a {type(value).__name__}): pass ids such as "c1" or 7'
    )


_ID_LIMIT = f"an id may have at most {MAX_ID_CHARS:,} characters"
_INT_ID_BOUND = 10**MAX_ID_CHARS


def check_id_text(value: str, what: str) -> None:
    """An id (a chunk's or a document's) must fit :data:`MAX_ID_CHARS` and be valid Unicode."""
    if len(value) > MAX_ID_CHARS:
        raise InputError(f"{what} is too long: {len(value):,} characters; {_ID_LIMIT}")
    check_text(value, what)


def check_ids(ids: Sequence[str]) -> None:
    """:func:`check_id_text` on each of a pool's ids (``chunk id #i``), at C speed where all are short ASCII."""
    if all(map(str.isascii, ids)) and max(map(len, ids), default=0) <= MAX_ID_CHARS:
        return
    for i, cid in enumerate(ids):
        check_id_text(cid, f"chunks[{i}].id")


def chunk_fields(
    item: Mapping[str, Any], i: int, *, default_id: str | None = None, extra: bool = False, where: str = ""
) -> dict[str, Any]:
    """The keyword arguments of ``Chunk`` for chunk ``i`` given as a mapping ``{"id", "text", "doc_id"?,
    "position"?, "n_tokens"?, "meta"?}``: the one check of that shape, which the Python API, HTTP
    and JSONL files all call. A missing id is an error unless the caller numbers lines
    (``default_id``); unknown fields are errors (a typo such as "txt" would drop the text) unless
    ``extra`` (a dataset file's own fields, such as "title"). ``where`` goes before each message ("file:3: ")."""
    cid, text = item.get("id"), item.get("text")
    if len(item) == 2 and type(cid) is str and 0 < len(cid) <= MAX_ID_CHARS and cid.isascii() and type(text) is str:
        # {"id", "text"} with a short ASCII id: the common case
        return {"id": cid, "text": text, "position": i}
    where = f"{where}chunks[{i}]"
    if not extra:
        unknown = [k for k in item if k not in CHUNK_FIELDS]
        if unknown:
            raise InputError(f"{where} has unknown field {str(unknown[0])!r}: a chunk takes {', '.join(CHUNK_FIELDS)}")
    if "text" not in item:
        raise InputError(f'{where} has no \'text\': give each chunk {{"id": ..., "text": ...}}')
    text = item["text"]
    if not isinstance(text, str):
        raise InputTypeError(f"{where}.text must be a string, got {type(text).__name__}")
    if "id" in item:
        cid = as_chunk_id(item["id"], f"{where}.id")
    elif default_id is not None:
        cid = default_id
    else:
        raise InputError(f"{where} has no 'id': give each chunk an id, or pass the texts as plain strings")
    out: dict[str, Any] = {"id": cid, "text": text, "position": i}
    if item.get("doc_id") is not None:
        out["doc_id"] = as_chunk_id(item["doc_id"], f"{where}.doc_id")
    if item.get("position") is not None:
        out["position"] = as_int(f"{where}.position", item["position"])
    if item.get("n_tokens") is not None:
        out["n_tokens"] = as_token_count(f"{where}.n_tokens", item["n_tokens"])
    meta = item.get("meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise InputTypeError(f"{where}.meta must be an object (a dict), got {type(meta).__name__}")
        out["meta"] = dict(meta)
    return out


def bad_chunk_item(item: object, i: int) -> InputTypeError:
    """The message for chunk ``i`` that is neither a text, a Chunk nor a chunk object."""
    hint = ": decode it first, e.g. item.decode('utf-8')" if isinstance(item, (bytes, bytearray)) else ""
    return InputTypeError(
        f"chunks[{i}] must be a text, a Chunk or an object with 'id' and 'text', got {type(item).__name__}{hint}"
    )


def plain_chunk_shape(item: Mapping[str, Any]) -> str:
    """A chunk object in one of the common shapes that need no field-by-field check: ``"plain"`` (a
    non-empty str id and a str text, nothing else), ``"counted"`` (and a whole ``n_tokens`` >= 0), else
    ``""`` (:func:`chunk_fields` checks it). A columnar pool keeps the first two without building Chunks."""
    if type(item.get("id")) is not str or not item["id"] or type(item.get("text")) is not str:
        return ""
    n = len(item)
    if n == 2:
        return "plain"
    if n == 3 and type(item.get("n_tokens")) is int and 0 <= item["n_tokens"] <= MAX_CHUNK_TOKENS:
        return "counted"
    return ""


def check_chunk_item(item: object, i: int) -> object:
    """Chunk ``i`` of a JSON list as the HTTP model reads it: a text as it is; an object checked by
    :func:`chunk_fields`, with an integer id as its string; anything else refused in one line."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        raise bad_chunk_item(item, i)
    if plain_chunk_shape(item):
        return item  # {"id", "text"[, "n_tokens"]}: the common cases, at dict speed
    fields = chunk_fields(item, i)
    return item if fields["id"] is item["id"] else {**item, "id": fields["id"]}


def check_chunk_shapes(items: list[Any]) -> list[Any]:
    """The chunks of a JSON body (HTTP's) item by item (:func:`check_chunk_item`), before pydantic reads
    them in its own words; their texts and ids are checked with the Query, as in Python. Plain texts,
    the common case, pass at C speed."""
    if set(map(type, items)) <= {str}:
        return items
    return [item if type(item) is str else check_chunk_item(item, i) for i, item in enumerate(items)]


def check_texts(texts: Sequence[str], ids: Sequence[str] | None = None) -> None:
    """:func:`check_text` on each chunk text (``ids`` name them in messages; by default "0", "1", ...),
    skipped where all are ASCII."""
    if all(map(str.isascii, texts)):
        return
    for i, text in enumerate(texts):
        check_text(text, f"chunk {str(i) if ids is None else ids[i]!r}")


def check_unique_chunk_ids(ids: Iterable[object]) -> None:
    """Chunk ids must be unique: two chunks with one id would make recall and the reading order ambiguous."""
    ids = ids if isinstance(ids, list) else list(ids)
    if len(set(ids)) == len(ids):  # the common case, at set speed
        return
    seen: set[object] = set()
    for i in ids:
        if i in seen:
            raise InputError(f"duplicate chunk id {i!r}: chunk ids must be unique within one context")
        seen.add(i)


def as_int(name: str, value: object) -> int:
    """An integer parameter. One rule on every surface: an int, or a whole finite float (``1e9``,
    ``5.0``: JSON and spec values such as ``top-k@1e9`` arrive as floats); 2.5, NaN, infinity,
    a bool and a numeric string ("10") are errors, never a silent truncation or conversion."""
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise InputError(f"{name} must be an integer, got {float(value)!r}: pass a finite whole number")
        if not float(value).is_integer():
            raise InputError(f"{name} must be an integer, got {float(value)!r}: pass a whole number")
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        hint = ": pass a number, not text" if isinstance(value, str) else ""
        raise InputTypeError(f"{name} must be an integer, got {value!r}{hint}")
    return int(value)


def as_count(name: str, value: object, minimum: int = 0) -> int:
    """A count such as ``min_k``: :func:`as_int`, at least ``minimum``."""
    n = as_int(name, value)
    if n < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {n}")
    return n


def as_token_count(name: str, value: object) -> int:
    """A chunk's ``n_tokens``: a whole number from 0 to :data:`MAX_CHUNK_TOKENS` (see there for why)."""
    n = as_count(name, value)
    if n > MAX_CHUNK_TOKENS:
        raise InputError(
            f"{name} must be <= {MAX_CHUNK_TOKENS:,} (a chunk has fewer tokens than any model reads), got {n:,}: "
            "pass the chunk's token count, or leave it out to have it counted"
        )
    return n


def as_budget(name: str, value: object) -> int | None:
    """A token budget such as ``max_tokens``: None (no budget) or an integer >= 0 by :func:`as_int`.
    A NaN budget would compare false with every size and so silently mean "no budget"."""
    if value is None:
        return None
    n = as_int(name, value)
    if n < 0:
        raise InputError(f"{name} must be >= 0 or None, got {n}")
    return n


def as_float(name: str, value: object) -> float:
    """A finite number parameter: "abc", None or NaN is an error that names the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value!r}")
    return float(value)


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _bad_score(items: Sequence[Any], what: str) -> InputError:
    """The message for the first item of ``items`` that is not a number."""
    for i, v in enumerate(items):
        if not _is_number(v):
            kind = type(v).__name__
            return InputTypeError(
                f"{what}[{i}] must be a number, got {v!r} (a {kind}): pass numbers, one per chunk, not text or booleans"
            )
    return InputError(f"{what} must be numbers, one per chunk")


def _too_large(what: str, e: Exception | str) -> InputError:
    return InputError(f"{what} must be numbers that fit a float, one per chunk ({e})")


def check_score_items(items: list[Any] | tuple[Any, ...], what: str = "scores") -> None:
    """The item rule of :func:`as_scores` on a list (the HTTP body's, before pydantic reads "0.1" as 0.1,
    or refuses an integer past a float's range in its own words)."""
    if set(map(type, items)) <= {float}:  # at C speed
        return
    if not all(_is_number(v) for v in items):
        raise _bad_score(items, what)
    for v in items:
        if isinstance(v, int):
            try:
                float(v)
            except OverflowError as e:
                raise _too_large(what, e) from None


def scores_count_error(n_scores: int, n_chunks: int, what: str = "scores", hint: str = "") -> InputError:
    """What every surface says when the scores and the chunks differ in number (``hint``: the
    surface's own advice, e.g. the CLI's chunking flags)."""
    return InputError(
        f"{what}: got {n_scores} scores for {n_chunks} chunks; they must match, one per chunk in chunk order{hint}"
    )


def as_scores(scores: object, what: str = "scores") -> np.ndarray:
    """Scores as a flat float64 array. One rule on every surface: each item is a number (int or
    float); a numeric string ("0.1") or a bool is an error, as are a str for the whole list and a
    number too large for a float. Non-finite scores pass here: the selector's ``nan_policy``
    decides on them (:func:`nonfinite_scores_error`)."""
    if isinstance(scores, (str, bytes, bytearray, Mapping, AbstractSet, int, float)):
        # a set or a dict has no order to match the chunks by; one number is not one per chunk
        raise InputTypeError(f"{what} must be a sequence of numbers (one per chunk), got a {type(scores).__name__}")
    if isinstance(scores, (list, tuple)):
        check_score_items(scores, what)
    try:
        arr = np.asarray(scores)
    except (TypeError, ValueError) as e:
        raise InputError(f"{what} must be numbers, one per chunk ({e})") from None
    if arr.dtype.kind not in "iuf" and not (arr.dtype.kind == "O" and all(map(_is_number, arr.reshape(-1)))):
        raise _bad_score(arr.reshape(-1).tolist(), what)
    try:
        return arr.astype(np.float64, copy=False).reshape(-1)
    except (TypeError, ValueError, OverflowError) as e:
        raise _too_large(what, e) from None


def nonfinite_scores_error(finite: np.ndarray) -> InputError:
    """What ``nan_policy="raise"`` says about NaN or infinite scores (also 1e999, read as infinity)."""
    bad = np.flatnonzero(~finite)
    shown = ", ".join(str(i) for i in bad[:5]) + (" ..." if len(bad) > 5 else "")
    return InputError(
        f"scores: {len(bad)} score(s) are NaN or infinite (chunk positions {shown}); "
        "fix the scorer, or pass nan_policy='last' to rank them after all finite scores"
    )
