"""``hotpotqa-long``: HotpotQA questions over one ~139k-token pool.

Built exactly as shared/data/hotpotqa/README.md defines it (after HELMET):
the pool is every unique paragraph of the file, one chunk per paragraph,
text ``"{title}: {paragraph}"``, id = title; every question sees the whole
pool in one fixed order (sorted by title, then shuffled with
``random.Random(0)``); its gold chunks are its supporting-fact titles.

HotpotQA (Yang et al., 2018), CC BY-SA 4.0. The data file is not shipped
with ctxsel: pass its path, or set ``CTXSEL_HOTPOTQA``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from ctxsel.datasets.jsonl import read_json
from ctxsel.errors import InputError
from ctxsel.types import Chunk, Example

FILENAME = "hotpot_dev_distractor_100.json"


def find_hotpotqa_file(path: str | Path | None = None) -> Path:
    """The explicit path, else $CTXSEL_HOTPOTQA, else a ``shared/data/hotpotqa``
    folder beside the working directory or this checkout."""
    candidates: list[Path] = []
    if path is not None:
        p = Path(path)
        candidates.append(p / FILENAME if p.is_dir() else p)
    else:
        if os.environ.get("CTXSEL_HOTPOTQA"):
            candidates.append(Path(os.environ["CTXSEL_HOTPOTQA"]))
        for base in (Path.cwd(), *Path(__file__).resolve().parents):
            candidates.append(base / "shared" / "data" / "hotpotqa" / FILENAME)
            candidates.append(base.parent / "shared" / "data" / "hotpotqa" / FILENAME)
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "HotpotQA file not found; pass --hotpotqa PATH (or path=...) to "
        f"{FILENAME}, or set CTXSEL_HOTPOTQA. Looked in: " + ", ".join(str(c) for c in candidates[:4])
    )


def load_hotpotqa_long(path: str | Path | None = None, limit: int | None = None) -> list[Example]:
    src = find_hotpotqa_file(path)
    shape = "a JSON list of HotpotQA records (question, answer, context, supporting_facts), as in the shared data"
    items: list[dict[str, Any]] = read_json(src, f"; expected {shape}")
    if not isinstance(items, list) or not all(
        isinstance(it, dict) and {"question", "answer", "context", "supporting_facts"} <= it.keys() for it in items
    ):
        raise InputError(f"{src}: expected {shape}")
    paragraphs: dict[str, tuple[str, list[str]]] = {}
    for item in items:
        for title, sents in zip(item["context"]["title"], item["context"]["sentences"]):
            text = f"{title}: {''.join(sents)}"
            if title in paragraphs and paragraphs[title][0] != text:
                raise InputError(f"paragraph title {title!r} appears with two different texts in {src}")
            paragraphs[title] = (text, list(sents))
    order = sorted(paragraphs)
    random.Random(0).shuffle(order)
    pool = [
        Chunk(id=t, text=paragraphs[t][0], doc_id="hotpotqa-pool", position=i, meta={"sentences": paragraphs[t][1]})
        for i, t in enumerate(order)
    ]
    examples = []
    for i, item in enumerate(items if limit is None else items[:limit]):
        gold = list(dict.fromkeys(item["supporting_facts"]["title"]))
        examples.append(
            Example(
                id=f"hotpotqa-{i:03d}",
                question=item["question"],
                chunks=pool,
                gold_ids=gold,
                answers=[item["answer"]],
                meta={"type": item.get("type"), "level": item.get("level")},
            )
        )
    return examples
