"""The LDAR policy network: similarity scores in, a distribution over bands out.

Architecture (paper Sec. 4.1 and App. C.1, sizes from Table 4)::

    s_i (one cosine per chunk, a set of N values)
      -> numeric embedding of each score        periodic (sin/cos of learned frequencies) -> linear
      -> layer norm                             (ablation: a learnable linear embedding s*w + b)
      -> encoder                                2-layer bidirectional transformer, 4 heads, d = 256,
                                                feed-forward 256, padding mask
                                                (ablation: per-token MLP + masked mean pooling)
      -> attention pooling                      linear scorer per token, softmax over tokens, weighted sum
      -> small MLP                              g = ReLU(W g + b), one hidden layer of 256
      -> four linear heads + softplus           (alpha_L, beta_L), (alpha_D, beta_D)

    q_L ~ Beta(alpha_L, beta_L),  q_D ~ Beta(alpha_D, beta_D),  q_U = q_L + (1 - q_L) * q_D

so q_L <= q_U <= 1 always (strictly q_L < q_U whenever q_L < 1 and q_D > 0).
The Bernoulli ablation (Fig. 3 right) replaces the band head by one logit per
chunk, read from the encoder's per-token output.

Choices where the paper is silent, written down here:

- No positional encoding: the input is the *set* of scores (a transformer
  without positions and attention pooling are permutation invariant), so the
  policy accepts any N, including N larger than any seen in training; the
  scores are passed in ascending order anyway (Algorithm 1 sorts them).
- Raw cosines go in, not standardised ones: the paper's policy reacts to how
  high the similarities are ("if passages with high semantic similarity
  exist ... focuses narrowly"), which per-query standardisation would hide.
- Periodic embedding: 48 frequencies initialised from N(0, sigma = 3)
  (Gorishniy et al. tune sigma per dataset; 3 resolves differences of about
  0.01-0.1 between cosines in [-1, 1]), no ReLU after the linear layer (the
  issue's "periodic -> linear -> layer norm").
- Encoder layers are ``torch.nn.TransformerEncoderLayer`` (post-norm, ReLU)
  with dropout 0: REINFORCE is noisy enough.
- Concentrations are softplus(z) + 1e-3 so a Beta never degenerates.
- "Learnable embedding" (Table 9) is read as Gorishniy et al.'s linear
  embedding of a scalar; "MLP" (D.9) as Deep Sets: the same per-score
  embedding, a 2-layer per-token MLP, a masked mean, then the same head.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

Encoder = Literal["transformer", "mlp"]
Embedding = Literal["periodic", "linear"]
Head = Literal["band", "bernoulli"]

MIN_CONCENTRATION = 1e-3
#: Samples are kept this far inside (0, 1) (a Beta with a concentration
#: below 1 has an infinite density at 0 or 1, and q_L < q_U must hold).
LOGPROB_EPS = 1e-6


@dataclass(frozen=True)
class PolicyConfig:
    """Everything that shapes the network (saved with every checkpoint)."""

    head: Head = "band"
    encoder: Encoder = "transformer"
    embedding: Embedding = "periodic"
    d_model: int = 256
    n_layers: int = 2
    n_heads: int = 4
    ff_dim: int = 256
    n_frequencies: int = 48
    frequency_scale: float = 3.0
    head_hidden: int = 256
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.head not in ("band", "bernoulli"):
            raise ValueError(f"head must be 'band' or 'bernoulli', got {self.head!r}")
        if self.encoder not in ("transformer", "mlp"):
            raise ValueError(f"encoder must be 'transformer' or 'mlp', got {self.encoder!r}")
        if self.embedding not in ("periodic", "linear"):
            raise ValueError(f"embedding must be 'periodic' or 'linear', got {self.embedding!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown policy config keys {sorted(unknown)}: written by a newer ctxsel?")
        return cls(**d)

    @property
    def variant(self) -> str:
        """A short name: ``band/transformer/periodic`` is the paper's LDAR."""
        return f"{self.head}/{self.encoder}/{self.embedding}"


class PeriodicEmbedding(nn.Module):
    """Gorishniy et al. (2022): [sin(2 pi c x), cos(2 pi c x)] with learned c, then linear."""

    def __init__(self, d_model: int, n_frequencies: int, scale: float) -> None:
        super().__init__()
        self.frequencies = nn.Parameter(torch.randn(n_frequencies) * scale)
        self.linear = nn.Linear(2 * n_frequencies, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, N] -> [B, N, d]
        v = 2 * math.pi * x.unsqueeze(-1) * self.frequencies
        return self.linear(torch.cat([torch.sin(v), torch.cos(v)], dim=-1))


class LinearEmbedding(nn.Module):
    """The ablation's learnable embedding of a scalar: x * w + b."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.linear = nn.Linear(1, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.unsqueeze(-1))


class AttentionPooling(nn.Module):
    """softmax over tokens of a linear score, then the weighted sum of tokens."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.scorer = nn.Linear(d_model, 1)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = self.scorer(h).squeeze(-1).masked_fill(~mask, float("-inf"))
        w = torch.softmax(logits, dim=-1)
        return torch.einsum("bn,bnd->bd", w, h)


@dataclass
class PolicyOutput:
    """Band head: the four Beta concentrations, each [B]. Bernoulli head: logits [B, N]."""

    alpha_l: torch.Tensor | None = None
    beta_l: torch.Tensor | None = None
    alpha_d: torch.Tensor | None = None
    beta_d: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    # -- band head -------------------------------------------------------------
    def betas(self) -> tuple[torch.distributions.Beta, torch.distributions.Beta]:
        assert self.alpha_l is not None and self.beta_l is not None
        assert self.alpha_d is not None and self.beta_d is not None
        return (torch.distributions.Beta(self.alpha_l, self.beta_l),
                torch.distributions.Beta(self.alpha_d, self.beta_d))

    def mean_band(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_L, q_D) at the mean of each Beta: ctxsel's deterministic policy."""
        assert self.alpha_l is not None and self.beta_l is not None
        assert self.alpha_d is not None and self.beta_d is not None
        return (self.alpha_l / (self.alpha_l + self.beta_l),
                self.alpha_d / (self.alpha_d + self.beta_d))

    def sample_band(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_L, q_D) drawn from their Betas, kept 1e-6 inside (0, 1).

        float32 Beta draws can round to exactly 0 or 1 when a concentration
        is small; keeping them inside makes q_L < q_U hold strictly and the
        log-probability finite. (The top rank stays reachable through
        ``band_ranks(snap_top=True)``.)
        """
        dl, dd = self.betas()
        lo, hi = LOGPROB_EPS, 1 - LOGPROB_EPS
        return dl.sample().clamp(lo, hi), dd.sample().clamp(lo, hi)

    def band_log_prob(self, q_l: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
        dl, dd = self.betas()
        lo, hi = LOGPROB_EPS, 1 - LOGPROB_EPS
        return dl.log_prob(q_l.clamp(lo, hi)) + dd.log_prob(q_d.clamp(lo, hi))

    def band_entropy(self) -> torch.Tensor:
        dl, dd = self.betas()
        return dl.entropy() + dd.entropy()

    # -- Bernoulli head ----------------------------------------------------------
    def bernoulli_log_prob(self, picks: torch.Tensor) -> torch.Tensor:
        """Sum over real (unpadded) chunks of log Bernoulli(picks | sigmoid(logits))."""
        assert self.logits is not None and self.mask is not None
        lp = -F.binary_cross_entropy_with_logits(self.logits, picks.to(self.logits.dtype), reduction="none")
        return (lp * self.mask).sum(-1)


def upper_quantile(q_l: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
    """q_U = q_L + (1 - q_L) * q_D: in [q_L, 1] by construction."""
    return q_l + (1 - q_l) * q_d


class LDARPolicy(nn.Module):
    """pi_theta(band | scores). ``forward(scores [B, N], mask [B, N]) -> PolicyOutput``."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or PolicyConfig()
        d = config.d_model
        if config.embedding == "periodic":
            self.embed: nn.Module = PeriodicEmbedding(d, config.n_frequencies, config.frequency_scale)
        else:
            self.embed = LinearEmbedding(d)
        self.embed_norm = nn.LayerNorm(d)
        if config.encoder == "transformer":
            layer = nn.TransformerEncoderLayer(d, config.n_heads, dim_feedforward=config.ff_dim,
                                               dropout=config.dropout, batch_first=True)
            self.encoder: nn.Module = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
            self.pool: nn.Module | None = AttentionPooling(d)
        else:
            self.encoder = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
            self.pool = None
        self.mlp = nn.Sequential(nn.Linear(d, config.head_hidden), nn.ReLU())
        if config.head == "band":
            self.heads = nn.Linear(config.head_hidden, 4)  # the four linear heads, stacked
            self.token_head: nn.Module | None = None
        else:
            self.heads = None
            self.token_head = nn.Linear(d, 1)

    def encode(self, scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token states [B, N, d] and the pooled summary [B, d]."""
        x = self.embed_norm(self.embed(scores))
        if self.config.encoder == "transformer":
            pad = None if bool(mask.all()) else ~mask
            h = self.encoder(x, src_key_padding_mask=pad)
            assert self.pool is not None
            return h, self.pool(h, mask)
        h = self.encoder(x)
        m = mask.unsqueeze(-1).to(h.dtype)
        return h, (h * m).sum(1) / m.sum(1).clamp_min(1.0)

    @torch.no_grad()
    def infer(self, scores: torch.Tensor, mask: torch.Tensor | None = None) -> PolicyOutput:
        """``forward`` without gradients, through the memory-efficient attention kernel.

        In eval mode PyTorch's TransformerEncoderLayer takes a "fast path"
        that materialises the N x N attention matrix per head (1.6 GB at
        N = 10,000). With dropout 0, training mode computes the same function
        (the outputs are identical) through ``scaled_dot_product_attention``,
        whose CPU kernel does not (about 0.1 GB, and faster), so inference
        runs the encoder in training mode when dropout is 0.
        """
        was_training = self.training
        self.train(self.config.dropout == 0.0)
        try:
            return self(scores, mask)
        finally:
            self.train(was_training)

    def forward(self, scores: torch.Tensor, mask: torch.Tensor | None = None) -> PolicyOutput:
        if scores.dim() == 1:
            scores = scores.unsqueeze(0)
        if mask is None:
            mask = torch.ones_like(scores, dtype=torch.bool)
        if not bool(mask.any(dim=-1).all()):
            raise ValueError("every row needs at least one real (unpadded) score")
        scores = scores.masked_fill(~mask, 0.0)
        h, z = self.encode(scores, mask)
        if self.heads is not None:
            c = F.softplus(self.heads(self.mlp(z))) + MIN_CONCENTRATION
            return PolicyOutput(c[:, 0], c[:, 1], c[:, 2], c[:, 3], mask=mask)
        assert self.token_head is not None
        logits = self.token_head(h).squeeze(-1).masked_fill(~mask, -30.0)
        return PolicyOutput(logits=logits, mask=mask)


def pad_batch(rows: list[Any], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack score vectors of different lengths: (scores [B, N_max], mask [B, N_max])."""
    n_max = max(len(r) for r in rows)
    x = torch.zeros(len(rows), n_max, dtype=dtype)
    mask = torch.zeros(len(rows), n_max, dtype=torch.bool)
    for i, r in enumerate(rows):
        t = torch.as_tensor(r, dtype=dtype)
        x[i, : len(t)] = t
        mask[i, : len(t)] = True
    return x, mask


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["LDARPolicy", "PolicyConfig", "PolicyOutput", "count_parameters", "pad_batch", "upper_quantile"]
