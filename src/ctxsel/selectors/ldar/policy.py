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

Not in the paper: ``encoder="summary"``, a linear-cost variant for large N
(band head only). The paper's encoder attends over all N scores: O(N^2) in
the attention and O(N d^2) in the per-score layers, affordable up to a few
thousand chunks (docs/methods/ldar.md has the timings). Attention through inducing
points (Set Transformer's ISAB) removes only the N^2 term: every score would still
pass through d = 256 linear layers, which alone is too slow at N = 100,000. So
the variant shrinks the *input* instead: the scores, sorted, become at most
``summary_points`` weighted points (``summarize_scores``): the
``summary_top`` most similar scores exactly (weight 1; LDAR's bands live at
the top of the ranking), and the rest as the means of rank bins whose sizes
grow geometrically down the ranking (with the defaults, 128 points of which
the top 32 exact, each bin is about 4% wider than the last at N = 1,000 and
9% at N = 100,000), each weighted by its count. The same
network (same modules, same weights' shapes) then reads the weighted points,
each weight entering as log(weight) added to the attention logits and to
the pooling logits. That is exactly the paper's network applied to the
multiset in which each point is repeated weight times (a transformer
without positions and attention pooling are functions of the empirical
distribution), so with N <= summary_points the variant *is* the paper's
network, and for larger N it sees the bulk of the distribution through
quantile summaries. Cost: one pass over the N sorted scores plus a
constant-size network, whatever N is. The paper's encoder
stays the default (it sees every score, and is affordable up to a few
thousand chunks); train the variant with ``--encoder summary``.

Fast inference (``infer``): no autograd (``torch.inference_mode``), the
encoder layers written out as one fused QKV projection, PyTorch's
``scaled_dot_product_attention`` (whose CPU kernel never materialises the
N x N matrix) and the layers' own weights; the same function as ``forward``
up to float rounding (about 1e-6 relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ctxsel.errors import InputError
from ctxsel.selectors.ldar.config import PolicyConfig

MIN_CONCENTRATION = 1e-3
#: Samples are kept this far inside (0, 1) (a Beta with a concentration
#: below 1 has an infinite density at 0 or 1, and q_L < q_U must hold).
LOGPROB_EPS = 1e-6


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

    def forward(self, h: torch.Tensor, mask: torch.Tensor, log_weights: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.scorer(h).squeeze(-1)
        logits = logits.masked_fill(~mask, float("-inf")) if log_weights is None else logits + log_weights
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
        return (
            torch.distributions.Beta(self.alpha_l, self.beta_l),
            torch.distributions.Beta(self.alpha_d, self.beta_d),
        )

    def mean_band(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_L, q_D) at the mean of each Beta: ctxsel's deterministic policy."""
        assert self.alpha_l is not None and self.beta_l is not None
        assert self.alpha_d is not None and self.beta_d is not None
        return (self.alpha_l / (self.alpha_l + self.beta_l), self.alpha_d / (self.alpha_d + self.beta_d))

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

    def bernoulli_entropy(self) -> torch.Tensor:
        """Mean entropy of the real chunks' Bernoulli picks, per question."""
        assert self.logits is not None and self.mask is not None
        p = torch.sigmoid(self.logits)
        h = F.binary_cross_entropy_with_logits(self.logits, p, reduction="none")
        return (h * self.mask).sum(-1) / self.mask.sum(-1).clamp(min=1)


def upper_quantile(q_l: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
    """q_U = q_L + (1 - q_L) * q_D: in [q_L, 1] by construction."""
    return q_l + (1 - q_l) * q_d


def summarize_scores(ascending: torch.Tensor, points: int, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At most ``points`` weighted points standing for N scores sorted ascending: (values, weights).

    N <= points: the scores themselves, weight 1. Otherwise the ``top`` largest
    scores exactly (weight 1), then the rest, by rank from the top, in
    ``points - top`` bins whose edges are geometric in the rank (from ``top``
    to N; bins that round to nothing are dropped), each bin as the mean of its
    scores with its count as weight. Weights always sum to N; the means are
    summed in float64 (float32 cumulative sums drift at N = 100,000).
    """
    n = int(ascending.shape[0])
    if n <= points:
        return ascending, torch.ones_like(ascending)
    descending = ascending.flip(0)
    edges = torch.from_numpy(_rank_edges(n, points, top))
    cs = torch.zeros(n + 1, dtype=torch.float64)
    torch.cumsum(descending[top:].double(), 0, out=cs[top + 1 :])
    counts = edges[1:] - edges[:-1]
    means = (cs[edges[1:]] - cs[edges[:-1]]) / counts
    values = torch.cat([descending[:top], means.to(ascending.dtype)])
    weights = torch.cat([torch.ones(top, dtype=ascending.dtype), counts.to(ascending.dtype)])
    return values, weights


def _rank_edges(n: int, points: int, top: int) -> Any:
    import numpy as np

    key = (n, points, top)
    got = _EDGES.get(key)
    if got is None:
        bins = points - top
        e = np.rint(top * (n / top) ** (np.arange(bins + 1) / bins)).astype(np.int64)
        e[0], e[-1] = top, n
        got = np.unique(e)
        if len(_EDGES) > 256:
            _EDGES.clear()
        _EDGES[key] = got
    return got


_EDGES: dict[tuple[int, int, int], Any] = {}


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
        if config.encoder in ("transformer", "summary"):
            layer = nn.TransformerEncoderLayer(
                d, config.n_heads, dim_feedforward=config.ff_dim, dropout=config.dropout, batch_first=True
            )
            self.encoder: nn.Module = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
            self.pool: nn.Module | None = AttentionPooling(d)
        else:
            self.encoder = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
            self.pool = None
        self.mlp = nn.Sequential(nn.Linear(d, config.head_hidden), nn.ReLU())
        if config.head == "band":
            self.heads: nn.Linear | None = nn.Linear(config.head_hidden, 4)  # the four linear heads, stacked
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

    def _layers(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The encoder layers written out (post-norm, ReLU, no dropout), ``bias`` added to the
        attention logits ([B, 1, 1, N]: log-weights, -inf for padding; None: no mask)."""
        b, n, d = x.shape
        heads = self.config.n_heads
        for layer in self.encoder.layers:  # type: ignore[union-attr]
            attn = layer.self_attn
            qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).view(b, n, 3, heads, d // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, N, d/heads]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            x = layer.norm1(x + attn.out_proj(a.transpose(1, 2).reshape(b, n, d)))
            x = layer.norm2(x + layer.linear2(F.relu(layer.linear1(x))))
        return x

    def _encode_weighted(
        self, scores: torch.Tensor, mask: torch.Tensor, log_weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``encode`` for the transformer, through ``_layers``; ``log_weights`` [B, N] (-inf on
        padding) or None (then ``mask`` pads)."""
        x = self.embed_norm(self.embed(scores))
        if log_weights is None and not bool(mask.all()):
            log_weights = torch.zeros(mask.shape, dtype=x.dtype).masked_fill(~mask, float("-inf"))
        h = self._layers(x, None if log_weights is None else log_weights[:, None, None, :].to(x.dtype))
        assert self.pool is not None
        return h, self.pool(h, mask, log_weights)

    def summarize(self, scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row's real scores (ascending) -> padded summary points, their mask and log-weights."""
        cfg = self.config
        rows = []
        for i in range(scores.shape[0]):
            real = scores[i] if bool(mask[i].all()) else scores[i][mask[i]]
            if real.shape[0] > 1 and not bool((real[1:] >= real[:-1]).all()):
                real = real.sort().values
            rows.append(summarize_scores(real, cfg.summary_points, cfg.summary_top))
        width = max(len(v) for v, _ in rows)
        if len(rows) == 1:
            v, w = rows[0]
            return v[None], torch.ones(1, width, dtype=torch.bool), w.log()[None]
        values = torch.zeros(len(rows), width, dtype=scores.dtype)
        log_w = torch.full((len(rows), width), float("-inf"), dtype=scores.dtype)
        m = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, (v, w) in enumerate(rows):
            values[i, : len(v)] = v
            log_w[i, : len(v)] = w.log()
            m[i, : len(v)] = True
        return values, m, log_w

    def infer(self, scores: torch.Tensor, mask: torch.Tensor | None = None) -> PolicyOutput:
        """``forward`` for inference: under ``torch.inference_mode``, one pass, no module hooks.

        The transformer runs through ``_layers`` (fused QKV projection and
        ``scaled_dot_product_attention``, whose CPU kernel does not build the
        N x N matrix: PyTorch's eval-mode "fast path" does, 1.6 GB at N =
        10,000). The outputs equal ``forward``'s up to float rounding (tested
        at 1e-5). The MLP encoder and dropout > 0 fall back to ``forward``
        (in eval mode).
        """
        with torch.inference_mode():
            if self.config.encoder == "mlp" or self.config.dropout:
                was_training = self.training
                self.eval()
                try:
                    return self(scores, mask)
                finally:
                    self.train(was_training)
            return self._forward(scores, mask, fast=True)

    def forward(self, scores: torch.Tensor, mask: torch.Tensor | None = None) -> PolicyOutput:
        return self._forward(scores, mask, fast=False)

    def _forward(self, scores: torch.Tensor, mask: torch.Tensor | None, fast: bool) -> PolicyOutput:
        if scores.dim() == 1:
            scores = scores.unsqueeze(0)
        if mask is None:
            mask = torch.ones(scores.shape, dtype=torch.bool)
        elif not bool(mask.any(dim=-1).all()):
            raise InputError("every row needs at least one real (unpadded) score")
        if self.config.encoder == "summary":
            values, token_mask, log_w = self.summarize(scores, mask)
            _, z = self._encode_weighted(values, token_mask, log_w)
        else:
            if not bool(mask.all()):
                scores = scores.masked_fill(~mask, 0.0)
            h, z = self._encode_weighted(scores, mask, None) if fast else self.encode(scores, mask)
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


__all__ = [
    "LDARPolicy",
    "PolicyConfig",
    "PolicyOutput",
    "count_parameters",
    "pad_batch",
    "summarize_scores",
    "upper_quantile",
]
