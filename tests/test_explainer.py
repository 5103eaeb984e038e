"""The selection's HTML page (ctxsel.explainer): what it marks, read from the markup and, in headless
Chromium, from the page as the browser rendered it; and its three doors (--html, POST /explain, Jupyter)."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import ctxsel
from ctxsel.explainer import selection_html
from ctxsel.selectors.ldar.band import LDARBand
from tests.support import browser
from tests.support.paths import EXAMPLE_MD

POOL = [f"Paragraph {i} about {'the meteorite ' * (i % 3)}and the museum." for i in range(12)]
SCORES = [0.9, 0.85, 0.3, 0.28, 0.27, 0.2, 0.19, 0.1, 0.09, 0.05, 0.04, 0.01]
KEPT_BG = "rgb(255, 236, 153)"


class Marks(HTMLParser):
    """The chunk divs (id -> (kept?, attributes)) and the SVG marks (id -> attributes) of a page."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.chunks: dict[str, tuple[bool, dict[str, str]]] = {}
        self.marks: dict[str, dict[str, str]] = {}
        self.circles: dict[int, dict[str, str]] = {}
        self.external: list[str] = []
        self.scripts = 0
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and "chunk" in a.get("class", "").split():
            self.chunks[a["data-id"]] = ("kept" in a["class"].split(), a)
        if a.get("id") in ("cut", "gap", "band"):
            self.marks[a["id"]] = a
        if tag == "circle":
            self.circles[int(a["data-rank"])] = a
        self.scripts += tag == "script"
        self.external += [v for k, v in a.items() if k in ("src", "href") and v]


def test_the_page_marks_the_kept_chunks_and_the_cut_where_adaptive_k_cut() -> None:
    sel = ctxsel.select("How heavy is the meteorite?", POOL, "adaptive-k[buffer=0]", SCORES)
    assert sel.ids == ["0", "1"]  # the largest gap, 0.55, falls after rank 2
    page = Marks(selection_html(sel))
    assert {i for i, (kept, _) in page.chunks.items() if kept} == {"0", "1"}
    assert page.marks["cut"]["data-after-rank"] == "2" and page.marks["gap"]["data-after-rank"] == "2"
    assert {r for r, c in page.circles.items() if "kept" in c.get("class", "")} == {1, 2}
    assert page.external == [] and page.scripts == 0  # self-contained: nothing to fetch, nothing to run
    x = {r: float(c["cx"]) for r, c in page.circles.items()}
    assert x[2] < float(page.marks["cut"]["x1"]) < x[3]


def test_a_band_is_shaded_and_a_score_free_selection_says_so() -> None:
    sel = ctxsel.select("q?", POOL, "top-k@3", SCORES)
    band = ctxsel.Selection(
        **{
            **{f: getattr(sel, f) for f in ("ids", "scores", "chunks", "method", "config")},
            "explanation": "band",
            "n_candidates": 12,
            "details": LDARBand(n_ranked=12, l=8, u=10),
        }
    )
    band.view = sel.view
    marks = Marks(selection_html(band)).marks
    assert marks["band"]["data-ranks"] == "3-5" and "cut" not in marks
    free = ctxsel.select("q?", POOL, "full")
    assert "no scores: this method does not rank by them" in selection_html(free)


def test_hostile_text_is_escaped_and_a_rebuilt_selection_shows_what_it_has() -> None:
    pool = ["<script>alert(1)</script> the meteorite", "<img src=x onerror=alert(2)>", "plain"]
    sel = ctxsel.select("<b>heavy</b>?", pool, "top-k@1", [0.9, 0.5, 0.1])
    page = selection_html(sel)
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page and "&lt;b&gt;" in page
    sel.view = None  # as a Selection rebuilt from JSON is
    bare = selection_html(sel)
    assert "only its kept chunks are shown" in bare and len(Marks(bare).chunks) == 1
    assert sel._repr_html_() == bare


def test_long_runs_of_dropped_chunks_fold() -> None:
    pool = [f"chunk {i}" for i in range(40)]
    scores = np.zeros(40)
    scores[20] = 1.0
    page = selection_html(ctxsel.select("q?", pool, "top-k@1", scores))
    assert page.count("<details class='fold'>") == 2 and "19 chunks not kept" in page and "<summary>" in page


def test_select_html_writes_the_page_and_keeps_json_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctxsel.cli.main import main

    out = tmp_path / "sel.html"
    code = main(
        [
            "select",
            "--document",
            str(EXAMPLE_MD),
            "--question",
            "How heavy is the meteorite?",
            "--scorer",
            "bm25",
            "--html",
            str(out),
            "--json",
        ]
    )
    printed = capsys.readouterr()
    import json

    sel = json.loads(printed.out)
    assert code == 0 and printed.err.strip() == f"ctxsel select: wrote {out}"
    page = Marks(out.read_text(encoding="utf-8"))
    assert {i for i, (kept, _) in page.chunks.items() if kept} == set(sel["ids"]) and len(page.chunks) == 28


def test_post_explain_answers_the_page_for_the_selection() -> None:
    from fastapi.testclient import TestClient

    from ctxsel.service import ServiceSettings, create_app

    with TestClient(create_app(ServiceSettings(scorer="keywords"))) as client:
        res = client.post("/explain", json={"question": "q?", "chunks": POOL, "scores": SCORES, "method": "top-k@3"})
        bad = client.post("/explain", json={"question": "", "chunks": POOL})
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/html")
    page = Marks(res.text)
    assert {i for i, (kept, _) in page.chunks.items() if kept} == {"0", "1", "2"}
    assert page.marks["cut"]["data-after-rank"] == "3"
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_body"


needs_chromium = pytest.mark.skipif(
    browser.CHROMIUM is None and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it, and in CI this fails)",
)


@needs_chromium
@pytest.mark.slow
def test_chromium_renders_the_kept_chunks_highlighted_and_the_cut_after_the_last_kept_rank() -> None:
    """From the page as Chromium drew it: the computed background of every chunk, and the on-screen x of
    the cut and of the dots it falls between."""
    sel = ctxsel.select("How heavy is the meteorite?", POOL, "adaptive-k[buffer=1]", SCORES)
    assert sel.ids == ["0", "1", "2"]
    dom = browser.rendered(selection_html(sel))
    assert 'data-probed="yes"' in dom
    page = Marks(dom)
    highlighted = {i for i, (_, a) in page.chunks.items() if a["data-rendered-bg"] == KEPT_BG}
    assert highlighted == set(sel.ids) and len(page.chunks) == len(POOL)
    assert all(a["data-rendered-bg"] == "rgba(0, 0, 0, 0)" for i, (_, a) in page.chunks.items() if i not in highlighted)
    x = {r: float(c["data-screen-x"]) for r, c in page.circles.items()}
    cut = float(page.marks["cut"]["data-screen-x"])
    gap = float(page.marks["gap"]["data-screen-x"])
    assert x[3] < cut < x[4] and x[2] < gap < x[3]  # the cut after rank 3 (gap + buffer), the gap after rank 2
    assert re.search(r"cut after rank 3", dom)
