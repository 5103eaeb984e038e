"""Metrics exactly as the papers compute them.

Retrieval (over chunk ids): context recall and precision (RAGChecker's
definitions, as the Adaptive-k code uses them), diff-k, token reduction.
Answers: SubEM, EM and token F1 with HELMET/SQuAD answer normalisation;
EM and F1 are HotpotQA's official ones (``hotpot_evaluate_v1.py``): the same
normalisation, and an F1 of 0 whenever the prediction or the gold answer is
``yes``, ``no`` or ``noanswer`` and the two differ. Over several gold
answers each score is the maximum over them (SQuAD's convention; HotpotQA
has one gold answer per question, so there it is the official number).

diff-k: ``true_k`` here is 1-based -- the rank of the lowest-ranked gold
chunk, i.e. the smallest k with 100% recall -- and ``diff_k = |k - true_k|``.
The authors' code compares k with the 0-based index of that chunk (one
less); ``diff_k_authors`` reports that variant too.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence


def context_recall(selected: Iterable[str], gold: Iterable[str]) -> float | None:
    """|selected & gold| / |gold|; None when there are no gold ids."""
    g = set(gold)
    if not g:
        return None
    return len(set(selected) & g) / len(g)


def context_precision(selected: Iterable[str], gold: Iterable[str]) -> float | None:
    """|selected & gold| / |selected|; 0 for an empty selection, None without gold."""
    g = set(gold)
    if not g:
        return None
    s = set(selected)
    return len(s & g) / len(s) if s else 0.0


def true_k(ranking: Sequence[str], gold: Iterable[str]) -> int | None:
    """1-based rank of the lowest-ranked gold chunk in a full ranking; None if
    a gold id is missing from the ranking or there is no gold."""
    g = set(gold)
    if not g:
        return None
    pos = {cid: i for i, cid in enumerate(ranking)}
    if not g <= pos.keys():
        return None
    return max(pos[x] for x in g) + 1


def diff_k(k: int, true_k_value: int | None) -> int | None:
    return None if true_k_value is None else abs(k - true_k_value)


def token_reduction(n_tokens: int, full_tokens: int) -> float:
    """Percent of the full context's tokens that were not sent."""
    if full_tokens <= 0:
        return 0.0
    return 100.0 * (1.0 - n_tokens / full_tokens)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, squeeze whitespace (SQuAD/HELMET)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def substring_exact_match(prediction: str, answers: Iterable[str]) -> float:
    """1.0 if any normalised gold answer occurs in the normalised prediction."""
    p = normalize_answer(prediction)
    return float(any(normalize_answer(a) in p for a in answers if normalize_answer(a)))


def exact_match(prediction: str, answers: Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer (official EM)."""
    p = normalize_answer(prediction)
    return float(any(normalize_answer(a) == p for a in answers))


#: Answers whose F1 is all or nothing in HotpotQA's official script.
YES_NO_ANSWERS = frozenset({"yes", "no", "noanswer"})


def f1_precision_recall(prediction: str, answer: str) -> tuple[float, float, float]:
    """(F1, precision, recall) of one prediction against one gold answer, as
    ``f1_score`` in HotpotQA's ``hotpot_evaluate_v1.py`` computes them.

    Tokens are the normalised words, counted with multiplicity. If either
    side normalises to ``yes``, ``no`` or ``noanswer`` and the two differ, all
    three are 0 (so "yes it is" against "yes" scores 0, not 0.67). No shared
    token (an empty side included) is 0.
    """
    p, g = normalize_answer(prediction), normalize_answer(answer)
    if (p in YES_NO_ANSWERS or g in YES_NO_ANSWERS) and p != g:
        return 0.0, 0.0, 0.0
    pred, gold = p.split(), g.split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall), precision, recall


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """The official HotpotQA token F1, maximised over the gold answers (0 without any)."""
    return max((f1_precision_recall(prediction, a)[0] for a in answers), default=0.0)


def answer_scores(prediction: str, answers: Sequence[str]) -> dict[str, float]:
    """``{"subem", "em", "f1"}`` of one prediction, each the maximum over ``answers``."""
    return {
        "subem": substring_exact_match(prediction, answers),
        "em": exact_match(prediction, answers),
        "f1": token_f1(prediction, answers),
    }
