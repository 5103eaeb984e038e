"""Two-stage GRPO training of the picker (paper Sec. 3.3, Algorithm 2), with TRL and LoRA.

Stage 1 (recall) trains LoRA adapters on the stage-1 prompt with the
stage-1 reward (:data:`~.reward.STAGE1`) until the validation reward
plateaus (or ``stage1_max_steps``); stage 2 (precision) continues from the
stage-1 adapters with the stage-2 prompt and reward for ``stage2_steps``
(one stage: :mod:`.stages`). Each stage saves its adapter (``OUT/stage{i}/``,
usable as ``context-picker[adapter=OUT/stage{i}]``) and the reward curves go
to ``OUT/reward_curves.{json,png}`` (training reward per step, validation
reward every ``eval_every`` steps, gradient norm, share of valid replies).

Choices where the paper is silent (all in :class:`.config.PickerTrainConfig`):

- group size K = 8, 2 questions per step, LoRA r = 16, alpha = 32 on the
  attention projections, learning rate 1e-4 (a usual LoRA rate), sampling
  temperature 1.0, replies up to 160 tokens (as the picker allows at inference);
- ``beta = 0`` (no KL term) with ``epsilon = 0.2`` and ``epsilon_high =
  0.28``: the decoupled, asymmetric clipping the paper names comes from
  DAPO, which drops the KL term; ``--beta`` restores it;
- plateau: the validation reward (greedy replies on held-out training
  questions) has not improved by ``min_delta = 0.01`` for ``patience = 3``
  evaluations;
- a reply ends at its first newline (the newline token is an end-of-reply
  token during sampling, as the ``\\n`` stop string is at inference);
- candidate pools are built exactly as at inference (:func:`.rows.picker_rows`);
  S_gold chunks that fall outside a question's pool are dropped from its
  target, and questions with none left are skipped (counted), so training
  sees the inference distribution;
- activations are recomputed in the backward pass, and each question's prompt
  is read once for its K samples (:mod:`.stages`, :mod:`.shared_prompt`);
- optional, not in the paper: ``shuffle_candidates`` shows a share of the training
  prompts' pools in a random order (gold renumbered), so that a policy cannot
  score by the retriever's rank alone (docs/methods/context-picker.md);
- ``init_adapter`` goes on training a saved adapter, so that several short runs add
  up to a longer one (with a KL term TRL's reference is then that adapter);
- an optional supervised format warm-up (:mod:`.warmup`, off by default, not in
  the paper) teaches a base model the reply format on S_gold before GRPO.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError
from ctxsel.llm.hf_client import is_bundled_base, is_chat_base, load_base
from ctxsel.train.context_picker.config import PickerTrainConfig
from ctxsel.train.context_picker.plots import plot_curves
from ctxsel.train.context_picker.replies import newline_ends_replies
from ctxsel.train.context_picker.reward import PickerReward
from ctxsel.train.context_picker.stages import run_stage
from ctxsel.train.context_picker.tiny_model import TINY, make_tiny_model
from ctxsel.train.context_picker.warmup import format_warmup


def _init_adapter(path: str, base_ref: str) -> tuple[Path, str]:
    """The stage folder an ``init_adapter`` names, checked: a trained adapter on this run's base."""
    folder = Path(path)
    meta_file = folder / "picker.json"
    if not (folder / "adapter" / "adapter_config.json").is_file() or not meta_file.is_file():
        raise InputError(
            f"--init-adapter {path}: not a trained picker's stage folder (it needs adapter/ and picker.json, "
            "as OUTPUT/stage1 or OUTPUT/stage2 of `ctxsel train context-picker`)"
        )
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if meta.get("base") != base_ref:
        raise InputError(f"--init-adapter {path} was trained on base {meta.get('base')!r}, this run's is {base_ref!r}")
    return folder, str(meta.get("adapter_sha", ""))


def adapter_digest(adapter_dir: Path) -> str:
    """picker.json's ``adapter_sha``: the first 16 hex digits of the sha256 of every file under the adapter
    folder, in path order (with a KL term TRL keeps the reference as a second adapter in adapter/ref)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in adapter_dir.rglob("*") if p.is_file()):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _save_stage(model: Any, out: Path, stage: int, base_ref: str, cfg: PickerTrainConfig, info: dict[str, Any]) -> Path:
    folder = out / f"stage{stage}"
    model.save_pretrained(str(folder / "adapter"))
    meta = {
        "base": base_ref,
        "stage": stage,
        "reward": PickerReward(stage).describe(),
        "config": asdict(cfg),
        "adapter_sha": adapter_digest(folder / "adapter"),
        **info,
    }
    (folder / "picker.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return folder


def train_picker(
    train_rows: Sequence[dict[str, Any]],
    val_rows: Sequence[dict[str, Any]],
    out: str | Path,
    cfg: PickerTrainConfig | None = None,
    info: dict[str, Any] | None = None,
    model_and_tokenizer: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """Algorithm 2: stage 1 until the validation reward plateaus, then stage 2 from its adapters
    (either stage skipped at 0 steps; both go on from ``cfg.init_adapter`` when it is set)."""
    import torch
    from peft import LoraConfig

    cfg = cfg or PickerTrainConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not train_rows:
        raise InputError("no training rows: mine evidence sets first (ctxsel mine) and check their pools")
    if model_and_tokenizer is not None or cfg.base == TINY:
        # a model made in process is saved beside the adapters, which name it relative to themselves
        model, tok = model_and_tokenizer or make_tiny_model(cfg.seed)
        model.save_pretrained(str(out / "base"))
        tok.save_pretrained(str(out / "base"))
        rel_base = "../base"
    else:
        model, tok = load_base(cfg.base)
        rel_base = cfg.base if is_bundled_base(cfg.base) else str(Path(cfg.base).resolve())
    chat = is_chat_base(cfg.base, tok)
    info = {**(info or {}), "chat": chat}  # the adapter reads prompts as it was trained on them
    newline_ends_replies(model, tok)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    if cfg.init_adapter:
        from peft import PeftModel

        folder, sha = _init_adapter(cfg.init_adapter, rel_base)
        model = PeftModel.from_pretrained(model, str(folder / "adapter"), is_trainable=True)
        lora = None  # type: ignore[assignment]  # the stages go on training the loaded adapter
        info["init_adapter"] = {"path": str(folder.resolve()), "adapter_sha": sha}
    summary: dict[str, Any] = {
        "config": asdict(cfg),
        "n_train_rows": len(train_rows),
        "n_val_rows": len(val_rows),
        **info,
    }
    if cfg.warmup_steps:
        from peft import get_peft_model

        if lora is not None:
            model = get_peft_model(model, lora)
        lora = None  # type: ignore[assignment]  # applied once: the stages train the same adapter
        summary["warmup_loss"] = format_warmup(model, tok, train_rows, cfg.warmup_steps, cfg.warmup_lr, cfg.seed, chat)
    curves: dict[str, Any] = {}
    for stage, steps in ((1, cfg.stage1_max_steps), (2, cfg.stage2_steps)):
        if steps <= 0:
            continue
        model, curves[f"stage{stage}"] = run_stage(
            model,
            tok,
            stage,
            train_rows,
            val_rows,
            steps,
            cfg,
            out,
            peft_config=lora,
            stop_on_plateau=stage == 1,
            chat=chat,
        )
        lora = None  # type: ignore[assignment]  # stage 2 goes on from stage 1's adapter
        _save_stage(model, out, stage, rel_base, cfg, info)
    (out / "reward_curves.json").write_text(json.dumps(curves, indent=1) + "\n", encoding="utf-8")
    plot_curves(out / "reward_curves.png", curves)
    summary["curves"] = {
        k: {
            "steps": v["steps"],
            "stopped": v.get("stopped"),
            "val_first": v["val"][0] if v["val"] else None,
            "val_last": v["val"][-1] if v["val"] else None,
        }
        for k, v in curves.items()
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    return {"summary": summary, "curves": curves, "model": model, "tokenizer": tok}


__all__ = ["adapter_digest", "train_picker"]
