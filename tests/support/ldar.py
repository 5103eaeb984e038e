"""A small LDAR policy and plain chunks, shared by the selector and training tests (they need torch)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ctxsel.selectors.ldar.band import LDARBand
from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig
from ctxsel.types import Chunk, Selection

SMALL: dict[str, Any] = dict(d_model=32, ff_dim=32, n_frequencies=8, head_hidden=32)


def chunks(n: int, tokens: int = 10) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text="t", position=i, n_tokens=tokens) for i in range(n)]


def _inv_softplus(y: float) -> float:
    y = y - 1e-3  # MIN_CONCENTRATION
    return y + math.log(-math.expm1(-y))


def fixed_policy(q_l: float, q_d: float, concentration: float = 50.0, **cfg: Any) -> LDARPolicy:
    """A band policy whose Betas do not depend on the input: means q_l and q_d."""
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg}))
    with torch.no_grad():
        head = linear(p.heads)
        head.weight.zero_()
        params = [q_l * concentration, (1 - q_l) * concentration, q_d * concentration, (1 - q_d) * concentration]
        head.bias.copy_(torch.tensor([_inv_softplus(v) for v in params]))
    return p


def linear(module: nn.Module | None) -> nn.Linear:
    """A policy's head layer (None in the other head's policy), to set its weights by hand."""
    assert isinstance(module, nn.Linear)
    return module


def band(sel: Selection) -> tuple[int, int]:
    """The ranks ``l..u`` a band policy kept (a Bernoulli head has no band)."""
    d = sel.details_as(LDARBand)
    assert d.l is not None and d.u is not None
    return d.l, d.u
