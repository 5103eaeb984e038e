"""``prune``: query-aware sentence pruning inside each kept chunk.

A long chunk the method kept often holds one or two sentences the question needs and
several it does not. This stage splits every kept chunk into sentences (the repo's one
splitter, :func:`ctxsel.chunking.split_sentences`), scores them with the same scorer the
method ranked by (``ranking.scorer.score(question, sentences)``), and keeps, in document
order, the sentences that pass the rule:

- ``rule=range`` (the default): a sentence stays when its score is at least
  ``lo + fraction * (hi - lo)``, ``lo`` and ``hi`` the lowest and highest sentence scores
  over the whole selection; each chunk still keeps its best ``min_sentences``.
- ``rule=margin``: a sentence stays when its score is within ``margin`` of the
  best sentence of its own chunk (``score >= best_in_chunk - margin``). The chunk's best
  sentence always stays, so every kept chunk keeps at least ``min_sentences`` sentences.

With ``context=true`` (the default) each sentence after a chunk's first is scored with the chunk's first
sentence in front of it (a heading or ``"Title: ..."`` line names what a later sentence's
"he" or "it" is), and only the sentence itself is kept.

The rule and its defaults (``range``, ``fraction=0.65``, ``context=true``) were chosen on the
hotpotqa-long training split as the largest token reduction whose supporting-sentence recall
stays >= 0.91; a per-chunk margin cut no more than a few tokens at that recall, and the
first-sentence context raised recall at every threshold (``python -m experiments.prune_hotpotqa``; the numbers are in
``benchmarks/results/prune_hotpotqa.md``).

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

    rule: Literal["margin", "range"] = option(
        "range", doc="margin: within `margin` of the chunk's best sentence; range: above a fraction of the range"
    )
    margin: float = option(0.1, minimum=0.0, doc="rule=margin: keep sentences scoring >= the chunk's best - margin")
    fraction: float = option(0.65, minimum=0.0, maximum=1.0, doc="rule=range: keep scores >= lo + fraction*(hi-lo)")
    min_sentences: int = option(1, minimum=1, doc="each kept chunk keeps at least its best this many sentences")
    context: bool = option(True, doc="score each sentence with its chunk's first sentence in front of it")

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        del scores
        if ranking is None:
            raise InputError("the prune stage scores sentences with the method's scorer; it was given none")
        before = selection.n_tokens
        split = [split_sentences(c.text) or [c.text] for c in selection.chunks]
        probes: list[Chunk] = []
        for c, sents in zip(selection.chunks, split):
            for j, s in enumerate(sents):
                text = f"{sents[0]} {s}" if self.context and j > 0 else s
                probes.append(Chunk(id=f"{c.id}#{j}", text=text, doc_id=c.doc_id, position=c.position, n_tokens=0))
        flat = np.asarray(ranking.scorer.score(query.question, probes), dtype=np.float64) if probes else np.zeros(0)
        flat = np.where(np.isfinite(flat), flat, -np.inf)
        lo, hi = (float(flat[np.isfinite(flat)].min()), float(flat.max())) if np.isfinite(flat).any() else (0.0, 0.0)
        kept_chunks: list[Chunk] = []
        dropped: dict[str, list[int]] = {}
        at = 0
        for c, sents in zip(selection.chunks, split):
            keep = self.keep(flat[at : at + len(sents)], lo, hi)
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

    def keep(self, s: np.ndarray, lo: float, hi: float) -> np.ndarray:
        """Which of one chunk's sentence scores ``s`` stay (``lo``, ``hi``: the selection's range)."""
        if len(s) == 0:
            return np.zeros(0, dtype=bool)
        if self.rule == "margin":
            keep = s >= s.max() - self.margin
        else:
            keep = s >= lo + self.fraction * (hi - lo)
        best = np.argsort(-s, kind="stable")[: self.min_sentences]
        keep[best] = True
        return np.asarray(keep, dtype=bool)

    def _rule_text(self) -> str:
        if self.rule == "margin":
            return f"within {short_number(self.margin)} of each chunk's best"
        return f"above {short_number(self.fraction)} of the score range"


def sentence_texts(text: str) -> list[str]:
    """A chunk's sentences as the stage splits them."""
    return split_sentences(text) or [text]


__all__ = ["Prune", "sentence_texts"]
