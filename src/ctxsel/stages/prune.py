"""``prune``: query-aware sentence pruning inside each kept chunk.

A long chunk the method kept often holds one or two sentences the question needs and
several it does not. This stage splits every kept chunk into sentences (the repo's one
splitter, :func:`ctxsel.chunking.split_sentences`), scores them with the same scorer the
method ranked by (``ranking.scorer.score(question, sentences)``), and keeps, in document
order, the sentences that pass the rule:

- ``rule=stddev`` (the default): a sentence stays when its score is at least
  ``mean + z * std`` of the sentence scores over the whole selection (the ``stddev`` cut's
  rule, applied to sentences).
- ``rule=range``: a sentence stays when its score is at least ``lo + fraction * (hi - lo)``,
  ``lo`` and ``hi`` the lowest and highest sentence scores over the whole selection.
- ``rule=margin``: a sentence stays when its score is within ``margin`` of the
  best sentence of its own chunk (``score >= best_in_chunk - margin``).

Under every rule each kept chunk keeps at least its best ``min_sentences`` sentences.

A sentence after a chunk's first is often unreadable alone: its "he" or "it" is named in the
chunk's heading or ``"Title: ..."`` line. So it is scored twice, alone and with the chunk's
first sentence in front of it, and its score is ``(1 - context) * alone + context * with
the first sentence`` (``context=0``: alone, one scoring pass; ``context=1``: with the first
sentence only). Only the sentence itself is kept.

The defaults (``stddev``, ``z=0.6``, ``context=0.5``) were chosen on the hotpotqa-long
training split under the default scorer as the largest token reduction whose
supporting-sentence recall stays >= 0.91, among the three rules and the three context
weights 0, 0.5 and 1 (``python -m experiments.prune_hotpotqa --scorer cascade``; the numbers
are in ``benchmarks/results/prune_hotpotqa_cascade.md``). At every ``z`` tried, the blend kept
more supporting sentences than either score alone: the sentence alone misses what its pronoun
refers to, the sentence behind its heading inherits the heading's match.

A pruned chunk keeps its id, document and position; its text becomes its kept sentences
joined by a space, and its token count is counted again, so ``Selection.text()``, the
reader and every surface read the pruned text. ``Selection.meta["prune"]`` reports
``tokens_before``, ``tokens_after`` and, per chunk, the indices of the sentences that went
(``dropped``, 0-based in the splitter's order); the explanation says the same in one line.

Sources: LlamaIndex's ``SentenceEmbeddingOptimizer`` (sentence embeddings against the
query, a percentile cut or a threshold); in the literature, RECOMP (Xu et al., 2024,
extractive compression), Provence (Chirkova et al., 2025, query-aware context pruning) and
EXIT (Hwang et al., 2025, extractive context compression), which prune at sentence level
and report 2-5x fewer tokens at equal answers.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

import numpy as np

from ctxsel.chunking import split_sentences
from ctxsel.errors import InputError
from ctxsel.numbers import short_number
from ctxsel.options import option
from ctxsel.query import Query
from ctxsel.stages.base import Stage
from ctxsel.types import Chunk, Selection

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking


@dataclasses.dataclass(frozen=True)
class Prune(Stage):
    """Keep the sentences of the kept chunks that score high enough, in document order."""

    needs_ranking = True

    rule: Literal["stddev", "range", "margin"] = option(
        "stddev",
        doc="stddev: above mean + z*std; range: above a fraction of the range; margin: near the chunk's best",
    )
    z: float = option(0.6, doc="rule=stddev: keep scores >= mean + z*std of the selection's sentence scores")
    margin: float = option(0.1, minimum=0.0, doc="rule=margin: keep sentences scoring >= the chunk's best - margin")
    fraction: float = option(0.65, minimum=0.0, maximum=1.0, doc="rule=range: keep scores >= lo + fraction*(hi-lo)")
    min_sentences: int = option(1, minimum=1, doc="each kept chunk keeps at least its best this many sentences")
    context: float = option(
        0.5, minimum=0.0, maximum=1.0, doc="weight of the score with the chunk's first sentence in front (0: alone)"
    )

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        del scores
        if ranking is None:
            raise InputError("the prune stage scores sentences with the method's scorer; it was given none")
        before = selection.n_tokens
        split = [split_sentences(c.text) or [c.text] for c in selection.chunks]
        flat = self.sentence_scores(query.question, selection.chunks, split, ranking)
        floor = self.floor(flat[np.isfinite(flat)])
        kept_chunks: list[Chunk] = []
        dropped: dict[str, list[int]] = {}
        at = 0
        for c, sents in zip(selection.chunks, split):
            keep = self.keep(flat[at : at + len(sents)], floor)
            at += len(sents)
            gone = [j for j in range(len(sents)) if not keep[j]]
            if not gone:
                kept_chunks.append(c)
                continue
            dropped[c.id] = gone
            text = " ".join(t for t, k in zip(sents, keep) if k)
            kept_chunks.append(dataclasses.replace(c, text=text, n_tokens=-1))
        selection.chunks = kept_chunks
        after = selection.n_tokens
        n_gone = sum(map(len, dropped.values()))
        selection.meta["prune"] = {
            "tokens_before": before,
            "tokens_after": after,
            "sentences": len(flat),
            "dropped": dropped,
        }
        selection.explanation += (
            f"; prune: kept {len(flat) - n_gone} of {len(flat)} sentences, {before} -> {after} tokens"
            f" ({self._rule_text()})."
        )
        return selection

    def sentence_scores(
        self, question: str, chunks: list[Chunk], split: list[list[str]], ranking: Ranking
    ) -> np.ndarray:
        """Every sentence's score in order: alone, behind its chunk's first sentence, or the blend of
        both by ``context``; ``-inf`` where the scorer gave no finite score."""
        probes: list[Chunk] = []
        pairs = []  # per sentence: the index of its score alone and of its score behind (-1: not asked)
        for c, sents in zip(chunks, split):
            for j, s in enumerate(sents):
                alone = behind = -1
                if j == 0 or self.context < 1:
                    alone = len(probes)
                    probes.append(Chunk(id=f"{c.id}#{j}", text=s, doc_id=c.doc_id, position=c.position, n_tokens=0))
                if j > 0 and self.context > 0:
                    behind = len(probes)
                    text = f"{sents[0]} {s}"
                    probes.append(Chunk(id=f"{c.id}#{j}+", text=text, doc_id=c.doc_id, position=c.position, n_tokens=0))
                pairs.append((alone, behind))
        if not probes:
            return np.zeros(0)
        raw = np.asarray(ranking.scorer.score(question, probes), dtype=np.float64)
        raw = np.where(np.isfinite(raw), raw, -np.inf)
        w = self.context
        return np.array([raw[a] if b < 0 else raw[b] if a < 0 else (1 - w) * raw[a] + w * raw[b] for a, b in pairs])

    def floor(self, finite: np.ndarray) -> float:
        """The selection-wide score a sentence needs under ``range`` or ``stddev`` (of the selection's
        finite sentence scores; with none, nothing passes and each chunk keeps its best). ``margin``
        has none (-inf): its bar is each chunk's own."""
        if self.rule == "margin":
            return -np.inf
        if len(finite) == 0:
            return np.inf
        if self.rule == "range":
            lo, hi = float(finite.min()), float(finite.max())
            return lo + self.fraction * (hi - lo)
        return float(finite.mean() + self.z * finite.std())

    def keep(self, s: np.ndarray, floor: float) -> np.ndarray:
        """Which of one chunk's sentence scores ``s`` stay (``floor``: :meth:`floor`)."""
        if len(s) == 0:
            return np.zeros(0, dtype=bool)
        keep = s >= (s.max() - self.margin if self.rule == "margin" else floor)
        best = np.argsort(-s, kind="stable")[: self.min_sentences]
        keep[best] = True
        return np.asarray(keep, dtype=bool)

    def _rule_text(self) -> str:
        if self.rule == "margin":
            return f"within {short_number(self.margin)} of each chunk's best"
        if self.rule == "range":
            return f"above {short_number(self.fraction)} of the score range"
        return f"above the mean + {short_number(self.z)} std"


def sentence_texts(text: str) -> list[str]:
    """A chunk's sentences as the stage splits them."""
    return split_sentences(text) or [text]


__all__ = ["Prune", "sentence_texts"]
