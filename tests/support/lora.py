"""peft LoRA weights shaped for a bundled GGUF, for the tests of trained pickers."""

from __future__ import annotations

import numpy as np


def qv_lora_weights(
    shapes: dict[str, tuple[int, ...]], rank: int, a_scale: float, b_scale: float
) -> dict[str, np.ndarray]:
    """peft's tensors of a LoRA on every q and v projection of the model whose GGUF ``shapes`` (name -> in,
    out) describe: lora_A is rank x in, lora_B out x rank (0 when ``b_scale`` is 0, as peft starts)."""
    rng = np.random.default_rng(0)
    weights = {}
    for i in range(sum(name.endswith("attn_q.weight") for name in shapes)):
        for proj, name in (("q_proj", "attn_q"), ("v_proj", "attn_v")):
            n_in, n_out = shapes[f"blk.{i}.{name}.weight"]
            stem = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            weights[f"{stem}.lora_A.weight"] = rng.normal(scale=a_scale, size=(rank, n_in)).astype(np.float32)
            weights[f"{stem}.lora_B.weight"] = (b_scale * rng.normal(size=(n_out, rank))).astype(np.float32)
    return weights
