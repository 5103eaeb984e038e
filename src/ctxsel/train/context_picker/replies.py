"""The model's own replies during training: a newline ends a reply (as the ``\\n`` stop string
does at inference), greedy replies to picker prompts, and the validation reward they earn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxsel.train.context_picker.rows import prompt_text
from ctxsel.train.context_picker.trl_reward import reply_text, score_reply


def newline_ends_replies(model: Any, tokenizer: Any) -> None:
    """Make the newline token an end-of-reply token for generation (and TRL's completion mask)."""
    ids = tokenizer.encode("\n", add_special_tokens=False)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.insert(0, tokenizer.eos_token_id)
    if len(ids) == 1 and ids[0] not in eos:
        eos.append(ids[0])
    model.generation_config.eos_token_id = eos
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id


def greedy_replies(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    stage: int,
    max_new_tokens: int,
    chat: bool = False,
    batch_size: int = 8,
    progress: bool = False,
) -> list[str]:
    """Greedy replies (up to the first newline) to ``rows``' picker prompts, ``batch_size`` at a time,
    left-padded on the model's device."""
    import torch
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    replies: list[str] = []
    try:
        with torch.no_grad():
            starts = range(0, len(rows), batch_size)
            for i in tqdm(starts, desc="picks", unit="batch", disable=not progress):
                texts = [prompt_text(tokenizer, r, stage, chat) for r in rows[i : i + batch_size]]
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat).to(model.device)
                out = model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
                new = out[:, enc["input_ids"].shape[1] :]
                replies += [reply_text(tokenizer.decode(o, skip_special_tokens=True)) for o in new]
    finally:
        tokenizer.padding_side = side
        if was_training:
            model.train()
    return replies


def validation_reward(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], stage: int, max_new_tokens: int, chat: bool = False
) -> dict[str, float]:
    """Mean reward and share of valid replies of greedy replies on ``rows``."""
    if not rows:
        return {"reward": math.nan, "valid": math.nan}
    scored = [
        score_reply(text, r["gold"], len(r["passages"]), stage)
        for text, r in zip(greedy_replies(model, tokenizer, rows, stage, max_new_tokens, chat), rows)
    ]
    return {"reward": sum(s for s, _ in scored) / len(scored), "valid": sum(v for _, v in scored) / len(scored)}


__all__ = ["greedy_replies", "newline_ends_replies", "validation_reward"]
