"""SAGE's importance score (Algorithm 2): how much the answer moves when the evidence is garbled.

importance = 1 - mean cos(emb(a), emb(a')) over ``n_perturb`` answers a' read from perturbed
copies of the evidence, a being the answer read from the evidence as it is. The LLM is shown the
score when it judges whether the evidence suffices.

Where the paper is silent (each choice is a SAGE parameter): ``n_perturb = 3`` perturbed answers
(the paper gives no n); lambda ~ U(``lambda_low`` = 0.3, 1] is the probability that a word is
perturbed (:mod:`.noise`); the embeddings are the project's (MiniLM, run by SAGE's ``backend``,
which ``ctxsel eval`` sets from its ``--backend``). The clean answer is the same call as a
free-form final answer, so the caller reuses the last round's rather than asking twice.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ctxsel.selectors.sage.noise import disturb, draw_lambda
from ctxsel.selectors.sage.replies import Answer


def importance(
    answer: Callable[[str], Answer | None],
    embed: Callable[[list[str]], np.ndarray],
    context: str,
    rng: np.random.Generator,
    *,
    n_perturb: int,
    lambda_low: float,
) -> tuple[float | None, Answer | None, list[float]]:
    """Algorithm 2 on ``context``: (the importance, None when it could not be computed; the clean
    answer; the lambdas drawn). ``answer`` reads a context (None when its prompt exceeds the
    model's window, which ends the computation); ``embed`` returns unit-length rows."""
    clean = answer(context)
    if clean is None or n_perturb == 0:
        return None, clean, []
    lambdas: list[float] = []
    answers: list[str] = []
    for _ in range(n_perturb):
        lam = draw_lambda(rng, lambda_low)
        got = answer(disturb(context, lam, rng))
        if got is None:
            return None, clean, lambdas
        lambdas.append(round(lam, 3))
        answers.append(got.text)
    vecs = embed([clean.text, *answers])
    return float(1.0 - np.mean(vecs[1:] @ vecs[0])), clean, lambdas


__all__ = ["importance"]
