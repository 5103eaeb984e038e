"""Context-Picker's training rows: each question's candidate pool built as at inference, its prompt
text, and the split of whole questions into training and validation rows."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ctxsel.llm.hf_client import model_text
from ctxsel.query import Query
from ctxsel.selectors.context_picker.picker import candidate_pool
from ctxsel.selectors.context_picker.prompt import PREFILL, render_prompt
from ctxsel.types import Example


def picker_rows(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Example],
    scorer: Any,
    n_tokens: int = 2000,
    max_candidates: int = 20,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Training rows ``{query_id, question, passages, gold}`` (gold: 1-based numbers in the pool).

    ``records`` are mined records, already expanded with rewrites
    (:func:`.rewrite.split_records`); the pool is built for each question
    variant with ``scorer``, as the picker builds it at inference.
    """
    import numpy as np

    rows, skipped, trimmed = [], 0, 0
    for r in records:
        qid = r.get("query_id", r["id"])
        ex = examples[qid]
        scores = np.asarray(scorer.score(r["question"], ex.chunks), dtype=np.float64)
        pool = candidate_pool(Query(r["question"], ex.chunks, scores), None, n_tokens, max_candidates)
        pos = {cid: i + 1 for i, cid in enumerate(pool.ids)}
        gold = [pos[c] for c in r["s_gold"] if c in pos]
        if not gold:
            skipped += 1
            continue
        trimmed += len(gold) < len(r["s_gold"])
        rows.append(
            {"query_id": qid, "question": r["question"], "passages": [c.text for c in pool.chunks], "gold": gold}
        )
    return rows, {"rows": len(rows), "skipped_no_gold_in_pool": skipped, "gold_partly_outside_pool": trimmed}


def prompt_text(tokenizer: Any, row: dict[str, Any], stage: int, chat: bool) -> str:
    """The text a model reads for ``row``'s picker prompt: what inference sends (the plain prompt,
    ending in the prefill), through the chat template when the base is a chat model."""
    return model_text(tokenizer, render_prompt(row["question"], row["passages"], stage), chat, PREFILL)


def prompt_ids(tokenizer: Any, row: dict[str, Any], stage: int, chat: bool) -> list[int]:
    """:func:`prompt_text` as token ids (a chat template brings its own special tokens)."""
    return list(tokenizer(prompt_text(tokenizer, row, stage, chat), add_special_tokens=not chat)["input_ids"])


def shuffled_row(row: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``row`` with its candidates in a random order and its gold numbers following them."""
    order = list(range(len(row["passages"])))
    rng.shuffle(order)
    number = {old + 1: new + 1 for new, old in enumerate(order)}
    return {**row, "passages": [row["passages"][i] for i in order], "gold": [number[g] for g in row["gold"]]}


def stage_dataset(rows: Sequence[dict[str, Any]], stage: int, tokenizer: Any, chat: bool, shuffle: float = 0.0) -> Any:
    """A stage's GRPO dataset (``prompt``, ``gold``, ``n_candidates``); a share ``shuffle`` of the
    rows shows its pool in a random order."""
    from datasets import Dataset

    rng = random.Random(stage)  # the same prompts for a stage whatever ran before it
    shown = [shuffled_row(r, rng) if shuffle and rng.random() < shuffle else r for r in rows]
    return Dataset.from_list(
        [
            {
                "prompt": prompt_text(tokenizer, r, stage, chat),
                "gold": r["gold"],
                "n_candidates": len(r["passages"]),
            }
            for r in shown
        ]
    )


def split_train_val(
    rows: Sequence[dict[str, Any]], val_fraction: float = 0.2, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Validation rows for the plateau check: whole questions (all their rewrites) held out of training."""
    qids = sorted({r["query_id"] for r in rows})
    if len(qids) < 2:
        return list(rows), []
    random.Random(seed).shuffle(qids)
    n_val = max(1, round(val_fraction * len(qids)))
    val = set(qids[:n_val])
    return [r for r in rows if r["query_id"] not in val], [
        r for r in rows if r["query_id"] in val and r.get("variant", 0) == 0
    ]


__all__ = ["picker_rows", "prompt_ids", "prompt_text", "shuffled_row", "split_train_val", "stage_dataset"]
