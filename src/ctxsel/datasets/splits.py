"""Fixed, seeded train/test splits (the LDAR paper's 8:2 split).

The split depends only on the example ids, the fraction and the seed: ids
are sorted, shuffled with ``random.Random(seed)`` and the first
round(fraction * n) become the training set. ``ctxsel train`` and
``ctxsel eval --split`` use the same function, so "the 20 held-out
questions" of hotpotqa-long are the same everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from ctxsel.errors import InputError
from ctxsel.types import Example

DEFAULT_TRAIN_FRACTION = 0.8
DEFAULT_SEED = 0


def split_ids(
    ids: Sequence[str], train_fraction: float = DEFAULT_TRAIN_FRACTION, seed: int = DEFAULT_SEED
) -> tuple[list[str], list[str]]:
    """(train ids, test ids), each in sorted order."""
    if not 0 < train_fraction < 1:
        raise InputError(f"train fraction must be in (0, 1), got {train_fraction}")
    if len(set(ids)) != len(ids):
        raise InputError("example ids must be unique to split them")
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    n_train = round(train_fraction * len(order))
    if len(order) >= 2:
        n_train = min(max(n_train, 1), len(order) - 1)
    return sorted(order[:n_train]), sorted(order[n_train:])


def split_examples(
    examples: Sequence[Example],
    part: Literal["train", "test"],
    train_fraction: float = DEFAULT_TRAIN_FRACTION,
    seed: int = DEFAULT_SEED,
) -> list[Example]:
    """The examples of one part, in their original order."""
    if part not in ("train", "test"):
        raise InputError(f"split part must be 'train' or 'test', got {part!r}")
    train, test = split_ids([e.id for e in examples], train_fraction, seed)
    keep = set(train if part == "train" else test)
    return [e for e in examples if e.id in keep]


__all__ = ["DEFAULT_SEED", "DEFAULT_TRAIN_FRACTION", "split_examples", "split_ids"]
