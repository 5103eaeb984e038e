"""Query rewriting for augmentation (paper Sec. 3.2, "Data augmentation").

An LLM writes five meaning-preserving, lexically different rewrites of each
question. Every rewrite inherits its question's S_gold and candidate pool,
and the train/test split is made over the *original* question ids
(:func:`split_records`), so all rewrites of a question land on the same
side -- no paraphrase of a test question is ever trained on.

The reply format (ours; the paper gives no prompt): exactly ``n`` lines
numbered ``1.`` .. ``n.``, each a non-empty question (ending in ``?``) that
differs from the original and from the others (case- and
space-insensitive). Generation stops where an ``n+1``-th line would begin,
since a base model keeps numbering past the request. Only the form is
checked, not the meaning: a careful run reviews a sample of rewrites. Anything else
is invalid: the LLM is asked once more with the error stated, and a second
invalid reply leaves the question without rewrites (recorded, not guessed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ctxsel.datasets.splits import DEFAULT_SEED, DEFAULT_TRAIN_FRACTION, split_ids
from ctxsel.llm.base import LLMClient
from ctxsel.llm.prompts import PromptTemplate
from ctxsel.reader import for_template

N_REWRITES = 5

REWRITE = PromptTemplate(
    "query-rewrite",
    1,
    "Rewrite the question below in {n} different ways. Each rewrite must ask for exactly the same answer, "
    "use different wording, and stay one sentence. Write one rewrite per line, numbered 1. to {n}., "
    "and nothing else.{retry}\n\nQuestion: {question}\nRewrites:\n1.",
    stop=("\n\n",),
)

_LINE = re.compile(r"^(\d+)\.\s*(.*)$")


class InvalidRewrites(ValueError):
    pass


def _norm(s: str) -> str:
    return " ".join(s.lower().split()).rstrip("?. ")


def parse_rewrites(text: str, question: str, n: int = N_REWRITES) -> list[str]:
    """The ``n`` rewrites of a reply (which continues after the prompt's ``1.``)."""
    body = "1." + text if not text.lstrip().startswith("1.") else text.strip()
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
    if len(lines) != n:
        raise InvalidRewrites(f"expected {n} numbered lines, got {len(lines)}")
    out: list[str] = []
    seen = {_norm(question)}
    for i, ln in enumerate(lines, start=1):
        m = _LINE.match(ln)
        if not m or int(m.group(1)) != i:
            raise InvalidRewrites(f"line {i} does not start with '{i}.'")
        q = m.group(2).strip()
        if not q:
            raise InvalidRewrites(f"rewrite {i} is empty")
        if not q.endswith("?"):
            raise InvalidRewrites(f"rewrite {i} is not a question (it must end with '?')")
        if _norm(q) in seen:
            raise InvalidRewrites(f"rewrite {i} repeats the question or another rewrite")
        seen.add(_norm(q))
        out.append(q)
    return out


def rewrite_query(llm: LLMClient, question: str, n: int = N_REWRITES, retries: int = 1,
                  temperature: float = 0.0) -> dict[str, Any]:
    """``{"rewrites": [...], "errors": [...], "calls": int}``; rewrites is empty after ``1 + retries`` invalid replies."""
    client = for_template(llm, REWRITE)
    errors: list[str] = []
    for _ in range(1 + retries):
        retry = f"\nYour previous reply was rejected: {errors[-1]}." if errors else ""
        reply = client.complete(REWRITE.render(n=str(n), question=" ".join(question.split()), retry=retry),
                                max_tokens=40 * n, temperature=temperature, stop=[*REWRITE.stop, f"\n{n + 1}."])
        try:
            return {"rewrites": parse_rewrites(reply.text, question, n), "errors": errors, "calls": len(errors) + 1}
        except InvalidRewrites as e:
            errors.append(str(e))
    return {"rewrites": [], "errors": errors, "calls": len(errors)}


def split_records(records: Sequence[dict[str, Any]], part: str, train_fraction: float = DEFAULT_TRAIN_FRACTION,
                  seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """One side of the split, each kept record expanded into the original question plus its rewrites.

    The split is over the original ids (the same function ``ctxsel train``
    uses), so a question and its rewrites are always on one side. Each
    output row has ``query_id`` (the original id) and ``question``.
    """
    if part not in ("train", "test"):
        raise ValueError(f"part must be 'train' or 'test', got {part!r}")
    kept = [r for r in records if r.get("kept")]
    if len(kept) < 2:
        raise ValueError(f"{len(kept)} mined example(s) kept; a train/test split needs at least 2")
    train, test = split_ids([r["id"] for r in kept], train_fraction, seed)
    side = set(train if part == "train" else test)
    out = []
    for r in kept:
        if r["id"] not in side:
            continue
        for j, q in enumerate([r["question"], *r.get("rewrites", [])]):
            out.append({**r, "query_id": r["id"], "variant": j, "question": q})
    return out


__all__ = ["N_REWRITES", "REWRITE", "InvalidRewrites", "parse_rewrites", "rewrite_query", "split_records"]
