"""LDAR's *training* config: the REINFORCE settings (:class:`TrainConfig`), beside its trainer
(:mod:`ctxsel.train.ldar.trainer`), as TRL keeps ``*_config.py`` beside ``*_trainer.py``.

Not to be confused with :mod:`ctxsel.selectors.ldar.config`, the *policy* config: the network's
shape (:class:`~ctxsel.selectors.ldar.config.PolicyConfig`), saved with every policy and needed to
run one. This one only shapes a training run. ``ctxsel train ldar`` builds its flags from both
without importing torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ctxsel.errors import InputError


@dataclass
class TrainConfig:
    """REINFORCE settings; the defaults are the paper's Table 4."""

    steps: int = field(default=100, metadata={"help": "REINFORCE steps"})
    batch_size: int = field(default=32, metadata={"help": "questions per REINFORCE step"})
    lr: float = field(default=3e-4, metadata={"help": "Adam learning rate"})
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    baseline_ema: float = 0.5
    # Against collapse to one band on mixed data (all off by default: Table 4 lists none of them).
    baseline: Literal["ema", "question"] = field(
        default="ema",
        metadata={
            "help": "ema: one EMA of the batch means (the paper); question: each question's own EMA of its "
            "rewards (a question seen for the first time uses the batch EMA), so easy and hard questions, or "
            "data sets whose rewards differ in scale, do not pull the band one way"
        },
    )
    normalize_advantages: bool = field(
        default=False, metadata={"help": "divide a batch's advantages by their standard deviation"}
    )
    entropy_coef: float = field(
        default=0.0,
        metadata={"help": "entropy bonus: add this times the policy's mean entropy to the objective (0: none)"},
    )
    lr_schedule: Literal["constant", "cosine"] = field(
        default="constant",
        metadata={"help": "constant (the paper), or cosine decay from --lr to a tenth of it over --steps"},
    )
    seed: int = field(default=0, metadata={"help": "seed of the network's initialisation and the sampling"})
    snap_top: bool = field(
        default=True,
        metadata={"help": "use Algorithm 1's upper rank literally (the most similar chunk then needs q_U == 1)"},
    )
    threads: int = field(default=1, metadata={"help": "torch threads for training and embedding"})
    checkpoint_every: int = field(default=10, metadata={"help": "write a resumable checkpoint every N steps"})
    eval_every: int = field(
        default=10,
        metadata={
            "help": "score the deterministic policy on the training questions every N steps, at the start and "
            "the end (0: never; with --reward llm each evaluation costs one LLM call per question)"
        },
    )
    random_reference: bool = True

    def __post_init__(self) -> None:
        self.adam_betas = tuple(self.adam_betas)  # type: ignore[assignment]
        if self.steps < 0 or self.batch_size < 1:
            raise InputError(f"need steps >= 0 and batch_size >= 1, got {self.steps}, {self.batch_size}")
        if not 0 <= self.baseline_ema < 1:
            raise InputError(f"baseline_ema must be in [0, 1), got {self.baseline_ema}")
        if self.baseline not in ("ema", "question"):
            raise InputError(f"baseline must be 'ema' or 'question', got {self.baseline!r}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise InputError(f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}")
        if not self.entropy_coef >= 0:
            raise InputError(f"entropy_coef must be >= 0, got {self.entropy_coef}")
        if not (self.lr > 0 and self.adam_eps > 0 and all(0 <= b < 1 for b in self.adam_betas)):
            raise InputError(
                f"need lr > 0, adam_eps > 0 and adam_betas in [0, 1), got {self.lr}, {self.adam_eps}, {self.adam_betas}"
            )
        if self.threads < 1:
            raise InputError(f"threads must be >= 1, got {self.threads}")
        if self.checkpoint_every < 0 or self.eval_every < 0:
            raise InputError(
                f"checkpoint_every and eval_every must be >= 0 (0: never), got {self.checkpoint_every}, "
                f"{self.eval_every}"
            )

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share (steps may grow, threads may change)."""
        d = asdict(self)
        for k in ("steps", "threads", "checkpoint_every", "eval_every"):
            d.pop(k)
        d["adam_betas"] = list(d["adam_betas"])
        return d


__all__ = ["TrainConfig"]
