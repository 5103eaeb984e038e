"""selectors/llm_calls.py: the named Reply and the call bookkeeping the LLM methods share.

The client is a scripted one that records what it was asked (the boundary); Reply and Calls are real.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ctxsel.errors import LLMContextLengthError, ReplyFormatError
from ctxsel.llm.base import Completion
from ctxsel.llm.constrain import yes_no_format
from ctxsel.selectors.llm_calls import Calls, Reply
from ctxsel.types import LLMUsage

VERDICT = yes_no_format("verdict")


class Scripted:
    """Replies in order, each ``(text, constrained)``; records every call's keyword arguments."""

    model_id = "scripted"

    def __init__(self, *replies: tuple[str, bool]) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    def complete(self, prompt: Any, **kw: Any) -> Completion:
        self.calls.append({"prompt": prompt, **kw})
        text, constrained = self.replies.pop(0)
        return Completion(text, usage=LLMUsage(1, 10 * len(self.calls), 2, 3), constrained=constrained)


def test_a_reply_is_a_named_frozen_record() -> None:
    reply = Reply("YES", LLMUsage(1, 5, 1), True)
    assert (reply.text, reply.usage, reply.constrained) == ("YES", LLMUsage(1, 5, 1), True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        reply.text = "NO"  # type: ignore[misc]


def test_a_constrained_reply_is_read_by_the_strict_parser_any_other_by_the_free_one() -> None:
    strict = Reply('{"verdict": "NO"}', LLMUsage(), constrained=True)
    free = Reply('{"verdict": "NO"}', LLMUsage(), constrained=False)
    assert strict.parse(VERDICT, str.upper) is False
    assert free.parse(VERDICT, str.upper) == '{"VERDICT": "NO"}'
    assert strict.parse(None, str.upper) == '{"VERDICT": "NO"}'  # no format asked for: the free parser
    with pytest.raises(ReplyFormatError):
        Reply("maybe", LLMUsage(), constrained=True).parse(VERDICT, str.upper)


def test_calls_sum_usage_and_count_only_replies_produced_under_the_format_asked_for() -> None:
    llm = Scripted(("YES", True), ("no", False), ("x", True))
    calls = Calls()
    (first,) = calls.ask(llm, "p1", max_tokens=8, fmt=VERDICT)
    (second,) = calls.ask(llm, "p2", max_tokens=8, fmt=VERDICT)
    (third,) = calls.ask(llm, "p3", max_tokens=8)  # a client that says constrained with no format asked: not counted
    assert (first.constrained, second.constrained, third.constrained) == (True, False, False)
    assert calls.constrained_replies == 1
    assert calls.usage == LLMUsage(3, 10 + 20 + 30, 6, 9)
    assert first.usage == LLMUsage(1, 10, 2, 3)


def test_ask_sends_the_format_or_else_the_reply_start_and_nothing_else() -> None:
    llm = Scripted(("a", True), ("b", False), ("c", False))
    calls = Calls()
    calls.ask(llm, "p", max_tokens=16, stop=["\n"], fmt=VERDICT, reply_start='{"x": "')
    calls.ask(llm, "p", max_tokens=4, temperature=0.5, seed=7, reply_start='{"x": "')
    calls.ask(llm, "p", max_tokens=4)
    assert llm.calls[0] == {
        "prompt": "p",
        "max_tokens": 16,
        "temperature": 0.0,
        "stop": ["\n"],
        "seed": None,
        "reply_format": VERDICT,
    }
    assert llm.calls[1] == {
        "prompt": "p",
        "max_tokens": 4,
        "temperature": 0.5,
        "stop": None,
        "seed": 7,
        "reply_start": '{"x": "',
    }
    assert "reply_start" not in llm.calls[2] and "reply_format" not in llm.calls[2]


def test_n_replies_to_one_prompt_take_consecutive_seeds_and_are_all_counted() -> None:
    llm = Scripted(("A", False), ("B", False), ("C", False))
    calls = Calls()
    got = calls.ask(llm, "p", 3, max_tokens=4, temperature=0.8, seed=11)
    assert [r.text for r in got] == ["A", "B", "C"]
    assert [c["seed"] for c in llm.calls] == [11, 12, 13]
    assert calls.usage.calls == 3 and calls.usage.tokens_in == 60


def test_errors_are_the_callers() -> None:
    class TooLong:
        model_id = "too-long"

        def complete(self, prompt: Any, **kw: Any) -> Completion:
            raise LLMContextLengthError("prompt of 9,000 tokens, window 8,192")

    calls = Calls()
    with pytest.raises(LLMContextLengthError):
        calls.ask(TooLong(), "p", max_tokens=4)
    assert calls.usage == LLMUsage() and calls.constrained_replies == 0
