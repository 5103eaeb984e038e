"""Reading in an eval: one selection's answer fields, and many selections read in one batch.

A reader whose client generates many prompts at once (the transformers
reader on a GPU: :mod:`ctxsel.llm.hf_reader`) is handed a whole group of
questions' selections, every method's, in one
:meth:`~ctxsel.reader.Reader.answer_many`; any other reads one at a time
as before. Both write the same row fields.
"""

from __future__ import annotations

import logging
from typing import Any

from ctxsel.datasets.multiple_choice import question_with_options
from ctxsel.grading import score_answer
from ctxsel.judge import LLMJudge
from ctxsel.llm.aggregation import answer_kind
from ctxsel.llm.base import has_complete_many
from ctxsel.reader import Answer, Reader
from ctxsel.types import Example, Selection

logger = logging.getLogger(__name__)

#: Questions whose selections one batch reads, when the reader's client batches.
DEFAULT_READ_GROUP = 64


def read_group(reader: Reader | None, asked: int | None = None) -> int:
    """Questions read together: ``asked``, else :data:`DEFAULT_READ_GROUP` for a client that batches,
    else 1 (one question at a time)."""
    if asked is not None:
        return max(1, int(asked))
    return DEFAULT_READ_GROUP if reader is not None and has_complete_many(reader.client) else 1


def selects_in_threads(reader: Reader) -> bool:
    """Whether a group's questions select in threads of their own: when the reader's client gathers
    one-prompt calls from many threads into batches (:class:`~ctxsel.llm.batcher.BatchingClient`)."""
    from ctxsel.llm.batcher import BatchingClient

    client: Any = reader.client
    while client is not None:
        if isinstance(client, BatchingClient):
            return True
        client = getattr(client, "client", None)
    return False


def read_fields(ex: Example, sel: Selection, ans: Answer, judge: LLMJudge | None, select_s: float) -> dict[str, Any]:
    """The row fields of one answer: its score, the window cut, LLM calls, tokens and time."""
    structured = ans.meta.get("structured")
    scored = score_answer(ex, ans.text, judge, structured)
    cut = ans.meta.get("cut")
    return {
        "answer": ans.text,
        **scored,
        # a structured answer: its kind, items or parse error, and 1/0 for a valid reply (the mean: valid share)
        **({"structured": structured, "answer_valid": 1.0 if structured["valid"] else 0.0} if structured else {}),
        # the reader's window: 1 when the selection was cut to fit, and by how many tokens (cl100k)
        "cut": 1.0 if cut else 0.0,
        "tokens_cut": (cut["tokens_before"] - cut["tokens_after"]) if cut else 0,
        **({"cut_detail": cut} if cut else {}),
        "llm_calls": ans.usage.calls,
        "tokens_in": ans.usage.tokens_in,
        "tokens_out": ans.usage.tokens_out,
        # prompt tokens the backend took from its prefix cache instead of evaluating (llama.cpp's KV cache)
        "tokens_reused": ans.usage.tokens_reused,
        # what the call that wrote the answer read (all calls are in tokens_in)
        "answer_tokens_in": sel.answer.tokens_in if sel.answer else ans.usage.tokens_in - sel.usage.tokens_in,
        # a routed selector's own LLM time is inside select_s; the reader's is ans.seconds
        "wall_s": round(select_s + (0.0 if sel.answer is not None else ans.seconds), 3),
        "route": sel.answer.route if sel.answer else None,
    }


def kind_of(ex: Example, reader: Reader) -> str | None:
    """The answer kind a structured reader answers in (the data's own, else guessed from the question)."""
    return answer_kind(ex.question, ex.meta) if reader.structured else None


def error_fields(stage: str, e: BaseException) -> dict[str, Any]:
    return {"error": f"{type(e).__name__}: {e}", "error_stage": stage}


def warn(ex: Example, method: str, stage: str, e: BaseException) -> None:
    logger.warning(
        "example %s, method %s: %s failed (%s: %s); recorded as the row's error, the run goes on",
        ex.id,
        method,
        stage,
        type(e).__name__,
        e,
    )


def read_one(
    ex: Example, method: str, sel: Selection, reader: Reader, judge: LLMJudge | None, select_s: float
) -> dict[str, Any]:
    """One selection read now: its answer fields, or the read's error fields."""
    try:
        ans = reader.answer(question_with_options(ex.question, ex.choices), sel, kind=kind_of(ex, reader))
        return read_fields(ex, sel, ans, judge, select_s)
    except Exception as e:
        warn(ex, method, "read", e)
        return error_fields("read", e)


def read_many(
    items: list[tuple[Example, dict[str, Any], Selection, float]], reader: Reader, judge: LLMJudge | None
) -> None:
    """Read every (example, row, selection, select seconds) in one batch; each row gets its fields."""
    answers = reader.answer_many(
        [(question_with_options(ex.question, ex.choices), sel) for ex, _, sel, _ in items],
        [kind_of(ex, reader) for ex, _, _, _ in items],
    )
    for (ex, row, sel, select_s), ans in zip(items, answers, strict=True):
        try:
            if isinstance(ans, Exception):
                raise ans
            row.update(read_fields(ex, sel, ans, judge, select_s))
        except Exception as e:
            warn(ex, row["method"], "read", e)
            row.update(error_fields("read", e))


__all__ = [
    "DEFAULT_READ_GROUP",
    "error_fields",
    "read_fields",
    "read_group",
    "read_many",
    "read_one",
    "selects_in_threads",
    "warn",
]
