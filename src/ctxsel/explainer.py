"""One self-contained HTML page that shows a selection: what was asked, where the cut fell on the
sorted scores, and which chunks of the document were kept.

The page loads nothing (inline CSS and SVG, no script, no font, no network), so it can be mailed,
attached to a report or opened offline. It holds:

- the question, the method and its explanation, and kept / total chunks and tokens;
- the sorted-score curve (inline SVG, ranks on a log axis past 50 chunks): every rank a dot, the kept
  ranks filled, the cut a dashed line after the last kept rank of a method that keeps a prefix, the
  band shaded for one that keeps a band (LDAR), and adaptive-k's largest gap drawn as a red bar
  between the two ranks it separates;
- the document in reading order, kept chunks highlighted, each chunk's rank, score and tokens in its
  tooltip and its margin; the chunks next to a kept one are shown, the runs between fold into a
  "N chunks not kept" line that opens on a click (HTML ``<details>``, so a pool of thousands stays
  readable).

:func:`selection_html` renders a Selection made by :func:`ctxsel.select` or a Pipeline (they keep
the question, the pool and the scores in :attr:`~ctxsel.types.Selection.view`); a Selection without
them (rebuilt from JSON, or made by hand) shows its kept chunks only. ``ctxsel select --html FILE``,
``POST /explain`` and Jupyter (``Selection._repr_html_``) show the same page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ctxsel.numbers import short_number

if TYPE_CHECKING:  # only for types: ctxsel.types imports this module for Selection._repr_html_
    from ctxsel.types import Chunk, Selection

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40
CONTEXT = 1  #: chunks shown before and after each kept one; the rest fold into "N chunks not kept"
LOG_AXIS_FROM = 50  #: pools larger than this get a log rank axis, so the head (where cuts fall) is readable

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 760px; color: #222; }
h1 { font-size: 1.25em; margin-bottom: .2em; }
.summary { color: #444; margin: .2em 0 1em; }
.summary code { background: #f1f3f5; padding: 0 .25em; border-radius: 3px; }
svg { background: #fcfcfd; border: 1px solid #e9ecef; border-radius: 6px; }
.chunk { padding: .4em .6em; margin: .25em 0; border-left: 4px solid transparent; border-radius: 3px;
         color: #868e96; white-space: pre-wrap; }
.chunk.kept { background: rgb(255, 236, 153); border-left-color: rgb(240, 140, 0); color: #212529; }
.chunk:hover { outline: 1px solid #adb5bd; }
.chunk .tag { float: right; font-size: .8em; color: #868e96; margin-left: 1em; }
.legend { font-size: .85em; color: #555; }
details.fold > summary { color: #868e96; font-size: .85em; cursor: pointer; margin: .3em 0; }
"""


def _x(rank: float, n: int) -> float:
    """The x of a (1-based, possibly fractional) rank on the curve's axis."""
    span = WIDTH - LEFT - RIGHT
    if n <= 1:
        return LEFT + span / 2
    if n > LOG_AXIS_FROM:
        return LEFT + span * math.log(max(rank, 1.0)) / math.log(n)
    return LEFT + span * (rank - 1) / (n - 1)


def _curve_svg(sel: Selection, scores: np.ndarray, order: np.ndarray, kept_ranks: set[int]) -> str:
    s = scores[order]
    finite = s[np.isfinite(s)]
    n = len(s)
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5

    def y(v: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (hi - v) / (hi - lo)

    out = [
        f'<svg id="curve" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="sorted scores with the cut">'
    ]
    band = sel.details.kept_band() if sel.details is not None else None
    if band is not None:
        x0, x1 = _x(band[0] - 0.5, n), _x(band[1] + 0.5, n)
        out.append(
            f'<rect id="band" x="{x0:.2f}" y="{TOP}" width="{max(x1 - x0, 1):.2f}" '
            f'height="{HEIGHT - TOP - BOTTOM}" fill="rgb(255, 236, 153)" data-ranks="{band[0]}-{band[1]}"/>'
        )
    points = " ".join(f"{_x(r + 1, n):.2f},{y(float(v)):.2f}" for r, v in enumerate(s) if math.isfinite(v))
    out.append(f'<polyline points="{points}" fill="none" stroke="rgb(28, 126, 214)" stroke-width="1.2"/>')
    for r, v in enumerate(s, start=1):
        if not math.isfinite(v):
            continue
        kept = r in kept_ranks
        out.append(
            f'<circle class="rank{" kept" if kept else ""}" data-rank="{r}" cx="{_x(r, n):.2f}" cy="{y(float(v)):.2f}" '
            f'r="{3 if kept else 1.6}" fill="{"rgb(240, 140, 0)" if kept else "rgb(28, 126, 214)"}">'
            f"<title>rank {r}: {short_number(float(v))}</title></circle>"
        )
    gap = getattr(sel.details, "cut_index", None)
    if gap is not None and 0 <= gap < n - 1 and math.isfinite(s[gap]) and math.isfinite(s[gap + 1]):
        xg = _x(gap + 1.5, n)
        out.append(
            f'<line id="gap" x1="{xg:.2f}" x2="{xg:.2f}" y1="{y(float(s[gap])):.2f}" y2="{y(float(s[gap + 1])):.2f}" '
            f'stroke="rgb(224, 49, 49)" stroke-width="4" data-after-rank="{gap + 1}">'
            f"<title>largest gap {short_number(float(s[gap] - s[gap + 1]))} between ranks {gap + 1} and {gap + 2}"
            "</title></line>"
        )
    prefix = kept_ranks == set(range(1, len(kept_ranks) + 1))
    if band is None and prefix and 0 < len(kept_ranks) < n:
        k = len(kept_ranks)
        xc = _x(k + 0.5, n)
        out.append(
            f'<line id="cut" x1="{xc:.2f}" x2="{xc:.2f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="rgb(73, 80, 87)" '
            f'stroke-dasharray="5,4" data-after-rank="{k}"><title>cut: kept ranks 1-{k}</title></line>'
            f'<text x="{xc + 4:.2f}" y="{TOP + 12}" font-size="12" fill="#495057">cut after rank {k}</text>'
        )
    axis = "rank (log scale)" if n > LOG_AXIS_FROM else "rank"
    out.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}" stroke="#adb5bd"/>'
        f'<text x="{LEFT}" y="{HEIGHT - BOTTOM + 16}" font-size="12" fill="#495057">1</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 16}" font-size="12" fill="#495057" '
        f'text-anchor="end">{n}</text>'
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" font-size="12" fill="#495057" '
        f'text-anchor="middle">{axis}</text>'
        f'<text x="{LEFT - 6}" y="{y(hi) + 4:.2f}" font-size="11" fill="#495057" text-anchor="end">'
        f"{short_number(hi, 2)}</text>"
        f'<text x="{LEFT - 6}" y="{y(lo) + 4:.2f}" font-size="11" fill="#495057" text-anchor="end">'
        f"{short_number(lo, 2)}</text></svg>"
    )
    return "".join(out)


def selection_html(
    sel: Selection,
    question: str | None = None,
    chunks: Sequence[Chunk] | None = None,
    scores: Sequence[float] | np.ndarray | None = None,
) -> str:
    """The page for ``sel``: ``question``, the pool ``chunks`` and its ``scores`` (one per chunk), each
    defaulting to what the Selection kept in :attr:`~ctxsel.types.Selection.view`."""
    view = sel.view
    question = question if question is not None else (view.question if view is not None else None)
    pool = list(chunks) if chunks is not None else (list(view.chunks) if view is not None else list(sel.chunks))
    raw = scores if scores is not None else (view.scores if view is not None else None)
    arr = None if raw is None else np.asarray(raw, dtype=np.float64)
    kept = set(sel.ids)
    rank_of: dict[str, int] = {}
    score_of: dict[str, float] = {}
    curve = ""
    if arr is not None and len(arr) == len(pool) and len(pool):
        order = np.argsort(-np.nan_to_num(arr, nan=-np.inf), kind="stable")
        rank_of = {pool[i].id: r for r, i in enumerate(order, start=1)}
        score_of = {c.id: float(v) for c, v in zip(pool, arr)}
        curve = _curve_svg(sel, arr, order, {rank_of[i] for i in sel.ids if i in rank_of})
    else:
        rank_of = {i: r for r, i in enumerate(sel.ids, start=1)}
        score_of = {i: float(s) for i, s in zip(sel.ids, sel.scores) if s is not None}
    total_tokens = sum(max(c.n_tokens, 0) for c in pool)
    reading = sorted(pool, key=lambda c: (c.doc_id, c.position))
    near = {
        i
        for i, c in enumerate(reading)
        if any(
            0 <= j < len(reading) and reading[j].id in kept and reading[j].doc_id == c.doc_id
            for j in (i - CONTEXT, i, i + CONTEXT)
        )
    }
    docs: list[str] = []
    folded: list[str] = []

    def fold() -> None:
        if folded:
            docs.append(
                f"<details class='fold'><summary>{len(folded)} chunk{'s' * (len(folded) > 1)} not kept</summary>"
                f"{''.join(folded)}</details>"
            )
            folded.clear()

    for i, c in enumerate(reading):
        r = rank_of.get(c.id)
        s = score_of.get(c.id)
        tag = " · ".join(
            part
            for part in (
                f"rank {r}" if r is not None else "",
                f"score {short_number(s)}" if s is not None and math.isfinite(s) else "",
                f"{c.n_tokens} tokens",
            )
            if part
        )
        div = (
            f'<div class="chunk{" kept" if c.id in kept else ""}" data-id="{html.escape(c.id)}" '
            f'data-rank="{r if r is not None else ""}" title="{html.escape(c.id)}: {tag}">'
            f'<span class="tag">{html.escape(c.id)} · {tag}</span>{html.escape(c.text)}</div>'
        )
        if i in near:
            fold()
            docs.append(div)
        else:
            folded.append(div)
    fold()
    known_pool = view is not None or chunks is not None
    if not curve:
        curve = (
            '<p class="legend">(no scores: this method does not rank by them)</p>'
            if known_pool
            else '<p class="legend">(this selection keeps no pool: only its kept chunks are shown)</p>'
        )
    head = html.escape(question) if question else "(the question is not kept in this selection)"
    summary = (
        f"<code>{html.escape(sel.method)}</code> kept {len(sel.ids)} of "
        f"{len(pool) if known_pool else sel.n_candidates} chunks, {sel.n_tokens:,}"
        + (f" of {total_tokens:,}" if known_pool else "")
        + " tokens"
    )
    legend = (
        '<p class="legend">Dots: every chunk by rank, filled where kept; dashed line: the cut; red bar: the '
        "largest gap; shaded: a kept band. Highlighted below: the kept chunks, in reading order.</p>"
        if "<svg" in curve
        else ""
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>ctxsel: {head}</title><style>{CSS}</style></head><body>"
        f"<h1>{head}</h1><p class='summary'>{summary}</p>"
        f"<p class='summary' id='explanation'>{html.escape(sel.explanation)}</p>"
        f"{curve}{legend}<div id='document'>{''.join(docs)}</div></body></html>"
    )


__all__ = ["selection_html"]
