"""One GRPO stage of Context-Picker's training with TRL's GRPOTrainer, and its curve.

GRPO itself is TRL's: group sampling (``num_generations`` = the paper's
group size K), group-normalised advantages, the clipped ratio objective
with decoupled clipping (``epsilon`` low, ``epsilon_high`` high) and a KL
weight ``beta``. ``num_iterations = 1`` and one optimiser step per
generation batch make pi_old the policy that sampled, as in Algorithm 2.

Activations are recomputed in the backward pass: on a CPU machine memory is
the limit, not compute. With ``share_prompt`` (on by default, not in TRL)
each question's prompt is read once for its K samples
(:mod:`.shared_prompt`); ``--no-share-prompt`` is TRL's own path.

A callback records the validation reward (greedy replies on held-out
training questions) at the start, every ``eval_every`` steps and at the
end, stops stage 1 on a plateau (no gain of ``min_delta`` for ``patience``
evaluations) and stops a stage at its time limit.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctxsel.train.context_picker.config import PickerTrainConfig
from ctxsel.train.context_picker.replies import validation_reward
from ctxsel.train.context_picker.reward import STAGES
from ctxsel.train.context_picker.rows import stage_dataset
from ctxsel.train.context_picker.trl_reward import TRLPickerReward


def stage_callback(
    stage: int,
    val_rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    cfg: PickerTrainConfig,
    curve: dict[str, Any],
    stop_on_plateau: bool,
    chat: bool,
) -> Any:
    """The TrainerCallback that fills ``curve`` and stops the stage (plateau, time limit)."""
    from transformers import TrainerCallback

    limit = cfg.stage2_seconds if stage == 2 and cfg.stage2_seconds >= 0 else cfg.stage_seconds

    class StageCallback(TrainerCallback):
        """Validation reward at the start, every ``eval_every`` steps (plateau stop) and at the end (a
        stage cut by its time limit still shows where it got), the wall time of each step and the
        stage's time limit."""

        best = -math.inf
        since_best = 0

        def _validate(self, step: int, model: Any) -> dict[str, float]:
            v = validation_reward(model, tokenizer, val_rows, stage, cfg.max_completion_length, chat)
            curve["val"].append({"step": step, **v})
            return v

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            self.started = time.perf_counter()
            if val_rows:
                v = self._validate(state.global_step, model)
                self.best = v["reward"]

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            seconds = time.perf_counter() - self.t0
            curve["seconds"].append({"step": state.global_step, "seconds": seconds})
            if os.environ.get("TQDM_DISABLE") == "1":  # no progress bar: a line per step (a step on a CPU is long)
                print(f"stage {stage}: step {state.global_step} took {seconds:.0f} s", file=sys.stderr, flush=True)
            if limit and time.perf_counter() - self.started >= limit:
                curve["stopped"] = f"time limit of {limit:g} s reached at step {state.global_step}"
                control.should_training_stop = True
            if not val_rows or cfg.eval_every <= 0 or state.global_step % cfg.eval_every:
                return
            v = self._validate(state.global_step, model)
            if v["reward"] > self.best + cfg.min_delta:
                self.best, self.since_best = v["reward"], 0
            else:
                self.since_best += 1
                if stop_on_plateau and self.since_best >= cfg.patience:
                    curve["stopped"] = f"validation reward plateaued at step {state.global_step}"
                    control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if val_rows and curve["val"][-1]["step"] != state.global_step:
                self._validate(state.global_step, model)

    return StageCallback()


def run_stage(
    model: Any,
    tokenizer: Any,
    stage: int,
    train_rows: Sequence[dict[str, Any]],
    val_rows: Sequence[dict[str, Any]],
    steps: int,
    cfg: PickerTrainConfig,
    out: Path,
    peft_config: Any = None,
    stop_on_plateau: bool = False,
    chat: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """One GRPO stage with TRL's GRPOTrainer; returns (the trained peft model, its curve)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]  # lazily exported by trl

    curve: dict[str, Any] = {
        "stage": stage,
        "reward": asdict(STAGES[stage]),
        "train": [],
        "val": [],
        "grad_norm": [],
        "seconds": [],  # wall time of each GRPO step (sampling, scoring, the update)
    }
    reward_fn = TRLPickerReward(stage)
    batch = cfg.num_generations * cfg.prompts_per_step
    args = GRPOConfig(
        output_dir=str(out / f"stage{stage}" / "trainer"),
        max_steps=steps,
        learning_rate=cfg.lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=cfg.num_generations,
        num_iterations=1,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=False,
        fp16=False,
        # see the module doc: memory, not compute, is the limit on a CPU (the shared-prompt trainer turns
        # transformers' recomputation off and recomputes per group instead)
        activation_checkpointing=True,
        use_cpu=not torch.cuda.is_available(),
        seed=cfg.seed,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=os.environ.get("TQDM_DISABLE") == "1",  # what `ctxsel train --no-progress` sets
    )
    trainer_cls = GRPOTrainer
    if cfg.share_prompt:
        from ctxsel.train.context_picker.shared_prompt import SharedPromptGRPOTrainer

        trainer_cls = SharedPromptGRPOTrainer
    trainer = trainer_cls(
        model=model,
        reward_funcs=[reward_fn],  # type: ignore[list-item]  # a callable object; TRL's hint wants a function
        args=args,
        train_dataset=stage_dataset(train_rows, stage, tokenizer, chat, cfg.shuffle_candidates),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[stage_callback(stage, val_rows, tokenizer, cfg, curve, stop_on_plateau, chat)],
    )
    trainer.train()
    for i, log in enumerate(h for h in trainer.state.log_history if "reward" in h):
        step = int(log.get("step", i + 1))
        # the norm before clipping (max_grad_norm 1.0), as the Trainer logs it: after clipping it is <= 1 always
        curve["grad_norm"].append({"step": step, "grad_norm": float(log.get("grad_norm", math.nan))})
        curve["train"].append(
            {
                "step": step,
                "reward": float(log["reward"]),
                "reward_std": float(log.get("reward_std", math.nan)),
                "valid": reward_fn.valid[i] if i < len(reward_fn.valid) else None,
            }
        )
    curve["steps"] = int(trainer.state.global_step)
    return trainer.model, curve


__all__ = ["run_stage", "stage_callback"]
