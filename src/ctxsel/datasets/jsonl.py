"""Bring-your-own data: the generic ctxsel JSONL format and HELMET's
retrieval-augmented QA layout.

Generic, one example per line::

    {"id": "q1", "question": "...",
     "chunks": [{"id": "c1", "text": "..."}, ...]  # or "document": "..."
     "gold_ids": ["c1"], "answers": ["..."], "choices": [...]}

``document`` is split into paragraphs (``chunking="..."`` picks another
method). HELMET (Yen et al., 2025) RAG files hold ``question``, ``answers``
and ``ctxs: [{"id", "title", "text", ...}]``; gold chunks are those marked
``"has_answer": true`` or listed in ``positive_ctxs``/``gold_ids``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxsel.chunking import Method, chunk_text
from ctxsel.errors import CtxselError, InputError
from ctxsel.inputs import chunk_fields, utf8_fault
from ctxsel.types import Chunk, Example, check_unique_ids


def read_json(path: Path, hint: str = "") -> Any:
    """One JSON file, plain or gzip (by its magic bytes); not JSON is an error that names the file and line
    (``hint``: what the file should be)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise InputError(f"{path}: not a readable gzip file ({e}){hint}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not valid UTF-8 ({utf8_fault(e)}){hint}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}){hint}") from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is an error naming it."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{lineno}: not valid UTF-8 ({utf8_fault(e)})") from None
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from e
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _answers(obj: dict[str, Any]) -> list[str]:
    a = obj.get("answers", obj.get("answer", []))
    if isinstance(a, str):
        return [a]
    flat: list[str] = []
    for x in a:
        flat.extend(x if isinstance(x, list) else [x])
    return [str(x) for x in flat]


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    """A field that must be a JSON list (a string of ids is refused: it would be read letter by letter)."""
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise InputError(f"{where}: '{key}' must be a list, got {type(value).__name__}")
    return value


def _check_question(obj: dict[str, Any], where: str) -> None:
    if "question" not in obj:
        raise InputError(f"{where}: missing 'question'")
    if not isinstance(obj["question"], str):
        raise InputError(f"{where}: 'question' must be a string, got {type(obj['question']).__name__}")


def example_from_generic(obj: dict[str, Any], where: str, chunking: Method = "paragraphs") -> Example:
    _check_question(obj, where)
    eid = str(obj.get("id", where))
    if "chunks" in obj:
        chunks = []
        for i, c in enumerate(_list(obj, "chunks", where)):
            if isinstance(c, str):
                c = {"id": str(i), "text": c}
            if not isinstance(c, dict):
                raise InputError(f"{where}: chunk {i} must be a text or an object with 'text', got {type(c).__name__}")
            # the one check of a chunk object (ctxsel.inputs); a file's own fields (title, url) may stay
            fields = chunk_fields(c, i, default_id=str(i), extra=True, where=f"{where}: ")
            chunks.append(Chunk(**{"doc_id": eid, **fields}))
        check_unique_ids(chunks)
    elif "document" in obj:
        if not isinstance(obj["document"], str):
            raise InputError(f"{where}: 'document' must be a string, got {type(obj['document']).__name__}")
        chunks = chunk_text(obj["document"], chunking, doc_id=str(obj.get("doc_id", eid)))
    else:
        raise InputError(f"{where}: needs 'chunks' or 'document'")
    gold = [str(g) for g in _list(obj, "gold_ids", where)]
    ids = {c.id for c in chunks}
    unknown = [g for g in gold if g not in ids]
    if unknown:
        raise InputError(f"{where}: gold ids not among the chunks: {unknown[:5]}")
    return Example(
        id=eid,
        question=obj["question"],
        chunks=chunks,
        gold_ids=gold,
        answers=_answers(obj),
        choices=[str(o) for o in obj.get("choices", obj.get("options", []))],
        meta=obj.get("meta", {}),
    )


def example_from_helmet(obj: dict[str, Any], where: str) -> Example:
    _check_question(obj, where)
    chunks, gold = [], []
    positive = {str(p.get("id")) for p in obj.get("positive_ctxs", []) if isinstance(p, dict)}
    for i, ctx in enumerate(_list(obj, "ctxs", where)):
        if not isinstance(ctx, dict) or "text" not in ctx:
            raise InputError(f"{where}: ctxs[{i}] has no 'text'")
        cid = str(ctx.get("id", i))
        title = ctx.get("title") or ""
        text = f"{title}: {ctx['text']}" if title else ctx["text"]
        chunks.append(Chunk(id=cid, text=text, doc_id=str(obj.get("id", where)), position=i))
        if ctx.get("has_answer") or ctx.get("is_gold") or cid in positive:
            gold.append(cid)
    gold.extend(str(g) for g in _list(obj, "gold_ids", where) if str(g) not in gold)
    check_unique_ids(chunks)
    unknown = sorted(set(gold) - {c.id for c in chunks})
    if unknown:
        raise InputError(f"{where}: gold ids not among the chunks: {unknown[:5]}")
    return Example(
        id=str(obj.get("id", where)), question=obj["question"], chunks=chunks, gold_ids=gold, answers=_answers(obj)
    )


def load_jsonl(path: str | Path, chunking: Method = "paragraphs", limit: int | None = None) -> list[Example]:
    """Read generic or HELMET JSONL (detected per line by the ``ctxs`` key)."""
    p = Path(path)
    out = []
    for lineno, obj in read_jsonl(p):
        where = f"{p.name}:{lineno}"
        try:
            out.append(example_from_helmet(obj, where) if "ctxs" in obj else example_from_generic(obj, where, chunking))
        except CtxselError as e:
            if str(e).startswith(where):
                raise
            raise InputError(f"{where}: {e}") from None  # e.g. a Chunk's own check, which knows no line
        except (TypeError, ValueError, AttributeError) as e:  # a field of another JSON type than the format's
            raise InputError(
                f"{where}: a field has the wrong type ({e}); see the format in ctxsel.datasets.jsonl"
            ) from None
        if limit is not None and len(out) >= limit:
            break
    ids = [e.id for e in out]
    if len(set(ids)) != len(ids):
        raise InputError(f"{p}: example ids must be unique")
    return out
