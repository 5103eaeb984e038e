"""``hotpotqa-long``: HotpotQA questions over one ~139k-token pool.

Built as HELMET builds its long HotpotQA task:
the pool is every unique paragraph of the file, one chunk per paragraph,
text ``"{title}: {paragraph}"``, id = title; every question sees the whole
pool in one fixed order (sorted by title, then shuffled with
``random.Random(0)``); its gold chunks are its supporting-fact titles.

HotpotQA (Yang et al., 2018), CC BY-SA 4.0. The 100-question file ships
inside the package (``ctxsel/data/hotpotqa/``, gzip, with its licence
beside it), so ``--dataset hotpotqa-long`` works on any install; a path
(``--hotpotqa PATH``) or ``$CTXSEL_HOTPOTQA`` overrides it, plain JSON or
gzip. Nothing outside the install is searched: a folder beside the
checkout is not a place a user's install has.
"""

from __future__ import annotations

import os
import random
from importlib.resources import files
from pathlib import Path
from typing import Any

from ctxsel.datasets.jsonl import read_json
from ctxsel.errors import InputError
from ctxsel.types import Chunk, Example

FILENAME = "hotpot_dev_distractor_100.json"


def bundled_hotpotqa_file() -> Path:
    """The copy inside the package (gzip)."""
    return Path(str(files("ctxsel") / "data" / "hotpotqa" / (FILENAME + ".gz")))


def find_hotpotqa_file(path: str | Path | None = None) -> Path:
    """The explicit path (a file, or a folder holding ``FILENAME``), else $CTXSEL_HOTPOTQA, else the
    bundled copy."""
    if path is None and os.environ.get("CTXSEL_HOTPOTQA"):
        path = os.environ["CTXSEL_HOTPOTQA"]
    if path is None:
        return bundled_hotpotqa_file()
    p = Path(path)
    if p.is_dir():
        p = p / FILENAME
    if not p.is_file():
        raise FileNotFoundError(
            f"HotpotQA file not found: {p} (from --hotpotqa, path= or $CTXSEL_HOTPOTQA); "
            "leave them unset to use the copy bundled with ctxsel"
        )
    return p


def load_hotpotqa_long(path: str | Path | None = None, limit: int | None = None) -> list[Example]:
    src = find_hotpotqa_file(path)
    shape = "a JSON list of HotpotQA records (question, answer, context, supporting_facts)"
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
