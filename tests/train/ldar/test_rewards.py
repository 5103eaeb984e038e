"""Reward functions: label F-beta, LLM correctness (cached per band), cost regularisation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxsel.llm.base import Completion
from ctxsel.reader import Reader
from ctxsel.selectors.ldar.band import LDARBand
from ctxsel.train.ldar.rewards import (
    CostRegularized,
    LabelReward,
    LLMCorrectnessReward,
    band_key,
    describe_reward,
    fbeta,
    label_reward,
)
from ctxsel.types import Chunk, Example, LLMUsage, Selection

CHUNKS = [Chunk(f"c{i}", f"text {i}", position=i, n_tokens=10 * (i + 1)) for i in range(6)]
EX = Example("q1", "Who?", CHUNKS, gold_ids=["c0", "c3"], answers=["Marlowe"])


def sel(ids: list[str], l: int | None = None, u: int | None = None) -> Selection:
    chunks = [c for i in ids for c in CHUNKS if c.id == i]
    return Selection(
        ids=ids,
        scores=[None] * len(ids),
        chunks=chunks,
        method="t",
        config={},
        explanation="",
        n_candidates=len(CHUNKS),
        details=LDARBand(len(CHUNKS), l=l, u=u),
    )


@pytest.mark.parametrize(
    ("r", "p", "beta", "expected"),
    [
        (1.0, 2 / 7, 2.0, 2 / 3),
        (0.5, 0.5, 2.0, 0.5),
        (0.0, 0.0, 2.0, 0.0),
        (1.0, 0.5, 1.0, 2 / 3),
        (1.0, 2 / 991, 2.0, 10 / 999),
    ],
)
def test_fbeta(r, p, beta, expected) -> None:
    assert fbeta(r, p, beta) == pytest.approx(expected)


def test_label_reward_values() -> None:
    rew = LabelReward(2.0)
    out = rew([EX] * 4, [sel(["c0", "c3"]), sel(["c0"]), sel(["c1", "c2"]), sel([])])
    assert out == pytest.approx([1.0, 5 * 0.5 / (4 + 0.5), 0.0, 0.0])
    assert label_reward([EX], [sel(["c0", "c1", "c3"])], beta=1.0) == pytest.approx([0.8])
    assert describe_reward(rew) == {"name": "label", "metric": "F2 of gold-chunk recall and precision", "beta": 2.0}
    with pytest.raises(ValueError, match="no gold_ids"):
        rew([Example("x", "?", CHUNKS)], [sel(["c0"])])
    with pytest.raises(ValueError, match="2 examples but 1 selections"):
        rew([EX, EX], [sel(["c0"])])
    with pytest.raises(ValueError, match="beta must be"):
        LabelReward(0)


class FakeLLM:
    model_id = "fake-llm"

    def __init__(self, answer: str = "Edith Marlowe") -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def complete(self, prompt: Any, **kw: Any) -> Completion:
        self.prompts.append(prompt)
        return Completion(self.answer + "\n", usage=LLMUsage(1, 10, 2), model=self.model_id)


def test_llm_reward_is_subem_and_pays_each_band_once(tmp_path: Path) -> None:
    llm = FakeLLM()
    cache = tmp_path / "rewards.jsonl"
    rew = LLMCorrectnessReward(Reader(llm), cache_path=cache, namespace="ds|scorer")
    a = sel(["c0", "c3"], l=5, u=6)
    b = sel(["c1"], l=2, u=2)
    assert rew([EX, EX, EX], [a, b, sel(["c0", "c3"], l=5, u=6)]) == [1.0, 1.0, 1.0]
    assert len(llm.prompts) == 2 and (rew.calls, rew.hits) == (2, 1)
    # a new reward object on the same file and setup pays nothing
    again = LLMCorrectnessReward(Reader(llm), cache_path=cache, namespace="ds|scorer")
    assert again([EX, EX], [a, b]) == [1.0, 1.0]
    assert len(llm.prompts) == 2 and again.calls == 0
    # another setup (here: another scorer) does not reuse those answers
    wrong = FakeLLM("Nobody")
    other = LLMCorrectnessReward(Reader(wrong), cache_path=cache, namespace="ds|other-scorer")
    assert other([EX], [a]) == [0.0]
    assert len(wrong.prompts) == 1
    assert describe_reward(rew)["name"] == "llm" and describe_reward(rew)["reader"] == "fake-llm"


def test_band_key() -> None:
    assert band_key(EX, sel(["c0"], l=3, u=9)) == "q1|3|9"
    assert band_key(EX, sel(["c3", "c0"])) == band_key(EX, sel(["c0", "c3"]))  # Bernoulli picks: by the set
    assert band_key(EX, sel(["c3"])) != band_key(EX, sel(["c0"]))


def test_llm_reward_needs_gold_answers() -> None:
    rew = LLMCorrectnessReward(Reader(FakeLLM()))
    with pytest.raises(ValueError, match="no gold answers"):
        rew([Example("x", "?", CHUNKS, gold_ids=["c0"])], [sel(["c0"], l=1, u=1)])


def test_cost_regularised() -> None:
    full = sum(c.n_tokens for c in CHUNKS)  # 210
    rew = CostRegularized(LabelReward(2.0), 0.5)
    out = rew([EX, EX], [sel(["c0", "c3"]), sel([c.id for c in CHUNKS])])
    assert out[0] == pytest.approx(1.0 - 0.5 * 50 / full)
    assert out[1] == pytest.approx(fbeta(1.0, 2 / 6) - 0.5)
    assert describe_reward(rew)["cost_weight"] == 0.5 and describe_reward(rew)["name"] == "label"
    with pytest.raises(ValueError, match="cost weight"):
        CostRegularized(LabelReward(), -1)


class TooLong(FakeLLM):
    def complete(self, prompt: Any, **kw: Any) -> Completion:
        from ctxsel.errors import LLMContextLengthError

        self.prompts.append(prompt)
        raise LLMContextLengthError("prompt of 40000 tokens > n_ctx 8192")


def test_llm_reward_scores_a_band_the_reader_cannot_fit_as_zero(tmp_path: Path) -> None:
    llm = TooLong()
    rew = LLMCorrectnessReward(Reader(llm), cache_path=tmp_path / "r.jsonl")
    assert rew([EX, EX], [sel(["c0"], l=1, u=9), sel(["c0"], l=1, u=9)]) == [0.0, 0.0]
    assert rew.overflows == 1 and len(llm.prompts) == 1  # cached like any other band
    from ctxsel.errors import LLMContextLengthError

    with pytest.raises(LLMContextLengthError):
        LLMCorrectnessReward(Reader(TooLong()), overflow="raise")([EX], [sel(["c0"], l=1, u=2)])
