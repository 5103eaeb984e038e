"""The picker's reward (paper Sec. 3.3, "Eq. 8"), as plain functions.

Eq. 8 did not survive the paper's text extraction; its three stated rules
are implemented literally, and the constants the paper does not give are
chosen here (and recorded with every trained adapter via ``describe()``):

- invalid reply (not the strict format, unknown or duplicate ids, an empty
  list): ``INVALID_REWARD = -1.0`` (the paper's fixed format penalty);
- valid and ``|S| <= |S_gold| + red_i``: ``Cov - alpha_i * max(0, |S| - |S_gold|)``
  with ``Cov = |S & S_gold| / |S_gold|`` (the paper's coverage);
- valid and ``|S| > |S_gold| + red_i``: 0.

Stage constants (ours; the paper only says red_2 < red_1 and that stage 2's
penalty is stronger):

- stage 1 (recall): ``red_1 = 3``, ``alpha_1 = 0.05``. HotpotQA needs two
  paragraphs; three spare picks let the policy keep a whole reasoning chain
  plus doubtful bridges, and the small penalty (at most 0.15) never makes a
  padded full-coverage set (0.85) worse than a half-covering one (0.5);
- stage 2 (precision): ``red_2 = 1``, ``alpha_2 = 0.25``: one spare pick at
  most, and it costs a quarter of the reward, so the exact set (1.0) beats
  gold-plus-one (0.75), which still beats missing one of two (0.5).

Because the reward at ``|S| = |S_gold| + red`` (``Cov - alpha * red``) is
above 0 and the reward one pick later is 0, the margin is a cliff, as the
paper's rule 2 says. A valid reply that covers nothing and oversamples can
go slightly below 0 (e.g. -0.25 in stage 2); it stays far above -1, so a
valid but wrong pick is always better than a malformed one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxsel.errors import InputError
from ctxsel.selectors.context_picker.picker import PickerDetails
from ctxsel.types import Example, Selection

INVALID_REWARD = -1.0


@dataclass(frozen=True, slots=True)
class StageReward:
    """One stage's margin ``red`` and oversampling penalty ``alpha``."""

    stage: int
    red: int
    alpha: float


STAGE1 = StageReward(stage=1, red=3, alpha=0.05)
STAGE2 = StageReward(stage=2, red=1, alpha=0.25)
STAGES = {1: STAGE1, 2: STAGE2}


def coverage(selected: Sequence[str], gold: Sequence[str]) -> float:
    """|S & S_gold| / |S_gold|. An empty S_gold is an error: nothing to cover."""
    g = set(gold)
    if not g:
        raise InputError("S_gold is empty: the picker reward needs a mined (non-empty) evidence set")
    return len(set(selected) & g) / len(g)


def _stage(stage: StageReward | int) -> StageReward:
    return STAGES[stage] if isinstance(stage, int) else stage


def picker_reward(selected: Sequence[str] | None, gold: Sequence[str], stage: StageReward | int = STAGE1) -> float:
    """The reward of one reply: ``selected`` is None for an invalid reply."""
    st = _stage(stage)
    if selected is None:
        return INVALID_REWARD
    n, g = len(set(selected)), len(set(gold))
    if n > g + st.red:
        return 0.0
    return coverage(selected, gold) - st.alpha * max(0, n - g)


class PickerReward:
    """The shared reward shape: ``(examples, selections) -> list[float]``.

    ``example.gold_ids`` is S_gold (the mined set); a selection counts as
    invalid when its :class:`~ctxsel.types.PickerDetails` say it is not valid -- the picker sets it,
    and a fallback selection is *not* the policy's pick, so it scores -1.
    """

    def __init__(self, stage: StageReward | int = STAGE1) -> None:
        self.stage = _stage(stage)
        self.__name__ = f"picker_stage{self.stage.stage}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": "context-picker",
            "invalid": INVALID_REWARD,
            "rule": "invalid: -1; |S| > |S_gold| + red: 0; else Cov - alpha * max(0, |S| - |S_gold|)",
            **asdict(self.stage),
        }

    def __call__(self, examples: Sequence[Example], selections: Sequence[Selection], **kw: Any) -> list[float]:
        if len(examples) != len(selections):
            raise InputError(f"got {len(examples)} examples but {len(selections)} selections")
        out = []
        for ex, sel in zip(examples, selections):
            valid = not isinstance(sel.details, PickerDetails) or sel.details.valid
            out.append(picker_reward(sel.ids if valid else None, ex.gold_ids, self.stage))
        return out


__all__ = ["INVALID_REWARD", "STAGE1", "STAGE2", "STAGES", "PickerReward", "StageReward", "coverage", "picker_reward"]
