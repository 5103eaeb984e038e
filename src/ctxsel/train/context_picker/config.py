"""Context-Picker's two-stage GRPO settings, beside its trainer (:mod:`ctxsel.train.context_picker.trainer`):
``ctxsel train context-picker`` builds its flags from :class:`PickerTrainConfig` without importing torch,
TRL or transformers."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxsel.errors import InputError
from ctxsel.llm.hf_client import GEMMA_GGUF  # the bundled Gemma 3 270M (GGUF, de-quantised into PyTorch)


@dataclass
class PickerTrainConfig:
    base: str = field(
        default="qwen-0.5b",
        metadata={
            "help": "qwen-0.5b (default) or qwen-1.5b (the bundled instruction-tuned models, de-quantised once "
            f"into the cache), {GEMMA_GGUF} (the bundled base model), tiny (random test model) or a transformers "
            "model folder"
        },
    )
    stage1_max_steps: int = field(
        default=300,
        metadata={"help": "stage 1 stops earlier when the validation reward plateaus; 0 skips stage 1"},
    )
    stage2_steps: int = field(default=150, metadata={"help": "GRPO steps of stage 2; 0 skips stage 2"})
    init_adapter: str = field(
        default="",
        metadata={
            "help": "go on training this adapter (a previous run's OUTPUT/stage1 or OUTPUT/stage2 folder, "
            "same base) instead of a new one, e.g. over several short GPU leases; with --kl-beta the KL "
            "reference is then that adapter, not the untrained model"
        },
    )
    shuffle_candidates: float = field(
        default=0.0,
        metadata={
            "help": "share of training prompts (0-1) whose candidate pool is shown in a random order, gold "
            "renumbered, so that the policy cannot score by the retriever's rank alone; validation and "
            "inference keep the ranked order (not in the paper)"
        },
    )
    share_prompt: bool = field(
        default=True,
        metadata={
            "flag": "--no-share-prompt",
            "help": "read every sample's prompt separately, as TRL does (default: each question's prompt is read "
            "once for its group of samples, the same gradients for a fraction of the compute; "
            "ctxsel.train.context_picker.shared_prompt)",
        },
    )
    eval_every: int = field(
        default=10, metadata={"flag": "--eval-every-picker", "help": "validation reward every N GRPO steps"}
    )
    patience: int = 3
    min_delta: float = 0.01
    num_generations: int = field(
        default=8, metadata={"flag": "--group-size", "help": "GRPO group size K (samples per question)"}
    )
    prompts_per_step: int = field(default=2, metadata={"help": "questions per GRPO step"})
    lr: float = field(default=1e-4, metadata={"flag": "--picker-lr", "help": "learning rate of the LoRA adapter"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    beta: float = field(
        default=0.0, metadata={"flag": "--kl-beta", "help": "KL weight (default 0, DAPO-style decoupled clipping)"}
    )
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    temperature: float = 1.0
    max_completion_length: int = field(
        default=160,
        metadata={
            "flag": "--max-reply-tokens",
            "help": "longest sampled reply in tokens; a longer one is cut and scores -1 (the picker's own "
            "max_reply_tokens at inference is 160)",
        },
    )
    warmup_steps: int = field(
        default=0, metadata={"help": "supervised format warm-up steps before GRPO (not in the paper)"}
    )
    warmup_lr: float = 1e-3
    n_tokens: int = field(
        default=2000, metadata={"flag": "--picker-tokens", "help": "candidate pool budget B in tokens"}
    )
    max_candidates: int = field(
        default=20, metadata={"help": "at most this many candidate chunks in the picker's prompt"}
    )
    stage_seconds: float = field(
        default=0.0,
        metadata={
            "help": "stop each stage after this many seconds (0: no limit); the adapter of the last step is "
            "saved, e.g. to fit a GPU lease or a CPU budget"
        },
    )
    stage2_seconds: float = field(
        default=-1.0,
        metadata={"help": "stage 2's own time limit in seconds (0: no limit; negative: --stage-seconds)"},
    )
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        """Settings no run can use are errors here, before a model loads: named by their flag where they have one."""
        if self.stage1_max_steps <= 0 and self.stage2_steps <= 0:
            raise InputError("nothing to train: --stage1-max-steps and --stage2-steps are both 0")
        if not 0.0 <= self.shuffle_candidates <= 1.0:
            raise InputError(f"--shuffle-candidates is a share of prompts, 0 to 1, not {self.shuffle_candidates:g}")
        at_least = {
            "--stage1-max-steps": (self.stage1_max_steps, 0),
            "--stage2-steps": (self.stage2_steps, 0),
            "--eval-every-picker": (self.eval_every, 0),  # 0: at the start and the end only
            "patience": (self.patience, 1),
            "--group-size": (self.num_generations, 2),  # GRPO compares a question's samples with each other
            "--prompts-per-step": (self.prompts_per_step, 1),
            "lora_r": (self.lora_r, 1),
            "--max-reply-tokens": (self.max_completion_length, 1),
            "--warmup-steps": (self.warmup_steps, 0),
            "--picker-tokens": (self.n_tokens, 1),
            "--max-candidates": (self.max_candidates, 1),
            "--threads": (self.threads, 1),
        }
        for flag, (value, low) in at_least.items():
            if value < low:
                raise InputError(f"{flag} must be at least {low}, got {value}")
        positive = {
            "--picker-lr": self.lr,
            "lora_alpha": self.lora_alpha,
            "epsilon": self.epsilon,
            "temperature": self.temperature,
            "warmup_lr": self.warmup_lr,
        }
        for flag, number in positive.items():
            if not number > 0:
                raise InputError(f"{flag} must be above 0, got {number}")
        if not self.epsilon_high >= self.epsilon:
            raise InputError(f"epsilon_high must be at least epsilon ({self.epsilon}), got {self.epsilon_high}")
        if not (self.beta >= 0 and self.min_delta >= 0 and self.stage_seconds >= 0):
            raise InputError(
                "--kl-beta, min_delta and --stage-seconds must be 0 or more, got "
                f"{self.beta}, {self.min_delta} and {self.stage_seconds}"
            )
        if not 0 <= self.lora_dropout < 1:
            raise InputError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


__all__ = ["PickerTrainConfig"]
