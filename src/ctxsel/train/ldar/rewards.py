"""Reward functions: ``(examples, selections, **kw) -> list[float]``.

The shape TRL uses for its reward functions, so LDAR's REINFORCE,
Context-Picker's GRPO and evaluation share one set. Each reward here is a
small callable class with a ``describe()`` dict, which trainers store with
every checkpoint and result so one can always tell which reward trained a
policy.

- :class:`LabelReward`: F-beta of gold-chunk recall and precision, for
  machines without a usable LLM. beta = 2 by default: recall counts four
  times as much as precision. A multi-hop reader (HotpotQA needs both gold
  paragraphs) fails for sure when a gold chunk is missing, but usually
  survives a few extra chunks, so missing evidence must cost more than
  distraction; yet precision still matters, so the reward peaks at a small
  band around the gold rather than at the full context (with 2 gold chunks
  among 991, full context scores F2 = 0.01, the 2 gold alone 1.0, and a
  top-7 band holding both 0.67).
- :class:`LLMCorrectnessReward`: the paper's reward (Eq. 3): 1 if the reader
  LLM's answer from the selected chunks is correct, by SubEM (or an LLM
  judge for list answers, via ``ctxsel.grading.score_answer``). Cached
  per (example id, l, u) -- in memory and in an append-only JSONL file -- so
  a band is never paid for twice, across steps and across resumed runs. A
  selection longer than the reader's context window
  (``LLMContextLengthError``) scores 0 without an answer (the paper is
  silent; its readers had 128k windows): a reader that cannot read the
  band cannot answer from it, and the policy learns to stay within the
  window. ``overflow="raise"`` turns this off.
- :class:`CostRegularized`: App. D.5's cost-regularised variant,
  r - weight * (selected tokens / full-context tokens). The paper found it
  collapses to too-small bands; it is here to reproduce that, not as a
  default. The paper gives no form for the penalty; a fraction of the full
  context keeps ``weight`` independent of document length.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctxsel import metrics
from ctxsel.errors import InputError, LLMContextLengthError
from ctxsel.selectors.ldar.band import LDARBand
from ctxsel.types import Example, Selection

RewardFn = Callable[..., list[float]]


def fbeta(recall: float, precision: float, beta: float = 2.0) -> float:
    """(1 + b^2) P R / (b^2 P + R); 0 when both are 0."""
    b2 = beta * beta
    denom = b2 * precision + recall
    return 0.0 if denom <= 0 else (1 + b2) * precision * recall / denom


def describe_reward(fn: Any) -> dict[str, Any]:
    """What trained a policy: the reward's own description, else its name."""
    if hasattr(fn, "describe"):
        return dict(fn.describe())
    return {"name": getattr(fn, "__name__", type(fn).__name__)}


def _check(examples: Sequence[Example], selections: Sequence[Selection]) -> None:
    if len(examples) != len(selections):
        raise InputError(f"got {len(examples)} examples but {len(selections)} selections")


class LabelReward:
    """F-beta of the selection's recall and precision of gold chunk ids."""

    def __init__(self, beta: float = 2.0) -> None:
        if not beta > 0:
            raise InputError(f"beta must be > 0, got {beta}")
        self.beta = float(beta)
        self.__name__ = f"label_f{self.beta:g}"

    def describe(self) -> dict[str, Any]:
        return {"name": "label", "metric": f"F{self.beta:g} of gold-chunk recall and precision", "beta": self.beta}

    def __call__(self, examples: Sequence[Example], selections: Sequence[Selection], **kw: Any) -> list[float]:
        _check(examples, selections)
        out = []
        for ex, sel in zip(examples, selections):
            if not ex.gold_ids:
                raise InputError(f"example {ex.id!r} has no gold_ids: the label reward needs them (use --reward llm)")
            r = metrics.context_recall(sel.ids, ex.gold_ids) or 0.0
            p = metrics.context_precision(sel.ids, ex.gold_ids) or 0.0
            out.append(fbeta(r, p, self.beta))
        return out


def label_reward(
    examples: Sequence[Example], selections: Sequence[Selection], *, beta: float = 2.0, **kw: Any
) -> list[float]:
    """Functional form of :class:`LabelReward`."""
    return LabelReward(beta)(examples, selections)


def band_key(example: Example, sel: Selection) -> str:
    """(example id, l, u) for a band; (example id, hash of the ids) otherwise."""
    ranks = sel.details.ranks if isinstance(sel.details, LDARBand) else None
    if ranks is not None:
        return f"{example.id}|{ranks[0]}|{ranks[1]}"
    h = hashlib.sha1("\x1f".join(sorted(sel.ids)).encode("utf-8")).hexdigest()[:16]
    return f"{example.id}|ids:{h}"


class LLMCorrectnessReward:
    """The reader's answer from the selected chunks, scored against the gold answers.

    ``namespace`` must name everything besides (example, l, u) that changes
    which chunks a band holds or how they are read -- ctxsel's trainer passes
    the dataset and scorer; the reader model, template and answer length are
    added here -- so a cache file is never reused for a different setup.
    """

    def __init__(
        self,
        reader: Any,
        judge: Any = None,
        *,
        cache_path: str | Path | None = None,
        namespace: str = "",
        overflow: str = "zero",
    ) -> None:
        if overflow not in ("zero", "raise"):
            raise InputError(f"overflow must be 'zero' or 'raise', got {overflow!r}")
        self.overflow = overflow
        self.overflows = 0
        self.reader = reader
        self.judge = judge
        reader_id = f"{getattr(reader.client, 'model_id', '?')}|{reader.template.key}|{reader.max_answer_tokens}"
        self.namespace = f"{namespace}|{reader_id}|judge={getattr(judge, 'model_id', None)}"
        self.cache_path = Path(cache_path) if cache_path else None
        self._cache: dict[str, float] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.hits = 0
        self.__name__ = "llm_correctness"
        if self.cache_path and self.cache_path.exists():
            self._load()

    def describe(self) -> dict[str, Any]:
        return {
            "name": "llm",
            "metric": "reader answer correct (SubEM; LLM judge for list answers)",
            "reader": getattr(self.reader.client, "model_id", "?"),
            "template": self.reader.template.key,
            "judge": getattr(self.judge, "model_id", None),
        }

    def _load(self) -> None:
        assert self.cache_path is not None
        for line in self.cache_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a kill
            if row.get("ns") == self.namespace:
                self._cache[row["key"]] = float(row["reward"])

    def _store(self, key: str, reward: float, answer: str) -> None:
        self._cache[key] = reward
        if self.cache_path is None:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        with self.cache_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"ns": self.namespace, "key": key, "reward": reward, "answer": answer}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def __call__(self, examples: Sequence[Example], selections: Sequence[Selection], **kw: Any) -> list[float]:
        from ctxsel.grading import score_answer

        _check(examples, selections)
        out = []
        for ex, sel in zip(examples, selections):
            key = band_key(ex, sel)
            with self._lock:
                if key in self._cache:
                    self.hits += 1
                    out.append(self._cache[key])
                    continue
            if not ex.answers:
                raise InputError(f"example {ex.id!r} has no gold answers: the LLM reward cannot score it")
            try:
                ans = self.reader.answer(ex.question, sel)
            except LLMContextLengthError:
                if self.overflow == "raise":
                    raise
                with self._lock:
                    self.overflows += 1
                    self._store(key, 0.0, "<context overflow>")
                out.append(0.0)
                continue
            reward = float(score_answer(ex, ans.text, self.judge)["score"] or 0.0)
            with self._lock:
                self.calls += 1
                self._store(key, reward, ans.text)
            out.append(reward)
        return out


class CostRegularized:
    """``base`` minus ``weight`` times the fraction of the full context's tokens selected (App. D.5)."""

    def __init__(self, base: RewardFn, weight: float) -> None:
        if weight < 0:
            raise InputError(f"cost weight must be >= 0, got {weight}")
        self.base = base
        self.weight = float(weight)
        self._full: dict[str, int] = {}
        self.__name__ = f"{getattr(base, '__name__', 'reward')}_cost{self.weight:g}"

    def describe(self) -> dict[str, Any]:
        return {
            **describe_reward(self.base),
            "cost_weight": self.weight,
            "cost": "weight * selected tokens / full-context tokens",
        }

    def _full_tokens(self, ex: Example) -> int:
        if ex.id not in self._full:
            self._full[ex.id] = sum(c.n_tokens for c in ex.chunks)
        return self._full[ex.id]

    def __call__(self, examples: Sequence[Example], selections: Sequence[Selection], **kw: Any) -> list[float]:
        base = self.base(examples, selections, **kw)
        return [
            r - self.weight * (sel.n_tokens / max(1, self._full_tokens(ex)))
            for r, ex, sel in zip(base, examples, selections)
        ]


__all__ = [
    "CostRegularized",
    "LLMCorrectnessReward",
    "LabelReward",
    "RewardFn",
    "band_key",
    "describe_reward",
    "fbeta",
    "label_reward",
]
