"""Multiple-choice long-document QA: NovelQA and Marathon layouts.

An Example holds the option texts in ``choices`` (in letter order A, B, ...)
and the gold letter in ``answers`` (``meta["answer_index"]`` has its index);
the document is chunked into paragraphs like any other dataset. Answers are
scored by accuracy: the option a reply names at its head (SAGE's Prompt 3
asks for it there).

Layouts read:

- **NovelQA**: a folder with ``Books/**/<book>.txt`` and
  ``Data/**/<book>.json``; each JSON holds the book's questions as a list or
  as ``{question id: {...}}`` with ``Question``, ``Options`` (``{"A": ...}``
  or a list) and ``Answer`` (a letter). Questions whose answer is withheld
  (the public leaderboard split) load with no gold answer.
- **Marathon**: one ``.json`` list or ``.jsonl`` file of records with
  ``id``, ``context``, ``question``, ``options`` (list or letter dict) and
  ``answer`` (a letter, an index or the option's text).

Keys are matched case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxsel.chunking import chunk_text
from ctxsel.datasets.jsonl import read_json, read_jsonl
from ctxsel.errors import InputError
from ctxsel.types import Example

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def format_options(options: Sequence[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def question_with_options(question: str, options: Sequence[str]) -> str:
    """The question followed by its lettered options (SAGE's QUERY_WITH_OPTIONS)."""
    return f"{question}\nOptions:\n{format_options(options)}" if options else question


_HEAD_LETTER = re.compile(
    r"^[\s*#>\-\"']*(?:(?:the\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:\-]?\s*)?"
    r"([(\[]?)([A-Z])([)\].:,]|\s|$)",
    re.IGNORECASE,
)


def parse_choice(reply: str, options: Sequence[str]) -> int | None:
    """The index of the option a reply names at its head, or None.

    Accepts "B", "B.", "(B) ...", "Answer: B", "option (b)"; else a reply that
    starts with an option's own text. A lower-case letter counts only when
    marked ("b." or "(b)"), so "a dog" is not option A. A letter beyond the
    options is None.
    """
    text = reply.strip()
    m = _HEAD_LETTER.match(text)
    if m and (m.group(2).isupper() or m.group(1) or m.group(3) in ").]:"):
        i = LETTERS.index(m.group(2).upper())
        return i if i < len(options) else None
    low = text.lower()
    for i, o in enumerate(options):
        if o.strip() and low.startswith(o.strip().lower()):
            return i
    return None


def _get(obj: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    lower = {str(k).lower(): v for k, v in obj.items()}
    for n in names:
        if n.lower() in lower:
            return lower[n.lower()]
    return default


def _options(raw: Any, where: str) -> list[str]:
    if isinstance(raw, Mapping):
        return [str(raw[k]) for k in sorted(raw, key=lambda k: str(k).upper())]
    if isinstance(raw, (list, tuple)):
        return [str(o) for o in raw]
    raise InputError(f"{where}: options must be a list or a letter dict, got {type(raw).__name__}")


def _answer_index(raw: Any, options: Sequence[str], where: str) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        raise InputError(f"{where}: answer {raw!r} is not a letter, index or option text")
    if isinstance(raw, int):
        idx = raw
    elif isinstance(raw, str) and len(raw.strip()) == 1 and raw.strip().upper() in LETTERS:
        idx = LETTERS.index(raw.strip().upper())
    elif isinstance(raw, str) and raw.strip() in [o.strip() for o in options]:
        idx = [o.strip() for o in options].index(raw.strip())
    else:
        raise InputError(f"{where}: answer {raw!r} is not a letter, index or option text")
    if not 0 <= idx < len(options):
        raise InputError(f"{where}: answer {raw!r} is outside the {len(options)} options")
    return idx


def make_example(
    qid: str,
    document: str,
    question: str,
    options: list[str],
    answer: Any,
    where: str,
    benchmark: str,
    doc_id: str,
    meta: dict[str, Any] | None = None,
) -> Example:
    if not question or not isinstance(question, str):
        raise InputError(f"{where}: missing question")
    if len(options) < 2:
        raise InputError(f"{where}: a multiple-choice question needs at least 2 options, got {len(options)}")
    idx = _answer_index(answer, options, where)
    return Example(
        id=qid,
        question=question,
        chunks=chunk_text(document, "paragraphs", doc_id=doc_id),
        answers=[] if idx is None else [LETTERS[idx]],
        choices=options,
        meta={"benchmark": benchmark, "answer_index": idx, **(meta or {})},
    )


def load_novelqa(root: str | Path, limit: int | None = None) -> list[Example]:
    root = Path(root)
    books = {p.stem: p for p in sorted((root / "Books").rglob("*.txt"))}
    out: list[Example] = []
    for qfile in sorted((root / "Data").rglob("*.json")):
        book = qfile.stem
        if book not in books:
            raise FileNotFoundError(f"{qfile}: no Books/**/{book}.txt for its questions")
        text = books[book].read_text(encoding="utf-8")
        data = read_json(qfile)
        shape = 'expected NovelQA questions: {"Q1": {"Question": ..., "Options": ...}, ...} or a list of them'
        if not isinstance(data, (Mapping, list)):
            raise InputError(f"{qfile}: {shape}")
        items = list(data.items()) if isinstance(data, Mapping) else [(str(i), q) for i, q in enumerate(data)]
        if not all(isinstance(q, Mapping) for _, q in items):
            raise InputError(f"{qfile}: {shape}")
        for qid, q in items:
            where = f"{qfile}:{qid}"
            opts = _options(_get(q, "Options", "options"), where)
            out.append(
                make_example(
                    f"{book}/{qid}",
                    text,
                    _get(q, "Question", "question"),
                    opts,
                    _get(q, "Answer", "answer", "Gold"),
                    where,
                    "novelqa",
                    book,
                    {k: v for k, v in (("aspect", _get(q, "Aspect")), ("complexity", _get(q, "Complexity"))) if v},
                )
            )
            if limit is not None and len(out) >= limit:
                return out
    if not out:
        raise InputError(f"{root}: no NovelQA questions under Data/ (expected Books/ and Data/ folders)")
    return out


def load_marathon(path: str | Path, limit: int | None = None) -> list[Example]:
    path = Path(path)
    shape = 'a JSON list of question objects, {"data": [...]}, or JSONL (.jsonl) with one object a line'
    if path.suffix == ".jsonl":
        records: Any = [obj for _, obj in read_jsonl(path)]
    else:
        records = read_json(path, f"; a Marathon file is {shape}")
        if isinstance(records, Mapping):
            records = records.get("data", [records])
    if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
        raise InputError(f"{path}: a Marathon file is {shape}")
    out = []
    for i, r in enumerate(records):
        where = f"{path}:{i + 1}"
        qid = str(_get(r, "id", "_id", default=i))
        out.append(
            make_example(
                qid,
                str(_get(r, "context", default="")),
                _get(r, "question"),
                _options(_get(r, "options", "choices"), where),
                _get(r, "answer", "label"),
                where,
                "marathon",
                qid,
                {"type": _get(r, "type")} if _get(r, "type") else None,
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out


def score_choice(example: Example, prediction: str) -> float | None:
    """1.0 when the reply names the gold option, else 0.0; None without a gold answer."""
    gold = example.meta.get("answer_index")
    if gold is None:
        return None
    return float(parse_choice(prediction, example.choices) == gold)


__all__ = [
    "LETTERS",
    "format_options",
    "load_marathon",
    "load_novelqa",
    "parse_choice",
    "question_with_options",
    "score_choice",
]
