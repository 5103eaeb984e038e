"""A deterministic answer score for aggregation questions: set overlap of
listed items, with numbers compared under a tolerance.

Gold answers are lists of strings, each one item of three shapes:

- ``"936"`` / ``"12.35"``: a number;
- ``"Chicago Ohare Intl"``: a text item;
- ``"UA: 12.35"``: a key with a number (one group of a GROUP BY).

The prediction is free text (a reader's answer; when it has an
``Answer:`` section, as the HoloBench prompt asks, only the text after the
last one counts). Text is compared after normalisation: Unicode NFKD with
accents dropped, lower case, ``$`` and thousands separators dropped, runs of
punctuation and space equal to one space, articles ignored.

- **Recall**: the share of gold items found in the prediction. A number is
  found when some number in the prediction matches it; a text item when its
  words appear in order (as a phrase) in the prediction; a key-value item
  when the key appears and the first number after it (within 40
  characters, before the next line or ``;``) matches the value, or else the
  last number before it on the same line.
- **Precision**: the share of predicted items that match some gold item.
  Predicted items are the lines of the answer (bullets and numbering
  stripped), each further split at commas and semicolons; two neighbouring
  pieces are joined back when only together they match a gold item (so
  ``"Korea, Rep."`` stays one item).
- **F1**: their harmonic mean.

Numbers: a gold number written without a decimal point (a count, a
maximum) must be matched exactly (``int_tol``, default 0); one with a
decimal point (an average) within ``max(abs_tol, rel_tol * |gold|)``
(defaults 0.005 and 1%).

An empty gold list means "no rows": the score is 1 when the prediction is
empty or says there is no answer, else 0. This is the lexical metric; the
LLM judge of HoloBench comes with the reader.

A structured answer (``ctxsel.llm.aggregation``) comes as its items
already: :func:`score_items` takes them as the predicted items, with no
line or comma splitting, and matches each against the gold items by the
rules above (so a structured number is right when it is the gold count
exactly, or within the tolerance of a gold average). An empty list is the
"no rows" answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

_NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_NUM_STRICT = re.compile(r"^-?\d+(?:\.\d+)?$")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ANSWER = re.compile(r"\*{0,2}\s*answer\s*\*{0,2}\s*:\s*\*{0,2}", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\d+[.)](?=\s))\s*")
_ARTICLES = {"a", "an", "the"}
_NO_ANSWER = re.compile(r"^\W*(no answer|none|n/?a|no (?:rows|results|matches)|nothing)\W*$", re.IGNORECASE)
WINDOW = 40


@dataclass(frozen=True)
class AnswerScore:
    precision: float
    recall: float
    f1: float
    n_gold: int
    n_predicted: int
    n_gold_found: int
    n_predicted_correct: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def extract_answer(text: str) -> str:
    """The text after the last ``Answer:`` label, or all of it."""
    matches = list(_ANSWER.finditer(text))
    return text[matches[-1].end() :].strip() if matches else text.strip()


def _fold(text: str) -> str:
    """Lower case, no accents, no $ or thousands separators, one space."""
    t = unicodedata.normalize("NFKD", text)
    t = "".join(ch for ch in t if not unicodedata.combining(ch)).lower()
    t = _THOUSANDS.sub("", t).replace("$", " ")
    return re.sub(r"[ \t]+", " ", t)


def _words(text: str) -> list[str]:
    """Normalised words: punctuation splits, except a decimal point or a
    leading minus inside a number."""
    toks = re.findall(r"-?\d+(?:\.\d+)?|[a-z0-9]+", _fold(text))
    return [t for t in toks if t not in _ARTICLES]


def _numbers(text: str) -> list[float]:
    return [float(m.group()) for m in _NUM.finditer(_fold(text))]


@dataclass(frozen=True)
class _Gold:
    raw: str
    key: tuple[str, ...]  # empty for a plain number
    number: float | None
    integer: bool


def _parse_gold(item: str) -> _Gold:
    s = _fold(item).strip()
    if _NUM_STRICT.match(s):
        return _Gold(item, (), float(s), "." not in s)
    m = re.match(r"^(.*\S)\s*:\s*(-?\d+(?:\.\d+)?)$", s)
    if m:
        return _Gold(item, tuple(_words(m.group(1))), float(m.group(2)), "." not in m.group(2))
    return _Gold(item, tuple(_words(item)), None, False)


def _num_ok(pred: float, gold: _Gold, rel_tol: float, abs_tol: float, int_tol: float) -> bool:
    assert gold.number is not None
    tol = int_tol if gold.integer else max(abs_tol, rel_tol * abs(gold.number))
    return abs(pred - gold.number) <= tol + 1e-9


def _phrase_spans(words: list[str], key: tuple[str, ...]) -> list[tuple[int, int]]:
    n = len(key)
    if n == 0:
        return []
    return [(i, i + n) for i in range(len(words) - n + 1) if tuple(words[i : i + n]) == key]


def _key_regex(key: tuple[str, ...]) -> re.Pattern[str]:
    body = r"(?:[\W_]+(?:a|an|the)[\W_]+|[\W_]*)".join(re.escape(w) for w in key)
    return re.compile(r"(?<![a-z0-9])" + body + r"(?![a-z0-9])")


def _found(text: str, gold: _Gold, rel_tol: float, abs_tol: float, int_tol: float) -> bool:
    """Is ``gold`` stated in ``text``?"""
    if not gold.key:
        return any(_num_ok(x, gold, rel_tol, abs_tol, int_tol) for x in _numbers(text))
    if gold.number is None:
        return bool(_phrase_spans(_words(text), gold.key))
    folded = _fold(text)
    for m in _key_regex(gold.key).finditer(folded):
        after = re.split(r"[\n;]", folded[m.end() : m.end() + WINDOW], maxsplit=1)[0]
        nums = [float(x.group()) for x in _NUM.finditer(after)]
        if nums:
            if _num_ok(nums[0], gold, rel_tol, abs_tol, int_tol):
                return True
            continue
        line_start = folded.rfind("\n", 0, m.start()) + 1
        before = folded[max(line_start, m.start() - WINDOW) : m.start()]
        nums = [float(x.group()) for x in _NUM.finditer(before)]
        if nums and _num_ok(nums[-1], gold, rel_tol, abs_tol, int_tol):
            return True
    return False


def split_items(answer: str) -> list[str]:
    """Predicted items: lines, bullets stripped, split at ``,`` and ``;``
    (commas inside numbers kept)."""
    items: list[str] = []
    for line in answer.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        protected = _THOUSANDS.sub("", line)
        items.extend(p.strip() for p in re.split(r"[;,]", protected) if p.strip())
    return items


def _is_no_answer(text: str) -> bool:
    return not text.strip() or bool(_NO_ANSWER.match(text.strip()))


def score_answer(
    prediction: str,
    gold: Sequence[str],
    *,
    rel_tol: float = 0.01,
    abs_tol: float = 0.005,
    int_tol: float = 0.0,
) -> AnswerScore:
    """Precision, recall and F1 of the gold items in a free-text answer."""
    answer = extract_answer(prediction)
    golds = [_parse_gold(g) for g in gold if str(g).strip()]
    if not golds:
        ok = 1.0 if _is_no_answer(answer) else 0.0
        return AnswerScore(ok, ok, ok, 0, 0 if ok else 1, 0, 0)
    if _is_no_answer(answer):
        return AnswerScore(0.0, 0.0, 0.0, len(golds), 0, 0, 0)

    def matches(text: str) -> bool:
        return any(_found(text, g, rel_tol, abs_tol, int_tol) for g in golds)

    found = sum(_found(answer, g, rel_tol, abs_tol, int_tol) for g in golds)
    pieces = split_items(answer)
    items: list[str] = []
    i = 0
    while i < len(pieces):
        if i + 1 < len(pieces) and not matches(pieces[i]):
            joined = pieces[i] + ", " + pieces[i + 1]
            if matches(joined) and not matches(pieces[i + 1]):
                items.append(joined)
                i += 2
                continue
        items.append(pieces[i])
        i += 1
    correct = sum(matches(it) for it in items)
    precision = correct / len(items) if items else 0.0
    recall = found / len(golds)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return AnswerScore(precision, recall, f1, len(golds), len(items), found, correct)


def score_items(
    items: Sequence[str],
    gold: Sequence[str],
    *,
    rel_tol: float = 0.01,
    abs_tol: float = 0.005,
    int_tol: float = 0.0,
) -> AnswerScore:
    """Precision, recall and F1 of a structured answer's ``items`` (each one predicted item, as written)."""
    golds = [_parse_gold(g) for g in gold if str(g).strip()]
    preds = [str(it).strip() for it in items if str(it).strip()]
    if not golds:
        ok = 0.0 if preds else 1.0
        return AnswerScore(ok, ok, ok, 0, len(preds), 0, 0)
    if not preds:
        return AnswerScore(0.0, 0.0, 0.0, len(golds), 0, 0, 0)
    found = sum(any(_found(p, g, rel_tol, abs_tol, int_tol) for p in preds) for g in golds)
    correct = sum(any(_found(p, g, rel_tol, abs_tol, int_tol) for g in golds) for p in preds)
    precision, recall = correct / len(preds), found / len(golds)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return AnswerScore(precision, recall, f1, len(golds), len(preds), found, correct)
