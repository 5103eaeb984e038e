"""A small LDAR policy and plain chunks, shared by the selector and training tests (they need torch)."""

from __future__ import annotations

import math

import torch

from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig
from ctxsel.types import Chunk

SMALL = dict(d_model=32, ff_dim=32, n_frequencies=8, head_hidden=32)


def chunks(n: int, tokens: int = 10) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text="t", position=i, n_tokens=tokens) for i in range(n)]


def _inv_softplus(y: float) -> float:
    y = y - 1e-3  # MIN_CONCENTRATION
    return y + math.log(-math.expm1(-y))


def fixed_policy(q_l: float, q_d: float, concentration: float = 50.0, **cfg: object) -> LDARPolicy:
    """A band policy whose Betas do not depend on the input: means q_l and q_d."""
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg}))
    with torch.no_grad():
        p.heads.weight.zero_()
        params = [q_l * concentration, (1 - q_l) * concentration, q_d * concentration, (1 - q_d) * concentration]
        p.heads.bias.copy_(torch.tensor([_inv_softplus(v) for v in params]))
    return p
