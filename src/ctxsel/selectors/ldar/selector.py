"""The LDAR selector: a trained policy picks a quantile band of the ranking.

    ctxsel.select(q, chunks, "ldar", scores=s)          # the bundled policy (ctxsel/data/ldar, sha256-checked)
    ctxsel.select(q, chunks, "ldar[policy=runs/ldar/policy]", scores=s)
    ctxsel eval --dataset hotpotqa-long --methods ldar --policy runs/ldar/policy

Unlike the other score-based selectors LDAR does not keep a prefix of the
ranking: the band may skip the most similar chunks (the paper's
distraction-aware bands). The shared conventions still hold, adapted to a
band (the paper is silent on all of them):

- ``nan_policy``: "raise" rejects NaN / infinite scores; with "last" they
  are ranked after every finite score and the policy never sees them, so the
  band is computed over the N finite scores only.
- ``min_k``: a band shorter than min_k is widened, first upward (towards
  more similar chunks), then downward.
- ``max_tokens``: the band, most similar first, is cut to its longest prefix
  that fits.
- empty context: an empty selection. N = 1: the one chunk (l = u = 1).
- all-equal scores: the policy still picks a band; ranks among ties follow
  the house order (position), and the explanation says the scores were
  equal.
- N larger than any in training: allowed (the network has no positional
  encoding); ``details.beyond_training_n`` says so.
- Large N: the paper's network attends over all N scores, so its cost grows
  with N squared (docs/methods/ldar.md has the timings); a policy trained with
  ``--encoder summary`` (see ``policy.py``) reads at most 128 weighted
  summary points of the scores instead, a constant-size network at any N.

Inference is deterministic by default: (q_L, q_D) are the means of their
Betas. ``sample=true`` draws them instead (``seed=`` makes a draw
repeatable). The Selection's ``details`` (an :class:`~ctxsel.selectors.ldar.band.LDARBand`) and
``trace`` record q_L, q_D, q_U, l, u, the Beta parameters, and which reward trained
the policy.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ctxsel.errors import ScoresWarning
from ctxsel.inputs import MAX_SEED
from ctxsel.options import CommonOptions, option
from ctxsel.query import Query
from ctxsel.ranking.chain import same_scores
from ctxsel.selectors.base import Decision, RankingSelector, rank
from ctxsel.selectors.ldar.band import LDARBand, band_ranks, select_band
from ctxsel.selectors.ldar.checkpoint import load_policy, resolve_policy_dir
from ctxsel.selectors.ldar.policy import LDARPolicy, upper_quantile
from ctxsel.selectors.ldar.score_maps import ScoreMap, map_for
from ctxsel.threads import max_threads, torch_threads
from ctxsel.types import Selection

_bundled_cache: dict[str, tuple[LDARPolicy, dict[str, Any]]] = {}
_warned_scores: set[tuple[str | None, str]] = set()


def bundled_policy() -> tuple[LDARPolicy, dict[str, Any], str]:
    """The bundled policy (sha256-checked on every call, loaded once per process and weights digest),
    its config.json, and its name for Selection meta."""
    from ctxsel import bundled

    folder = bundled.verify("ldar")
    art = bundled.get("ldar")
    digest = art.digest or ""
    key = f"{folder}|{digest}"
    if key not in _bundled_cache:
        _bundled_cache.clear()
        _bundled_cache[key] = load_policy(folder)
    policy, info = _bundled_cache[key]
    return policy, info, f"bundled ldar policy sha256:{digest[:12]}"


class LDAR(RankingSelector):
    """Learned distraction-aware band selection over the similarity distribution."""

    @dataclass(frozen=True)
    class Options(CommonOptions):
        sample: bool = option(False, doc="draw the band from the policy's Betas instead of taking their means")
        seed: int | None = option(None, minimum=0, maximum=MAX_SEED, doc="makes a draw repeatable (sample=true)")
        snap_top: bool | None = option(None, doc="a band that starts at rank 2 starts at rank 1 (default: as trained)")
        threads: int | None = option(
            None,
            minimum=1,
            doc="torch threads for the policy, during each call (at most this machine's CPUs)",
            server_flag="--threads",
        )

        def refuse(self, given: frozenset[str]) -> str | None:
            if "seed" in given and self.seed is not None and not self.sample:
                return "seed makes a sampled band repeatable: it applies to sample=true only"
            if self.threads is not None and self.threads > max_threads():
                return f"threads must be <= {max_threads()} (this machine's CPUs)"
            return None

    resources = ("policy",)

    def __init__(self, policy: str | Path | LDARPolicy | None = None, *args: Any, **given: Any) -> None:
        super().__init__(*args, **given)
        #: which policy, as Selection meta and config say it: the path, or "bundled ldar policy sha256:..."
        self.policy_name: str | None
        if policy is None:
            self.policy, self.info, self.policy_name = bundled_policy()
            self.policy_path: str | None = self.policy_name
        elif isinstance(policy, LDARPolicy):
            self.policy, self.info = policy, cast(dict[str, Any], {"training": {}})
            self.policy_path = self.policy_name = None
        else:
            self.policy_path = self.policy_name = str(resolve_policy_dir(policy))
            self.policy, self.info = load_policy(self.policy_path)
        training = self.info.get("training", {})
        if self.options.as_config()["snap_top"] is None:  # as the policy was trained
            self.snap_top = bool(training.get("snap_top", True))
        self.reward = training.get("reward")
        self.train_max_n = training.get("max_n")
        #: the scores the policy was trained on (its card's ``training.scorer``), when it says
        self.trained_scores: str | None = training.get("scorer")
        #: the map the policy reads another scorer's scores through (set by :meth:`for_scores`)
        self.score_map: ScoreMap | None = None

    def for_scores(self, scores_id: str) -> LDAR:
        """Itself for the scores the policy was trained on (the same model's int8 vectors count as its
        own: they move a cosine by quantisation error); a copy that reads them through the bundled
        score map onto the policy's scale for a scorer it has one for (:mod:`.score_maps`); else
        itself, with a warning once per process and (policy, scores) pair, naming the scorer it knows."""
        known = self.trained_scores
        given = same_scores(scores_id)
        if known is None or given == same_scores(known):
            return self
        score_map = map_for(same_scores(known), given)
        if score_map is not None:
            mapped = copy.copy(self)
            mapped.score_map = score_map
            return mapped
        if (self.policy_name, scores_id) not in _warned_scores:
            _warned_scores.add((self.policy_name, scores_id))
            warnings.warn(
                f"the LDAR policy ({self.policy_name or 'in memory'}) was trained on {known} scores, and these "
                f"come from {scores_id}, which it has no score map for: its band may not fit their scale "
                f"(scorer {known.split(':')[0]!r} gives the scores it knows; docs/methods/ldar.md)",
                ScoresWarning,
                stacklevel=4,
            )
        return self

    def config(self) -> dict[str, Any]:
        return {
            "policy": self.policy_path,
            "variant": self.policy.config.variant,
            "trained_with_reward": self.reward,
            "sample": self.sample,
            **({"seed": self.seed} if self.sample else {}),
            "snap_top": self.snap_top,
            **self.common_config(),
        }

    # -- the policy ----------------------------------------------------------------

    @torch.inference_mode()
    def act(self, ascending: np.ndarray) -> dict[str, Any]:
        """Run the policy on finite scores sorted ascending (through the score map, if one is set);
        the band or the picks."""
        if self.score_map is not None:
            ascending = self.score_map(ascending)
        x = torch.from_numpy(np.ascontiguousarray(ascending, dtype=np.float32)).unsqueeze(0)
        with torch_threads(self.threads), torch.random.fork_rng(enabled=self.sample and self.seed is not None):
            if self.sample and self.seed is not None:
                torch.manual_seed(self.seed)
            out = self.policy.infer(x)
            if self.policy.config.head == "bernoulli":
                assert out.logits is not None
                p = torch.sigmoid(out.logits[0]).double()
                picks = torch.bernoulli(p) if self.sample else (p >= 0.5).double()
                return {"picks": picks.numpy().astype(bool), "p": p.numpy()}
            q_l, q_d = out.sample_band() if self.sample else out.mean_band()
        ql, qd = float(q_l[0]), float(q_d[0])
        assert out.alpha_l is not None and out.beta_l is not None and out.alpha_d is not None and out.beta_d is not None
        return {
            "q_L": ql,
            "q_D": qd,
            "q_U": min(
                1.0, float(upper_quantile(torch.tensor(ql, dtype=torch.float64), torch.tensor(qd, dtype=torch.float64)))
            ),
            "alpha_L": float(out.alpha_l[0]),
            "beta_L": float(out.beta_l[0]),
            "alpha_D": float(out.alpha_d[0]),
            "beta_D": float(out.beta_d[0]),
        }

    # -- the Selector contract -----------------------------------------------------------

    def decide(self, scores: np.ndarray, n_tokens: np.ndarray) -> Decision:
        n = len(scores)
        order, n_finite = rank(scores, self.nan_policy)
        if n == 0:
            return Decision(order, 0, "empty context: nothing to select")
        if n_finite == 0:
            k, explanation = self._apply_limits(0, "no finite scores: nothing ranked", n_tokens[order], n)
            return Decision(order, k, explanation)
        ranked = order[:n_finite]
        descending = scores[ranked]
        a = self.act(descending[::-1])  # act() makes the one float32 copy
        details = LDARBand(
            n_ranked=n_finite,
            policy=self.policy_name,
            reward=self.reward,
            variant=self.policy.config.variant,
            sample=self.sample,
            beyond_training_n=None if self.train_max_n is None else n_finite > int(self.train_max_n),
            score_map=None if self.score_map is None else self.score_map.scorer,
        )
        flat = bool(descending[0] == descending[-1])
        if "picks" in a:
            chosen = [ranked[n_finite - 1 - j] for j in np.flatnonzero(a["picks"])]
            chosen = sorted(chosen, key=lambda i: (-scores[i], i))
            details = replace(details, n_picked=len(chosen), mean_p=float(np.mean(a["p"])))
            what = f"Bernoulli picks: {len(chosen)} of {n_finite} chunks (mean p {details.mean_p:.3f})"
            band = np.asarray(chosen, dtype=np.int64)
        else:
            l, u = band_ranks(n_finite, a["q_L"], a["q_U"], snap_top=self.snap_top)
            band = select_band(ranked, l, u)
            details = replace(
                details,
                l=l,
                u=u,
                q_l=a["q_L"],
                q_d=a["q_D"],
                q_u=a["q_U"],
                alpha_l=a["alpha_L"],
                beta_l=a["beta_L"],
                alpha_d=a["alpha_D"],
                beta_d=a["beta_D"],
            )
            skipped = n_finite - u
            what = (
                f"LDAR band q_L={a['q_L']:.4f}, q_U={a['q_U']:.4f} -> ascending ranks {l}..{u} of {n_finite}: "
                f"{len(band)} chunks" + (f", skipping the {skipped} most similar" if skipped else "")
            )
        if flat and n_finite > 1:
            what += " (all scores equal: ranks follow position)"
        if self.policy_name is not None:
            what += f" [policy: {self.policy_name}]"
        if self.score_map is not None:
            what += f" (read {self.score_map.scorer}'s scores through its score map onto the policy's scale)"
        if len(band) < min(self.min_k, n_finite):
            band = self._widen(band, ranked, contiguous=details.ranks is not None)
            details = replace(details, widened_to_min_k=self.min_k)
            what += f"; widened to min_k={self.min_k}"
        rest_mask = np.ones(n, dtype=bool)
        rest_mask[band] = False
        new_order = np.concatenate([band, order[rest_mask[order]]]).astype(np.int64)
        k, explanation = self._fit_budget(len(band), what, n_tokens[new_order])
        return Decision(new_order, k, explanation, details)

    def _widen(self, band: np.ndarray, ranked: np.ndarray, *, contiguous: bool) -> np.ndarray:
        """Raise the band to min_k chunks: a contiguous band grows to its more similar neighbours
        first, then less similar ones; Bernoulli picks (or an empty band) take the best unpicked."""
        need = min(self.min_k, len(ranked)) - len(band)
        pos = {int(i): p for p, i in enumerate(ranked)}
        taken = {pos[int(i)] for i in band}
        if not contiguous or not taken:
            extra = [p for p in range(len(ranked)) if p not in taken][:need]
        else:
            lo, hi = min(taken), max(taken)
            up = list(range(lo - 1, -1, -1))[:need]
            down = list(range(hi + 1, len(ranked)))[: need - len(up)]
            extra = up + down
        merged = sorted(taken | set(extra))
        return ranked[merged]

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        sel = super()._select(query, scores)
        b = sel.details
        if isinstance(b, LDARBand) and b.ranks is not None:
            sel.trace = [
                {"step": "policy", "alpha_L": b.alpha_l, "beta_L": b.beta_l, "alpha_D": b.alpha_d, "beta_D": b.beta_d},
                {"step": "quantiles", "q_L": b.q_l, "q_D": b.q_d, "q_U": b.q_u, "sampled": self.sample},
                {"step": "band", "n": b.n_ranked, "l": b.l, "u": b.u, "k": sel.k},
            ]
        elif isinstance(b, LDARBand):
            sel.trace = [{"step": "bernoulli", "n": b.n_ranked, "picked": b.n_picked, "k": sel.k}]
        return sel


__all__ = ["LDAR"]
