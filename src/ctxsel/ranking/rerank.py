"""A second stage: re-score the first stage's top ``M`` chunks with another scorer before the cut.

A strong embedder (nomic-embed-text-v1.5) is too slow to embed every chunk of a large pool; a cheap
first stage (MiniLM, or MiniLM + BM25) ranks everything and the strong one reads only its top ``M``.

Spec: ``SCORER@M``, the scorer in the scorer grammar, ``M`` an integer >= 1::

    dense[model=nomic-v1.5]@50      nomic re-scores the first stage's top 50
    bm25@20

How the two stages combine, so that every cut reads one sensible score list: the top ``M`` (by the
first stage, finite scores only) get the second scorer's scores, in its order. The rest keep the
first stage's order and spacing, carried onto the second scorer's scale: the ``M``-th first-stage
chunk is lined up with the *median* second-stage score of the block, and each other chunk sits below
it by its first-stage distance times the ratio of the two stages' score ranges over the top ``M``
(at least a hair below the median). So the upper half of the reranked block always stays above
every other chunk, and a block chunk the second scorer rates low sinks among the rest as it would in
a one-stage ranking. Lined up with the block's lowest score instead, the rest left the block's sparse
bottom as the widest gap in the list, and adaptive-k cut there (k near ``M``); measured on
hotpotqa-long's training split (docs/archive/results-log.md). A non-finite first-stage score stays as it was
(the selector's ``nan_policy`` decides). With ``M`` at least the pool, the result is the second
scorer's scores alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.inputs import as_count
from ctxsel.scoring import get_scorer, parse_scorer_spec
from ctxsel.scoring.base import Scorer, score_with_notes
from ctxsel.scoring.registry import available_scorers, scorer_options
from ctxsel.specs import check_spec_length, spec_value, split_top
from ctxsel.types import Chunk

#: how far below the block's median score the best of the rest sits at least (ties at the seam)
SEAM_STEP = 1e-6


@dataclass(frozen=True)
class Rerank:
    """Re-score the first stage's top ``m`` chunks with the scorer ``scorer`` (a scorer spec)."""

    scorer: str
    m: int

    def __post_init__(self) -> None:
        try:  # the whole-number rule of every integer option (ctxsel.inputs.as_int): 50.0 is 50
            m = as_count("M", self.m, 1)
        except InputError:
            raise InputError(
                f"rerank M must be an integer >= 1, got {self.m!r} (e.g. dense[model=nomic-v1.5]@50)"
            ) from None
        object.__setattr__(self, "m", m)

    def spec(self) -> str:
        return f"{self.scorer}@{self.m}"


def parse_rerank(spec: str | Rerank | None) -> Rerank | None:
    """A :class:`Rerank` from ``SCORER@M``; None for None, ``""`` or ``"none"``. The scorer's name,
    options and (for ``dense``) model are checked now, so a bad spec fails before any scoring."""
    if spec is None or isinstance(spec, Rerank):
        return spec
    if not isinstance(spec, str):
        raise InputTypeError(
            f"rerank must be a spec string such as 'dense[model=nomic-v1.5]@50', got {type(spec).__name__}"
        )
    if not spec.strip() or spec.strip().lower() == "none":
        return None
    check_spec_length(spec, "rerank spec")
    parts = split_top(spec.strip(), "@", f"rerank {spec!r}")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise SpecError(
            f"bad rerank {spec!r}: use SCORER@M, the second scorer and how many of the first stage's "
            "top chunks it re-scores, e.g. dense[model=nomic-v1.5]@50"
        )
    scorer, m_text = parts[0].strip(), parts[1].strip()
    name, options = parse_scorer_spec(scorer)
    if name not in available_scorers():
        raise SpecError(f"bad rerank {spec!r}: unknown scorer {name!r}; choose {', '.join(available_scorers())}")
    valid = scorer_options(name)
    for key in options:
        if key not in valid:
            raise SpecError(f"bad rerank {spec!r}: scorer {name!r} has no option {key!r}; it takes {', '.join(valid)}")
    model = options.get("model")
    if model is not None and not _known_model(model):
        raise SpecError(
            f"bad rerank {spec!r}: unknown model {model!r}; use a bundled embedder (nomic-v1.5), "
            "a local model folder, or a Hugging Face id already in the cache (ORG/NAME)"
        )
    try:
        m = as_count("M", spec_value(m_text), 1)
    except InputError:
        raise SpecError(f"bad rerank {spec!r}: M must be an integer >= 1, got {m_text!r}") from None
    return Rerank(scorer, m)


#: a second scorer's options that change the whole server process or name its files: refused over HTTP
_SERVER_SCORER_OPTIONS = {
    "num_threads": "it changes the whole server's torch threads (the server's --threads sets them)",
    "device": "it changes where the whole server computes (the server's scorers run on its CPU)",
    "cache": "a request cannot name a file on the server",
}


def check_server_rerank(rerank_: Rerank) -> None:
    """A rerank a server runs for a client: its scorer may name a bundled model, never a path or a
    download (a request cannot make the server read its files), and none of its options may change
    the server's process (threads, device) or name a file (:data:`_SERVER_SCORER_OPTIONS`)."""
    from ctxsel.scoring.dense import DEFAULT_MODEL
    from ctxsel.scoring.gguf_embedders import get_embedder

    options = parse_scorer_spec(rerank_.scorer)[1]
    for key in sorted(_SERVER_SCORER_OPTIONS.keys() & options.keys()):
        raise InputError(
            f"rerank {rerank_.spec()!r}: '{key}' is not an option a request can set: {_SERVER_SCORER_OPTIONS[key]}"
        )
    model = options.get("model")
    if model is not None and not (model == DEFAULT_MODEL or (isinstance(model, str) and get_embedder(model))):
        raise InputError(
            f"rerank {rerank_.spec()!r}: a request may name a bundled model only (e.g. nomic-v1.5), "
            "not a path or a model id"
        )


def _known_model(model: object) -> bool:
    from ctxsel.scoring.dense import DEFAULT_MODEL
    from ctxsel.scoring.gguf_embedders import get_embedder

    if not isinstance(model, str):
        return False
    return get_embedder(model) is not None or model == DEFAULT_MODEL or "/" in model or Path(model).exists()


@dataclass
class Reranked:
    """Combined scores, and what the second stage did (indices into the pool)."""

    scores: np.ndarray
    first: np.ndarray
    top: list[int]  # the re-scored chunks, in first-stage order
    second: np.ndarray  # their second-stage scores, in the same order
    notes: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def meta(self, rerank: Rerank, chunks: Sequence[Chunk], selected: Sequence[str] = ()) -> dict[str, Any]:
        """``Selection.meta["rerank"]``: the stage, how many chunks it re-scored, and the first-stage rank
        of each ``selected`` chunk the second stage moved up from beyond the selection's size."""
        first_rank = {chunks[i].id: r for r, i in enumerate(self.top, start=1)}
        out: dict[str, Any] = {
            "stage": rerank.spec(),
            "rescored": len(self.top),
            "moved_up": {c: first_rank[c] for c in selected if first_rank.get(c, 0) > len(selected)},
            "seconds": round(self.seconds, 4),
        }
        if self.notes:
            out["notes"] = dict(self.notes)
        return out


def place_head(
    first: np.ndarray, top: Sequence[int], second: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a join of two scorers starts from: (the fast scores ``first`` as floats, a copy of them with
    the head ``top`` given its second-stage scores ``second``, the head's indices, those scores as
    floats, the mask of the finite chunks outside the head)."""
    first = np.asarray(first, dtype=np.float64)
    out = first.copy()
    top_idx = np.asarray(top, dtype=np.int64)
    second = np.asarray(second, dtype=np.float64)
    out[top_idx] = second
    rest = np.isfinite(first)
    rest[top_idx] = False
    return first, out, top_idx, second, rest


def combine(first: np.ndarray, top: Sequence[int], second: np.ndarray) -> np.ndarray:
    """The combined score list (see the module docstring): ``top`` get ``second``, the rest below its median."""
    first, out, top_idx, second, rest = place_head(first, top, second)
    if len(top_idx) and rest.any():
        f_top = first[top_idx]
        f_lo, f_span = float(f_top.min()), float(f_top.max() - f_top.min())
        s_mid, s_span = float(np.median(second)), float(second.max() - second.min())
        scale = s_span / f_span if f_span > 0 and s_span > 0 else 1.0
        below = s_mid + scale * (first[rest] - f_lo)
        below -= max(0.0, float(below.max()) - (s_mid - SEAM_STEP))  # a tie at the seam goes below
        out[rest] = below
    return out


def rerank(
    question: str, chunks: Sequence[Chunk], scores: Sequence[float] | np.ndarray, scorer: Scorer, m: int
) -> Reranked:
    """Re-score the top ``m`` of ``scores`` (finite ones, ties in pool order) with ``scorer``; combine."""
    t0 = time.perf_counter()
    first = np.asarray(scores, dtype=np.float64)
    if len(first) != len(chunks):
        raise InputError(f"rerank: {len(first)} scores for {len(chunks)} chunks")
    finite = np.isfinite(first)
    order = np.argsort(np.where(finite, -first, np.inf), kind="stable")
    top = [int(i) for i in order[: min(m, int(finite.sum()))]]
    if not top:
        return Reranked(first.copy(), first, [], np.zeros(0))
    second, notes = score_with_notes(scorer, question, [chunks[i] for i in top])
    second = np.asarray(second, dtype=np.float64)
    if second.shape != (len(top),) or not np.isfinite(second).all():
        raise InputError(f"rerank: the second scorer {scorer.name!r} gave no finite score for every chunk")
    out = combine(first, top, second)
    return Reranked(out, first, top, second, notes, time.perf_counter() - t0)


def build_second(rerank_: Rerank, **defaults: Any) -> Scorer:
    """The second stage's scorer; ``defaults`` (threads, progress) go to a dense one unless its spec sets them."""
    name, options = parse_scorer_spec(rerank_.scorer)
    valid = scorer_options(name)
    extra = {k: v for k, v in defaults.items() if k in valid and k not in options and v is not None}
    return get_scorer(name, **options, **extra)


__all__ = [
    "Rerank",
    "Reranked",
    "build_second",
    "check_server_rerank",
    "combine",
    "parse_rerank",
    "place_head",
    "rerank",
]
