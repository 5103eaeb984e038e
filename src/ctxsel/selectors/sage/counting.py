"""SAGE's counting path (Algorithm 3): a counting question is answered by counting, never by a guess.

The LLM says whether the question asks how many times something occurs; if so it names the thing
and its variants, and the answer is the exact number of their mentions in the whole text (the
option nearest to it for a multiple-choice question).

Where the paper is silent: an unreadable counting verdict is "not counting", and a counting
question whose targets cannot be read, or whose options hold no number, is explored instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ctxsel.datasets.multiple_choice import LETTERS, question_with_options
from ctxsel.llm.constrain import ReplyFormat
from ctxsel.llm.prompts import SAGE_COUNT_TARGETS, SAGE_IS_COUNTING, PromptTemplate
from ctxsel.selectors.llm_calls import Reply
from ctxsel.selectors.sage.graph import SentenceGraph
from ctxsel.selectors.sage.replies import COUNTING_FORMAT, TARGETS_FORMAT, Run, key_list, option_number
from ctxsel.selectors.sage.trace import CountingStep

#: One counted call (template, prompt, max_tokens, reply format): the reply, or None when the
#: prompt exceeds the model's window.
Ask = Callable[[PromptTemplate, str, int, ReplyFormat], Reply | None]


class Counted(NamedTuple):
    """A counting question's answer, the sentences that mention its target, and why."""

    answer: str
    sentences: list[int]
    why: str


def count(ask: Ask, run: Run, graph: SentenceGraph, question: str, options: list[str], max_keys: int) -> Counted | None:
    """Algorithm 3, or None when the question is not a counting one (or cannot be counted)."""
    q = question_with_options(question, options)
    got = ask(SAGE_IS_COUNTING, SAGE_IS_COUNTING.render(query=q), 8, COUNTING_FORMAT)
    if got is None:
        return None
    verdict = run.verdict(got, COUNTING_FORMAT)
    if verdict is None:
        run.failures.append(f"counting verdict unreadable ({got.text[:80]!r}): treated as not counting")
    if not verdict:
        run.trace.append({"step": "counting-check", "counting": False, "raw": got.text[:200]})
        return None
    variants = key_list(
        ask(SAGE_COUNT_TARGETS, SAGE_COUNT_TARGETS.render(query=q), 48, TARGETS_FORMAT), TARGETS_FORMAT, max_keys
    )
    if not variants:
        run.failures.append("counting question but no target could be read: explored instead")
        return None
    n, where = graph.count_mentions(variants)
    step: CountingStep = {
        "step": "counting",
        "variants": variants,
        "count": n,
        "sentences": [graph.vertices[i].id for i in where],
        "used": False,
    }
    if options:
        numbers = [option_number(o) for o in options]
        if all(x is None for x in numbers):
            run.failures.append("counting question but no option holds a number: explored instead")
            run.trace.append(dict(step))
            return None
        known = {i: x for i, x in enumerate(numbers) if x is not None}
        best = min(known, key=lambda i: abs(known[i] - n))
        answer = f"{LETTERS[best]}. {options[best]}"
    else:
        answer = str(n)
    step["used"] = True
    run.trace.append(dict(step))
    why = f"counting question: {variants[0]!r} ({len(variants)} variants) occurs {n} times in {len(where)} sentences"
    return Counted(answer, where, why)


__all__ = ["Ask", "Counted", "count"]
