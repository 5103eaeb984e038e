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

With ``constrained=True`` (off by default: rewriting feeds training, which
should see what the model writes unaided) the prompt asks for
``{"rewrites": ["...", ...]}`` (:data:`REWRITE_JSON`, :func:`rewrites_format`:
exactly ``n`` non-empty strings of bounded length) and the request carries
that schema; the reply is read by the schema's strict parser and then
checked by the same rules (questions, distinct from the original and each
other).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

from ctxsel.errors import InputError, InvalidRewrites, ReplyFormatError
from ctxsel.llm.base import LLMClient
from ctxsel.llm.constrain import ReplyFormat
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

REWRITE_JSON = PromptTemplate(
    "query-rewrite-json",
    1,
    "Rewrite the question below in {n} different ways. Each rewrite must ask for exactly the same answer, "
    "use different wording, and stay one sentence ending in a question mark. Reply with one JSON object on one "
    'line and nothing else: {{"rewrites": ["<rewrite 1>", ..., "<rewrite {n}>"]}}.{retry}\n\n'
    "Question: {question}\nReply:",
)

#: The longest rewrite a constrained reply may write (characters).
MAX_REWRITE_CHARS = 300

_LINE = re.compile(r"^(\d+)\.\s*(.*)$")


def _norm(s: str) -> str:
    return " ".join(s.lower().split()).rstrip("?. ")


def rewrites_format(n: int = N_REWRITES) -> ReplyFormat:
    """``{"rewrites": [...]}``: exactly ``n`` non-empty strings of at most ``MAX_REWRITE_CHARS``; parses to the list."""
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    item = {"type": "string", "minLength": 1, "maxLength": MAX_REWRITE_CHARS}
    schema = {
        "type": "object",
        "properties": {"rewrites": {"type": "array", "items": item, "minItems": n, "maxItems": n}},
        "required": ["rewrites"],
        "additionalProperties": False,
    }
    return ReplyFormat("query_rewrites", schema, lambda obj: obj["rewrites"])


def check_rewrites(rewrites: Sequence[str], question: str, n: int = N_REWRITES) -> list[str]:
    """The rewrites, stripped, if there are ``n`` non-empty questions, all different; else :class:`InvalidRewrites`."""
    if len(rewrites) != n:
        raise InvalidRewrites(f"expected {n} rewrites, got {len(rewrites)}")
    out: list[str] = []
    seen = {_norm(question)}
    for i, q in enumerate(rewrites, start=1):
        q = str(q).strip()
        if not q:
            raise InvalidRewrites(f"rewrite {i} is empty")
        if not q.endswith("?"):
            raise InvalidRewrites(f"rewrite {i} is not a question (it must end with '?')")
        if _norm(q) in seen:
            raise InvalidRewrites(f"rewrite {i} repeats the question or another rewrite")
        seen.add(_norm(q))
        out.append(q)
    return out


def parse_rewrites_json(text: str, question: str, n: int = N_REWRITES) -> list[str]:
    """The ``n`` rewrites of a ``{"rewrites": [...]}`` reply (:data:`REWRITE_JSON`), strictly."""
    try:
        rewrites = rewrites_format(n).parse(text)
    except ReplyFormatError as e:
        raise InvalidRewrites(str(e)) from None
    return check_rewrites([" ".join(r.split()) for r in rewrites], question, n)


def parse_rewrites(text: str, question: str, n: int = N_REWRITES) -> list[str]:
    """The ``n`` rewrites of a reply (which continues after the prompt's ``1.``)."""
    body = "1." + text if not text.lstrip().startswith("1.") else text.strip()
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
    if len(lines) != n:
        raise InvalidRewrites(f"expected {n} numbered lines, got {len(lines)}")
    rewrites: list[str] = []
    for i, ln in enumerate(lines, start=1):
        m = _LINE.match(ln)
        if not m or int(m.group(1)) != i:
            raise InvalidRewrites(f"line {i} does not start with '{i}.'")
        rewrites.append(m.group(2).strip())
    return check_rewrites(rewrites, question, n)


def rewrite_query(
    llm: LLMClient,
    question: str,
    n: int = N_REWRITES,
    retries: int = 1,
    temperature: float = 0.0,
    *,
    constrained: bool = False,
) -> dict[str, Any]:
    """``{"rewrites": [...], "errors": [...], "calls": int}``; rewrites is empty after ``1 + retries`` invalid replies.

    ``constrained=True`` asks for the JSON reply under its schema (see the module doc).
    """
    template = REWRITE_JSON if constrained else REWRITE
    client = for_template(llm, template)
    q = " ".join(question.split())
    errors: list[str] = []
    for _ in range(1 + retries):
        retry = f"\nYour previous reply was rejected: {errors[-1]}." if errors else ""
        if constrained:
            reply = client.complete(
                REWRITE_JSON.render(n=str(n), question=q, retry=retry),
                max_tokens=(MAX_REWRITE_CHARS // 3 + 4) * n + 8,
                temperature=temperature,
                stop=list(REWRITE_JSON.stop),
                reply_format=rewrites_format(n),
            )
            parse = parse_rewrites_json  # the prompt asked for JSON, whether or not the server enforced it
        else:
            reply = client.complete(
                REWRITE.render(n=str(n), question=q, retry=retry),
                max_tokens=40 * n,
                temperature=temperature,
                stop=[*REWRITE.stop, f"\n{n + 1}."],
            )
            parse = parse_rewrites
        try:
            return {"rewrites": parse(reply.text, question, n), "errors": errors, "calls": len(errors) + 1}
        except InvalidRewrites as e:
            errors.append(str(e))
    return {"rewrites": [], "errors": errors, "calls": len(errors)}


def split_records(records: Sequence[dict[str, Any]], ids: Collection[str]) -> list[dict[str, Any]]:
    """The kept records whose question is in ``ids`` (one side of the dataset's split), each expanded
    into the original question plus its rewrites.

    The caller splits the *dataset's* question ids (``ctxsel.datasets.splits``, as ``ctxsel eval
    --split`` does), so a question and its rewrites are always on one side, and the held-out side is
    the same whichever questions mining kept. Each output row has ``query_id`` (the original id) and
    ``question``.
    """
    out = []
    for r in records:
        if not r.get("kept") or r["id"] not in ids:
            continue
        for j, q in enumerate([r["question"], *r.get("rewrites", [])]):
            out.append({**r, "query_id": r["id"], "variant": j, "question": q})
    return out


__all__ = [
    "MAX_REWRITE_CHARS",
    "N_REWRITES",
    "REWRITE",
    "REWRITE_JSON",
    "check_rewrites",
    "parse_rewrites",
    "parse_rewrites_json",
    "rewrite_query",
    "rewrites_format",
    "split_records",
]
