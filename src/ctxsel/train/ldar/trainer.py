"""REINFORCE training of the LDAR policy (paper Sec. 4.2, Eq. 4, Table 4).

Each step draws a batch of training questions, samples a band (or, for the
Bernoulli ablation, a set of picks) per question from the policy, scores it
with the reward function and updates

    theta <- theta + lr * mean_b (r_b - b) * grad log pi(q_L, q_D | s_b)

with Adam (0.9, 0.999, 1e-8), lr 3e-4, batch 32 and an exponential moving
average baseline b <- 0.5 b + 0.5 mean(r) (Table 4). Where the paper is
silent:

- The baseline used for a batch is the EMA of *earlier* batches (so it does
  not depend on the batch's own actions); the first batch, which has no
  history, uses its own mean.
- A batch is ``batch_size`` distinct questions drawn at random without
  replacement from the training split (all of them when there are fewer).
- log pi of a band is log Beta(q_L) + log Beta(q_D); samples are kept 1e-6
  inside (0, 1), for the band and the log-probability alike
  (``policy.LOGPROB_EPS``).
- No entropy bonus, gradient clipping or learning-rate schedule: Table 4
  lists none, so by default there are none. On a mix of data sets whose
  rewards differ in scale (a few gold paragraphs among hundreds beside
  sets with tens of relevant sentences) one batch-mean baseline can let the
  policy collapse to one band for every question; the
  options that guard against it are off by default and recorded with the
  policy: ``baseline="question"`` (each question's own EMA, b_q <- 0.5 b_q +
  0.5 r_q, so only how a band compares with that question's earlier bands
  moves the policy), ``normalize_advantages`` (divide by the batch's
  standard deviation), ``entropy_coef`` (add c * the mean entropy of the
  two Betas, or of the Bernoulli picks, to the objective) and
  ``lr_schedule="cosine"`` (from lr to lr / 10 over ``steps``).
- Monitoring: every ``eval_every`` steps, at the start and at the end, the
  deterministic policy (Beta means) is scored on the *training* questions;
  held-out questions are never looked at during training. The reward of
  uniformly random bands (q_L, q_D ~ U(0, 1)) on the training questions is
  recorded as a reference. ``eval_every=0`` turns all of this off (each
  evaluation costs one reward call per training question: LLM calls, for
  the LLM reward).

Everything needed to continue is checkpointed every ``checkpoint_every``
steps (weights, Adam, EMA baseline, numpy and torch RNG states, the curve):
a killed run resumes where it stopped and ends with the same weights as an
uninterrupted one. The reward curve is written as JSON and PNG (:mod:`.plots`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctxsel.errors import InputError
from ctxsel.selectors.ldar.checkpoint import atomic_write_text, save_policy
from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig, pad_batch, upper_quantile
from ctxsel.train.ldar.checkpoint import load_training_state, save_training_state
from ctxsel.train.ldar.config import TrainConfig
from ctxsel.train.ldar.items import TrainItem, band_selection, picks_selection
from ctxsel.train.ldar.plots import plot_curve
from ctxsel.train.ldar.rewards import describe_reward
from ctxsel.types import Selection


class Trainer:
    """Train an LDAR policy on ``items`` against ``reward_fn``; see the module docstring."""

    def __init__(
        self,
        items: Sequence[TrainItem],
        reward_fn: Callable[..., list[float]],
        output_dir: str | Path,
        policy_config: PolicyConfig | None = None,
        config: TrainConfig | None = None,
        info: dict[str, Any] | None = None,
        *,
        progress: bool = True,
        overwrite: bool = False,
        init_policy: str | Path | None = None,
    ) -> None:
        if not items:
            raise InputError("no training questions")
        self.items = list(items)
        self.reward_fn = reward_fn
        self.out = Path(output_dir)
        self.config = config or TrainConfig()
        self.policy_config = policy_config or PolicyConfig()
        self.info = dict(info or {})
        self.progress = progress
        torch.set_num_threads(self.config.threads)
        torch.manual_seed(self.config.seed)
        self.policy = LDARPolicy(self.policy_config)
        self.optimizer = torch.optim.Adam(
            self.policy.parameters(), lr=self.config.lr, betas=self.config.adam_betas, eps=self.config.adam_eps
        )
        self.rng = np.random.default_rng(self.config.seed)
        self.step = 0
        self.baseline: float | None = None
        self.question_baselines: dict[str, float] = {}  # baseline="question": each question's EMA
        self.curve: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.reference: dict[str, Any] = {}
        self.init_policy = str(init_policy) if init_policy else None
        if init_policy:
            self._warm_start(init_policy)
        self.ckpt_dir = self.out / "checkpoint"
        if overwrite:
            import shutil

            for p in (self.ckpt_dir, self.out / "policy"):
                if p.exists():
                    shutil.rmtree(p)
        if (self.ckpt_dir / "state.json").exists():
            self._resume()

    # -- bookkeeping -----------------------------------------------------------------

    @property
    def is_band(self) -> bool:
        return self.policy_config.head == "band"

    def _warm_start(self, path: str | Path) -> None:
        """Start from a trained policy's weights (e.g. label-trained, then the LLM reward)."""
        from ctxsel.selectors.ldar.checkpoint import load_policy

        start, _ = load_policy(path)
        if start.config != self.policy_config:
            raise InputError(
                f"--init-policy {path} is a {start.config.variant} network with other sizes; "
                f"this run trains {self.policy_config.variant} {self.policy_config.to_dict()}"
            )
        self.policy.load_state_dict(start.state_dict())

    def _identity(self) -> dict[str, Any]:
        return {
            "init_policy": self.init_policy,
            "train": self.config.identity(),
            "policy": self.policy_config.to_dict(),
            "reward": describe_reward(self.reward_fn),
            "items": [it.example.id for it in self.items],
            "info": {k: v for k, v in self.info.items() if k not in ("command",)},
        }

    def _resume(self) -> None:
        doc = json.loads((self.ckpt_dir / "state.json").read_text(encoding="utf-8"))
        if doc.get("identity") != self._identity():
            raise InputError(
                f"{self.ckpt_dir} holds a run with other settings (reward, network, split or hyperparameters); "
                "use another --output, or --overwrite to start again"
            )
        doc = load_training_state(self.ckpt_dir, self.policy, self.optimizer)
        self.step = int(doc["step"])
        self.baseline = doc["baseline"]
        self.question_baselines = doc.get("question_baselines", {})
        self.rng.bit_generator.state = doc["numpy_rng"]
        self.curve = doc["curve"]
        self.evals = doc["evals"]
        self.reference = doc["reference"]

    def _checkpoint(self) -> None:
        save_training_state(
            self.ckpt_dir,
            self.policy,
            self.optimizer,
            {
                "identity": self._identity(),
                "step": self.step,
                "baseline": self.baseline,
                "question_baselines": self.question_baselines,
                "numpy_rng": self.rng.bit_generator.state,
                "curve": self.curve,
                "evals": self.evals,
                "reference": self.reference,
            },
        )
        self.save_policy()

    def training_info(self) -> dict[str, Any]:
        last_eval = self.evals[-1] if self.evals else {}
        return {
            **self.info,
            "reward": describe_reward(self.reward_fn),
            "algorithm": "REINFORCE with EMA baseline",
            "init_policy": self.init_policy,
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.config).items()},
            "steps_done": self.step,
            "n_train": len(self.items),
            "train_ids": [it.example.id for it in self.items],
            "max_n": max(it.n for it in self.items),
            "min_n": min(it.n for it in self.items),
            "final_baseline": self.baseline,
            "final_train_reward_deterministic": last_eval.get("reward"),
        }

    def save_policy(self) -> Path:
        return save_policy(self.out / "policy", self.policy, self.training_info())

    # -- acting ------------------------------------------------------------------------

    def _act(
        self, batch: Sequence[TrainItem], deterministic: bool
    ) -> tuple[list[Selection], torch.Tensor | None, torch.Tensor | None, dict[str, Any]]:
        """Selections, log pi of the sampled actions, the policy's entropy per question, and statistics."""
        x, mask = pad_batch([it.ascending for it in batch])
        out = self.policy.infer(x, mask) if deterministic else self.policy(x, mask)
        if self.is_band:
            with torch.no_grad():
                q_l, q_d = out.mean_band() if deterministic else out.sample_band()
            logp = None if deterministic else out.band_log_prob(q_l, q_d)
            entropy = None if deterministic else out.band_entropy()
            ql, qd = q_l.double().numpy(), q_d.double().numpy()
            sels = [band_selection(it, float(a), float(b), self.config.snap_top) for it, a, b in zip(batch, ql, qd)]
            stats = {
                "q_L": float(ql.mean()),
                "q_U": float(upper_quantile(torch.from_numpy(ql), torch.from_numpy(qd)).mean()),
            }
        else:
            assert out.logits is not None
            with torch.no_grad():
                p = torch.sigmoid(out.logits) * mask
                picks = (p >= 0.5).float() if deterministic else torch.bernoulli(p)
            logp = None if deterministic else out.bernoulli_log_prob(picks)
            entropy = None if deterministic else out.bernoulli_entropy()
            sels = [picks_selection(it, picks[i].numpy().astype(bool)) for i, it in enumerate(batch)]
            stats = {"mean_p": float((p.sum() / mask.sum()).item())}
        return sels, logp, entropy, stats

    def evaluate_deterministic(self) -> dict[str, Any]:
        """Mean reward and k of the Beta-mean policy on the training questions."""
        rewards: list[float] = []
        ks: list[int] = []
        with torch.no_grad():
            for i in range(0, len(self.items), self.config.batch_size):
                batch = self.items[i : i + self.config.batch_size]
                sels, _, _, _ = self._act(batch, deterministic=True)
                rewards += self.reward_fn([it.example for it in batch], sels)
                ks += [s.k for s in sels]
        return {"step": self.step, "reward": float(np.mean(rewards)), "k": float(np.mean(ks))}

    def random_band_reward(self, draws: int = 4) -> dict[str, Any]:
        """Reward of uniformly random bands (q_L, q_D ~ U(0, 1)) on the training questions."""
        rng = np.random.default_rng(self.config.seed + 1)
        rewards, ks = [], []
        for _ in range(draws):
            sels = [
                band_selection(it, float(rng.random()), float(rng.random()), self.config.snap_top) for it in self.items
            ]
            rewards += self.reward_fn([it.example for it in self.items], sels)
            ks += [s.k for s in sels]
        return {"reward": float(np.mean(rewards)), "k": float(np.mean(ks)), "draws": draws}

    # -- the loop ------------------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.policy.train()
        m = len(self.items)
        idx = self.rng.choice(m, size=min(self.config.batch_size, m), replace=False)
        batch = [self.items[int(i)] for i in idx]
        sels, logp, entropy, stats = self._act(batch, deterministic=False)
        r = np.asarray(self.reward_fn([it.example for it in batch], sels), dtype=np.float64)
        if not np.all(np.isfinite(r)):
            raise InputError(f"the reward function returned non-finite rewards: {r}")
        mean_r = float(r.mean())
        b = mean_r if self.baseline is None else self.baseline
        assert logp is not None and entropy is not None
        baselines = self._baselines(batch, b)
        adv_np = r - baselines
        if self.config.normalize_advantages and len(adv_np) > 1:
            adv_np = adv_np / (adv_np.std() + 1e-8)
        adv = torch.as_tensor(adv_np, dtype=logp.dtype)
        loss = -(adv * logp).mean() - self.config.entropy_coef * entropy.mean()
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        ema = self.config.baseline_ema
        self.baseline = mean_r if self.baseline is None else ema * self.baseline + (1 - ema) * mean_r
        if self.config.baseline == "question":
            for it, reward in zip(batch, r):
                old = self.question_baselines.get(it.example.id)
                self.question_baselines[it.example.id] = (
                    float(reward) if old is None else ema * old + (1 - ema) * float(reward)
                )
        self.step += 1
        row = {
            "step": self.step,
            "reward": mean_r,
            "reward_std": float(r.std()),
            "baseline_used": float(baselines.mean()),
            "entropy": float(entropy.mean().item()),
            "lr": lr,
            "loss": float(loss.item()),
            "k": float(np.mean([s.k for s in sels])),
            **stats,
            "seconds": round(time.perf_counter() - t0, 3),
        }
        self.curve.append(row)
        return row

    def _baselines(self, batch: Sequence[TrainItem], batch_baseline: float) -> np.ndarray:
        """Each question's baseline: the batch EMA, or (baseline="question") the question's own EMA once seen."""
        if self.config.baseline == "ema":
            return np.full(len(batch), batch_baseline)
        return np.array([self.question_baselines.get(it.example.id, batch_baseline) for it in batch])

    def _learning_rate(self) -> float:
        """This step's learning rate: constant, or cosine from lr to lr / 10 over the configured steps."""
        lr = self.config.lr
        if self.config.lr_schedule == "constant" or self.config.steps <= 1:
            return lr
        t = min(self.step / (self.config.steps - 1), 1.0)
        return lr * (0.1 + 0.9 * 0.5 * (1 + float(np.cos(np.pi * t))))

    def train(self) -> dict[str, Any]:
        from tqdm.auto import tqdm

        self.out.mkdir(parents=True, exist_ok=True)
        monitor = self.config.eval_every > 0
        if monitor and not self.reference:
            self.reference = {"initial": self.evaluate_deterministic()}
            if self.config.random_reference and self.is_band:
                self.reference["random_band"] = self.random_band_reward()
            if not self.evals:
                self.evals.append(self.reference["initial"])
        total = self.config.steps
        bar = tqdm(
            total=total,
            initial=min(self.step, total),
            desc="ldar reinforce",
            unit="step",
            disable=not self.progress,
            dynamic_ncols=True,
        )
        try:
            while self.step < total:
                row = self.train_step()
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward']:.3f}", baseline=f"{self.baseline:.3f}", k=f"{row['k']:.1f}")
                if self.config.eval_every and self.step % self.config.eval_every == 0:
                    self.evals.append(self.evaluate_deterministic())
                if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0:
                    self._checkpoint()
                    self.write_curve()
        finally:
            bar.close()
        if monitor and (not self.evals or self.evals[-1]["step"] != self.step):
            self.evals.append(self.evaluate_deterministic())
        self._checkpoint()
        self.write_curve()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        last = self.curve[-10:]
        return {
            "steps": self.step,
            "reward": describe_reward(self.reward_fn),
            "reference": self.reference,
            "final_train_deterministic": self.evals[-1] if self.evals else None,
            "last10_sampled_reward": float(np.mean([r["reward"] for r in last])) if last else None,
            "policy": str(self.out / "policy"),
        }

    # -- the curve ---------------------------------------------------------------------

    def write_curve(self) -> tuple[Path, Path | None]:
        doc = {
            "reward": describe_reward(self.reward_fn),
            "variant": self.policy_config.variant,
            "reference": self.reference,
            "steps": self.curve,
            "deterministic_train": self.evals,
            "config": self.training_info(),
        }
        js = self.out / "reward_curve.json"
        atomic_write_text(js, json.dumps(doc, indent=1) + "\n")
        try:
            png = plot_curve(self.out / "reward_curve.png", doc)
        except ImportError:  # matplotlib is optional (ctxsel[plots])
            png = None
        return js, png


__all__ = ["Trainer"]
