"""The optional supervised format warm-up (``warmup_steps``, off by default, not in the paper).

A base model whose every sample is invalid gets reward -1 for the whole
group, a zero advantage and so no gradient at all; a few supervised steps on
``prompt -> {rationale, S_gold}`` teach it the reply format before GRPO.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from ctxsel.train.context_picker.rows import prompt_ids

WARMUP_RATIONALE = "They hold the evidence."


def _target(gold: Sequence[int]) -> str:
    return WARMUP_RATIONALE + '", "ids": ' + json.dumps(list(gold)) + "}\n"


def format_warmup(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], steps: int, lr: float, seed: int = 0, chat: bool = False
) -> list[float]:
    """Supervised steps on ``prompt -> {rationale, S_gold}`` (loss on the reply only); returns the losses.

    Each step takes a random row and a random stage's prompt, so both
    stages' prompts know the format.
    """
    import torch

    if steps <= 0 or not rows:
        return []
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    model.train()
    losses = []
    for _ in range(steps):
        r = rng.choice(list(rows))
        stage = rng.choice((1, 2))
        prompt = prompt_ids(tokenizer, r, stage, chat)
        target_ids = tokenizer(_target(r["gold"]), add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + target_ids], device=model.device)
        labels = torch.tensor([[-100] * len(prompt) + target_ids], device=model.device)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


__all__ = ["WARMUP_RATIONALE", "format_warmup"]
