"""LDAR: Learning Distraction-Aware Retrieval ("Beyond RAG vs. Long-Context",
paper 001 in shared/papers): a small policy reads the query-chunk similarity
distribution and picks a quantile band of the ranked chunks, trained with
REINFORCE against a reward (the reader LLM's correctness, or gold labels).

    band.py        Algorithm 1: quantiles -> ranks l..u, and LDARBand, the record (numpy only)
    policy.py      the network: periodic embeddings, transformer, attention pooling, Beta heads
    config.py      PolicyConfig: the network's settings (torch-free)
    checkpoint.py  safetensors + JSON policies (no pickle)
    selector.py    the ``ldar`` Selector (``ldar[policy=PATH]``)
    score_maps.py  other scorers' scores carried onto the policy's scale (quantile matching, bundled)

Training (REINFORCE with an EMA baseline) lives in :mod:`ctxsel.train.ldar`.
Importing this package loads nothing heavy; ``selector``, ``policy`` and ``checkpoint`` import torch.
"""

from __future__ import annotations

from typing import Any

from ctxsel.selectors.ldar.band import LDARBand, band_positions, band_ranks, select_band


def __getattr__(name: str) -> Any:
    if name == "LDAR":
        from ctxsel.selectors.ldar.selector import LDAR

        return LDAR
    if name in ("LDARPolicy", "PolicyConfig"):
        from ctxsel.selectors.ldar import policy

        return getattr(policy, name)
    raise AttributeError(name)


__all__ = ["LDAR", "LDARBand", "LDARPolicy", "PolicyConfig", "band_positions", "band_ranks", "select_band"]
