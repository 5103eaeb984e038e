"""SAGE's replies: their formats, their parsers, and what one select() call records about them.

Constrained replies (``constrained=True``, SAGE's default): every reply with a format is asked
for under its JSON schema -- ``{"keys": [...]}`` (at most ``MAX_CONSTRAINED_KEYS`` short
strings), ``{"targets": [...]}``, ``{"verdict": "YES" | "NO"}`` for sufficiency and the
counting check, ``{"option": "<letter>", "reason": "..."}`` for each multiple-choice answer and
vote -- enforced by llama.cpp grammars or a server's ``response_format``. A reply produced under
its schema is read by the schema's strict parser; any other (``constrained=False``, or a server
that refused the schema) by the free-text parsers here. Free-form answers are never constrained.

A reply that cannot be read never crashes SAGE: it is recorded in :attr:`Run.failures` (the
Selection's ``meta["failures"]``) and a fallback is taken -- unreadable keys give way to the
question's and options' own words, an unreadable sufficiency verdict is NO, an unreadable counting
verdict is "not counting". ``Run.unreadable_verdicts / Run.verdicts`` is the share of YES/NO
verdicts that could not be read, which the eval averages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ctxsel.errors import ReplyFormatError
from ctxsel.llm.constrain import ReplyFormat, option_vote_format, string_list_format, yes_no_format
from ctxsel.scoring.keywords import words
from ctxsel.selectors.llm_calls import Calls, Reply
from ctxsel.types import LLMUsage

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_KEY_SPLIT = re.compile(r"[,;\n|]")
_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_KEY_LEAD = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022#]+)\s*")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER = re.compile(r"\b(\d+|" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


#: Constrained replies: at most this many keys (or counting targets), each at most MAX_KEY_CHARS long.
MAX_CONSTRAINED_KEYS = 10
MAX_KEY_CHARS = 40
#: Constrained multiple-choice replies: the reason after the letter is at most this long.
MAX_REASON_CHARS = 100

SUFFICIENT_FORMAT = yes_no_format("sage_sufficient")
COUNTING_FORMAT = yes_no_format("sage_is_counting")
KEYS_FORMAT = string_list_format("sage_keys", "keys", max_items=MAX_CONSTRAINED_KEYS, max_chars=MAX_KEY_CHARS)
TARGETS_FORMAT = string_list_format(
    "sage_count_targets", "targets", max_items=MAX_CONSTRAINED_KEYS, max_chars=MAX_KEY_CHARS
)
#: max_tokens for a constrained reply of each template (the JSON's own tokens on top of the free reply's).
CONSTRAINED_MAX_TOKENS = {
    "sage-sufficient": 16,
    "sage-is-counting": 16,
    "sage-keys": 128,
    "sage-count-targets": 128,
    "multiple-choice": 64,
}


def vote_format(n_options: int) -> ReplyFormat:
    """A multiple-choice answer with the option's letter first (one of the ``n_options``) and a bounded reason."""
    return option_vote_format(n_options, max_reason_chars=MAX_REASON_CHARS, name="sage_vote")


def clean_keys(keys: Sequence[str], limit: int = 32) -> list[str]:
    """Keys with list marks and markup stripped; keys without a non-stopword word, and repeats, dropped."""
    out: list[str] = []
    for part in keys:
        key = _KEY_LEAD.sub("", _TAG.sub(" ", part)).strip(" \t\"'`*.:()[]{}")
        if key and words(key) and key.lower() not in (k.lower() for k in out):
            out.append(key)
    return out[:limit]


def parse_keys(reply: str, limit: int = 32) -> list[str]:
    """Comma/semicolon/line-separated keys with list marks and markup stripped;
    keys without a non-stopword word are dropped."""
    return clean_keys(_KEY_SPLIT.split(_TAG.sub(" ", reply)), limit)


def parse_verdict(reply: str) -> bool | None:
    """YES -> True, NO -> False, the first of either word; None when neither appears."""
    m = _YES_NO.search(reply)
    return None if m is None else m.group(1).lower() == "yes"


def option_number(option: str) -> int | None:
    """The first number in an answer option (digits or a word up to twenty), or None."""
    m = _NUMBER.search(option)
    if m is None:
        return None
    tok = m.group(1).lower()
    return int(tok) if tok.isdigit() else _NUMBER_WORDS[tok]


def read_reply(reply: Reply, fmt: ReplyFormat, free: Callable[[str], Any]) -> Any:
    """A reply's value (:meth:`Reply.parse`); None when a constrained reply does not parse
    (``free`` returns None itself for a free reply it cannot read)."""
    try:
        return reply.parse(fmt, free)
    except ReplyFormatError:
        return None


class Answer(NamedTuple):
    """An answer SAGE read from the evidence: the cleaned answer, the raw reply, its call's usage."""

    text: str
    raw: str
    usage: LLMUsage


@dataclass
class Run(Calls):
    """What one select() call accumulates: its LLM calls (:class:`Calls`), the trace, the failures,
    whether a prompt went past the model's window, the window cut of the answer's evidence, and the
    YES/NO verdicts asked for (sufficiency and counting check) and how many could not be read."""

    trace: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    out_of_window: bool = False
    cut: dict[str, Any] | None = None
    verdicts: int = 0
    unreadable_verdicts: int = 0

    def verdict(self, reply: Reply, fmt: ReplyFormat) -> bool | None:
        """A YES/NO verdict, counted; None when unreadable."""
        verdict: bool | None = read_reply(reply, fmt, parse_verdict)
        self.verdicts += 1
        self.unreadable_verdicts += verdict is None
        return verdict


def key_list(reply: Reply | None, fmt: ReplyFormat, limit: int) -> list[str]:
    """The keys (or counting targets) of a reply, cleaned; [] when there is no reply or it is unreadable."""
    if reply is None:
        return []
    keys = read_reply(reply, fmt, lambda text: parse_keys(text, limit))
    return [] if keys is None else clean_keys(keys, limit)


__all__ = [
    "CONSTRAINED_MAX_TOKENS",
    "COUNTING_FORMAT",
    "KEYS_FORMAT",
    "MAX_CONSTRAINED_KEYS",
    "MAX_KEY_CHARS",
    "MAX_REASON_CHARS",
    "SUFFICIENT_FORMAT",
    "TARGETS_FORMAT",
    "Answer",
    "Run",
    "clean_keys",
    "key_list",
    "option_number",
    "parse_keys",
    "parse_verdict",
    "read_reply",
    "vote_format",
]
