"""The stage reward (:mod:`.reward`) in TRL's reward-function shape, scoring sampled replies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxsel.errors import InvalidReply
from ctxsel.selectors.context_picker.prompt import parse_reply
from ctxsel.train.context_picker.reward import picker_reward


def reply_text(completion: Any) -> str:
    """A sampled completion's reply: its text up to the first newline, as at inference."""
    text = completion if isinstance(completion, str) else completion[-1]["content"]
    return text.split("\n", 1)[0]


def score_reply(text: str, gold: Sequence[int], n_candidates: int, stage: int) -> tuple[float, bool]:
    """(reward, valid) of one sampled reply against the 1-based gold numbers."""
    gold_ids = [str(g) for g in gold]
    try:
        ids = parse_reply(reply_text(text), n_candidates).ids
    except InvalidReply:
        return picker_reward(None, gold_ids, stage), False
    return picker_reward([str(i) for i in ids], gold_ids, stage), True


class TRLPickerReward:
    """The stage reward in TRL's reward-function shape:
    ``(prompts, completions, gold, n_candidates) -> list[float]``."""

    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.__name__ = f"picker_stage{stage}"
        self.valid: list[float] = []  # share of valid replies per call (one call per generation batch)

    def __call__(
        self, prompts: list[Any], completions: list[Any], gold: list[list[int]], n_candidates: list[int], **kw: Any
    ) -> list[float]:
        scored = [score_reply(c, g, n, self.stage) for c, g, n in zip(completions, gold, n_candidates)]
        self.valid.append(sum(v for _, v in scored) / max(1, len(scored)))
        return [r for r, _ in scored]


__all__ = ["TRLPickerReward", "reply_text", "score_reply"]
