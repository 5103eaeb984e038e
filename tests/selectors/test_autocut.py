"""Weaviate's autocut, on the vectors from Weaviate's own tests."""

from __future__ import annotations

import random

import numpy as np
import pytest

import ctxsel
from ctxsel.selectors.autocut import Autocut, autocut_k
from ctxsel.types import Chunk

WEAVIATE_A = [2, 1.95, 1.9, 0.2, 0.1, 0.1, -1]
WEAVIATE_B = [1.0, 0.98, 0.95, 0.9, 0.88, 0.87, 0.80, 0.79]


def chunks(n: int) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text="x", doc_id="d", position=i, n_tokens=1) for i in range(n)]


@pytest.mark.parametrize(
    ("scores", "jumps", "expected"),
    [
        # A: normalised minus line = [0, -.15, -.30, .10, -.033, -.20, 0];
        # maxima at 3 (interior) and 6 (last point above its two predecessors)
        (WEAVIATE_A, 1, 3),
        (WEAVIATE_A, 2, 6),
        (WEAVIATE_A, 3, 7),  # fewer than 3 jumps: keep all
        # B: [0, -.048, -.048, .048, 0, -.095, .095, 0]; maxima at 3 and 6, last point is not one
        (WEAVIATE_B, 1, 3),
        (WEAVIATE_B, 2, 6),
        (WEAVIATE_B, 3, 8),
    ],
)
def test_weaviate_vectors(scores: list[float], jumps: int, expected: int) -> None:
    assert autocut_k(np.array(scores), jumps) == expected
    # float32 as Weaviate computes them gives the same answers
    assert autocut_k(np.array(scores, dtype=np.float32), jumps) == expected


@pytest.mark.parametrize(
    ("scores", "jumps", "expected"),
    [(WEAVIATE_A, 1, 3), (WEAVIATE_A, 2, 6), (WEAVIATE_B, 1, 3), (WEAVIATE_B, 2, 6), (WEAVIATE_B, 3, 8)],
)
def test_weaviate_vectors_through_select(scores: list[float], jumps: int, expected: int) -> None:
    n = len(scores)
    sel = ctxsel.select("q", chunks(n), f"autocut@{jumps}", scores=scores)
    assert sel.k == expected
    assert sel.ids == [f"c{i}" for i in range(expected)]
    # shuffled input: same cut, same chunks (ids follow their scores)
    perm = list(range(n))
    random.Random(7).shuffle(perm)
    shuffled = [Chunk(id=f"c{p}", text="x", position=j, n_tokens=1) for j, p in enumerate(perm)]
    sel2 = ctxsel.select("q", shuffled, f"autocut@{jumps}", scores=[scores[p] for p in perm])
    assert sel2.k == expected
    assert sorted(sel2.ids) == sorted(f"c{i}" for i in range(expected))


def test_explanations() -> None:
    sel = ctxsel.select("q", chunks(7), "autocut@1", scores=WEAVIATE_A)
    assert sel.explanation == "autocut N=1: jump 1 before rank 4, kept 3 of 7"
    sel = ctxsel.select("q", chunks(7), "autocut@3", scores=WEAVIATE_A)
    assert sel.explanation == "autocut N=3: fewer than 3 jumps, kept all 7"
    assert sel.config["jumps"] == 3


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([], 0),
        ([0.5], 1),
        ([0.9, 0.1], 2),  # n = 2: the last-point rule is skipped
        ([0.3, 0.3, 0.3, 0.3], 4),  # all equal (0/0): keep all
        ([4.0, 3.0, 2.0, 1.0, 0.0], 5),  # an (exactly representable) straight line has no jump
        # last point: diff = [0, -.323, -.647, 0]; 0 > -.647 and 0 > -.323 -> cut before it
        ([1.0, 0.99, 0.98, 0.0], 3),
        # n = 3: [1, 0, -.1] -> diff [0, .409, 0]: interior maximum at 1
        ([1.0, 0.0, -0.1], 1),
        # n = 3: [1, .9, -.1] -> diff [0, -.409, 0]; the last point needs diff[-1] > diff[-3] = 0: never
        ([1.0, 0.9, -0.1], 3),
    ],
)
def test_edge_cases(scores: list[float], expected: int) -> None:
    assert autocut_k(np.array(scores, dtype=np.float64), 1) == expected


def test_interior_maximum_hand_computed() -> None:
    # [1, .9, .2, .1, 0]: norm = [0, .1, .8, .9, 1]; minus [0, .25, .5, .75, 1]
    # = [0, -.15, .30, .15, 0]: one interior maximum at 2 -> keep 2
    assert autocut_k(np.array([1.0, 0.9, 0.2, 0.1, 0.0])) == 2
    assert autocut_k(np.array([1.0, 0.9, 0.2, 0.1, 0.0]), 2) == 5


def test_jumps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="jumps must be >= 1"):
        Autocut(jumps=0)
    with pytest.raises(ValueError, match="jumps must be >= 1"):
        ctxsel.get_selector("autocut@0")


def test_default_spec_is_one_jump() -> None:
    assert ctxsel.get_selector("autocut").config()["jumps"] == 1
