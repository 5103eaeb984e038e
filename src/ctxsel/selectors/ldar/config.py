"""LDAR's *policy* config: the network's settings, apart from the network, saved with every
policy and needed to run one. The CLI builds its flags from :class:`PolicyConfig` without
importing torch (``ctxsel --help`` stays fast).

Not to be confused with :mod:`ctxsel.train.ldar.config`, the *training* config (REINFORCE's
steps, batch, learning rate...), which only shapes a training run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from ctxsel.errors import InputError

Encoder = Literal["transformer", "mlp", "summary"]
Embedding = Literal["periodic", "linear"]
Head = Literal["band", "bernoulli"]


@dataclass(frozen=True)
class PolicyConfig:
    """Everything that shapes the network (saved with every checkpoint)."""

    head: Head = field(
        default="band", metadata={"help": "band: a quantile band (LDAR); bernoulli: one keep/drop decision per chunk"}
    )
    encoder: Encoder = field(
        default="transformer",
        metadata={
            "help": "transformer (LDAR), a mean-pooling MLP (Deep Sets), or summary: the same transformer "
            "over at most 128 weighted summary points of the scores (linear cost, for large N)"
        },
    )
    embedding: Embedding = field(
        default="periodic", metadata={"help": "periodic numeric embedding (LDAR) or a learnable linear one"}
    )
    d_model: int = 256
    n_layers: int = 2
    n_heads: int = 4
    ff_dim: int = 256
    n_frequencies: int = 48
    frequency_scale: float = 3.0
    head_hidden: int = 256
    dropout: float = 0.0
    #: encoder="summary" only: the most weighted points the scores become,
    #: and how many of them are the top scores kept exactly.
    summary_points: int = 128
    summary_top: int = 32

    def __post_init__(self) -> None:
        if self.head not in ("band", "bernoulli"):
            raise InputError(f"head must be 'band' or 'bernoulli', got {self.head!r}")
        if self.encoder not in ("transformer", "mlp", "summary"):
            raise InputError(f"encoder must be 'transformer', 'mlp' or 'summary', got {self.encoder!r}")
        if self.encoder == "summary":
            if self.head != "band":
                raise InputError("encoder='summary' needs head='band' (it has no per-chunk outputs)")
            if self.dropout:
                raise InputError("encoder='summary' needs dropout=0")
            if not 1 <= self.summary_top < self.summary_points:
                raise InputError(
                    f"need 1 <= summary_top < summary_points, got {self.summary_top}, {self.summary_points}"
                )
        if self.embedding not in ("periodic", "linear"):
            raise InputError(f"embedding must be 'periodic' or 'linear', got {self.embedding!r}")
        if self.d_model % self.n_heads:
            raise InputError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    def to_dict(self) -> dict[str, Any]:
        """All fields; the summary settings only for the summary encoder or when changed, so the
        config of every other network reads exactly as before the variant existed."""
        d = asdict(self)
        if self.encoder != "summary":
            for name in _SUMMARY_FIELDS:
                if d[name] == _DEFAULTS[name]:
                    del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InputError(f"unknown policy config keys {sorted(unknown)}: written by a newer ctxsel?")
        return cls(**d)

    @property
    def variant(self) -> str:
        """A short name: ``band/transformer/periodic`` is the paper's LDAR."""
        return f"{self.head}/{self.encoder}/{self.embedding}"


_SUMMARY_FIELDS = ("summary_points", "summary_top")
_DEFAULTS = {f.name: f.default for f in fields(PolicyConfig)}


__all__ = ["Embedding", "Encoder", "Head", "PolicyConfig"]
