"""The rerank stage: a second scorer re-scores exactly the first stage's top M, and the combined
list keeps the reranked block on top in the second scorer's order and the rest below in first order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import InputError, SpecError
from ctxsel.pipeline import Pipeline
from ctxsel.ranking import Ranking
from ctxsel.ranking.rerank import Rerank, combine, parse_rerank, rerank
from ctxsel.scoring.bm25 import BM25Scorer
from ctxsel.scoring.keywords import KeywordScorer
from ctxsel.types import Chunk
from tests.support.cli import run_cli

QUESTION = "Where was the lighthouse keeper born?"
TEXTS = [
    "The lighthouse keeper was born in Porto.",  # both stages like it
    "Keeper of the lighthouse: a biography.",
    "Lighthouses guide ships at night.",
    "The harbour master was born in Leith.",
    "Bread is baked from flour and water.",
    "Born free is a film.",
    "Porto is a city in Portugal.",
    "Ships sail at night past the keeper.",
]
POOL = [Chunk(id=f"c{i}", text=t, position=i) for i, t in enumerate(TEXTS)]
# a first stage whose order is known: c7 best, then c6, ... c0 last
FIRST = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])


class Counting:
    """A real scorer that records which chunks it was asked to score (the embed calls)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.name = inner, "counting"
        self.seen: list[list[str]] = []

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        self.seen.append([c.id for c in chunks])
        return np.asarray(self.inner.score(question, chunks), dtype=np.float64)  # type: ignore[attr-defined]


class TestStage:
    def test_second_scores_exactly_the_top_m(self) -> None:
        second = Counting(BM25Scorer())
        out = rerank(QUESTION, POOL, FIRST, second, 3)
        assert second.seen == [["c7", "c6", "c5"]]  # once, the first stage's top 3, in its order
        assert out.top == [7, 6, 5]
        assert len(out.second) == 3

    def test_m_above_the_pool_is_the_second_scorer_alone(self) -> None:
        second = Counting(KeywordScorer())
        out = rerank(QUESTION, POOL, FIRST, second, 100)
        assert len(second.seen[0]) == len(POOL)
        np.testing.assert_allclose(out.scores, KeywordScorer().score(QUESTION, POOL))

    def test_non_finite_first_scores_are_never_rescored_and_stay(self) -> None:
        first = FIRST.copy()
        first[7] = np.nan
        second = Counting(BM25Scorer())
        out = rerank(QUESTION, POOL, first, second, 2)
        assert second.seen == [["c6", "c5"]]
        assert np.isnan(out.scores[7])


class TestCombine:
    def test_order_rules(self) -> None:
        first = np.array([0.9, 0.8, 0.7, 0.5, 0.2, 0.1])
        top = [0, 1, 2]
        second = np.array([0.30, 0.60, 0.45])  # the second stage reverses part of the top
        out = combine(first, top, second)
        np.testing.assert_allclose(out[top], second)  # the reranked block keeps its own scores
        # the block's upper half (0.60, 0.45) above every other chunk, in the second stage's order
        order = list(np.argsort(-out, kind="stable"))
        assert order[:2] == [1, 2]
        assert out[3] < np.median(second)
        # the rest keep their first-stage order among themselves
        assert out[3] > out[4] > out[5]

    def test_a_chunk_the_second_stage_rates_low_sinks_among_the_rest(self) -> None:
        first = np.array([0.9, 0.8, 0.7, 0.69, 0.1])
        second = np.array([0.8, 0.7, 0.1])  # c2: first-stage third, second-stage far down
        out = combine(first, [0, 1, 2], second)
        assert out[3] > out[2]  # the next first-stage chunk now ranks above it
        assert out[4] < out[2]  # and the first stage's tail stays below it

    def test_seam_gap_is_the_first_stage_gap_rescaled(self) -> None:
        first = np.array([1.0, 0.8, 0.6, 0.5, 0.0])
        second = np.array([0.9, 0.5, 0.7])
        out = combine(first, [0, 1, 2], second)
        scale = (0.9 - 0.5) / (1.0 - 0.6)
        assert out[3] == pytest.approx(0.7 - scale * 0.1)  # 0.1 below the M-th, rescaled, from the median
        assert out[4] == pytest.approx(0.7 - scale * 0.6)

    def test_a_tie_at_the_seam_goes_below(self) -> None:
        first = np.array([1.0, 0.5, 0.5])
        out = combine(first, [0, 1], np.array([0.2, 0.4]))
        assert out[2] < 0.3

    def test_flat_stages_keep_a_unit_scale(self) -> None:
        out = combine(np.array([0.5, 0.5, 0.4]), [0, 1], np.array([0.3, 0.3]))
        assert out[2] == pytest.approx(0.3 - 0.1)


class TestSpec:
    def test_parses(self) -> None:
        assert parse_rerank("dense[model=nomic-v1.5]@50") == Rerank("dense[model=nomic-v1.5]", 50)
        assert parse_rerank("bm25@1k") == Rerank("bm25", 1000)
        assert parse_rerank("none") is None and parse_rerank("") is None and parse_rerank(None) is None
        assert Rerank("bm25", 5).spec() == "bm25@5"

    @pytest.mark.parametrize(
        ("spec", "says"),
        [
            ("bm25@0", "M must be an integer >= 1"),
            ("bm25@-3", "M must be an integer >= 1"),
            ("bm25@2.5", "M must be an integer >= 1"),
            ("bm25", "use SCORER@M"),
            ("bm25@", "use SCORER@M"),
            ("dense[model=nomic-v9]@20", "unknown model 'nomic-v9'"),
            ("cross@20", "unknown scorer 'cross'"),
            ("bm25[k=1]@3", "no option 'k'"),
            ("bm25@3@4", "use SCORER@M"),
        ],
    )
    def test_bad_specs_say_why(self, spec: str, says: str) -> None:
        with pytest.raises((SpecError, InputError), match=r"\S") as e:
            parse_rerank(spec)
        assert says in str(e.value)
        assert "\n" not in str(e.value)

    @pytest.mark.parametrize("spec", ["bm25@0", "dense[model=nomic-v9]@20"])
    def test_cli_bad_spec_is_one_line(self, capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str) -> None:
        doc = tmp_path / "d.txt"
        doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
        with pytest.raises(SystemExit) as e:
            run_cli(capsys, "select", "--question", QUESTION, "--document", str(doc), "--rerank", spec)
        assert e.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ctxsel select: error: --rerank: "), lines


class TestSurfaces:
    def test_select_meta_and_explanation_name_the_stage(self) -> None:
        sel = ctxsel.select(QUESTION, POOL, "top-k@2", scores=FIRST, rerank="bm25@4")
        assert sel.meta["rerank"]["stage"] == "bm25@4"
        assert sel.meta["rerank"]["rescored"] == 4
        moved = sel.meta["rerank"]["moved_up"]
        assert all(rank > 2 for rank in moved.values())  # only chunks the first stage ranked past k=2
        assert set(sel.ids) <= {"c7", "c6", "c5", "c4"}
        assert "re-ranked: bm25@4 re-scored the first stage's top 4" in sel.explanation

    def test_a_reranking_chain_runs_as_two_stages_in_the_pipeline(self) -> None:
        second = Counting(BM25Scorer())
        chain = Ranking(KeywordScorer(), rerank="bm25@3", second=second)
        sel = Pipeline.from_spec("top-k@2", scorer=chain).select(QUESTION, POOL)
        assert len(second.seen) == 1 and len(second.seen[0]) == 3
        assert sel.meta["rerank"]["stage"] == "bm25@3"
        assert chain.name == "keywords>bm25@3" and chain.model_id == "keywords|rerank=bm25@3"

    def test_rerank_with_a_score_free_method_is_refused(self) -> None:
        with pytest.raises(InputError, match="uses none"):
            Pipeline.from_spec("full", rerank="bm25@3")

    def test_cli_select_json_carries_the_meta(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        doc = tmp_path / "d.txt"
        doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
        code, out, _ = run_cli(
            capsys,
            "select",
            "--question",
            QUESTION,
            "--document",
            str(doc),
            "--scorer",
            "keywords",
            "--rerank",
            "bm25@3",
            "--method",
            "top-k@2",
            "--json",
        )
        assert code == 0
        meta = json.loads(out)["meta"]
        assert meta["rerank"]["stage"] == "bm25@3" and meta["rerank"]["rescored"] == 3

    def test_eval_records_the_stage(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        code, _, _ = run_cli(
            capsys,
            "eval",
            "--dataset",
            "example",
            "--methods",
            "top-k@2",
            "--scorer",
            "keywords",
            "--rerank",
            "bm25@3",
            "--ci",
            "none",
            "--no-progress",
            "--output",
            str(tmp_path / "run"),
        )
        assert code == 0
        config = json.loads((tmp_path / "run" / "config.json").read_text(encoding="utf-8"))
        assert "rerank=bm25@3" in config["scorer"]
        rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
        assert rows and all(r["rerank"]["stage"] == "bm25@3" for r in rows)

    def test_cli_given_scores_are_reranked(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        doc, scores = tmp_path / "d.txt", tmp_path / "s.json"
        doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
        scores.write_text(json.dumps(FIRST.tolist()), encoding="utf-8")
        argv = ["select", "--question", QUESTION, "--document", str(doc), "--scores", str(scores), "--json"]
        code, out, _ = run_cli(capsys, *argv, "--method", "top-k@2", "--rerank", "bm25@4")
        assert code == 0
        got = json.loads(out)
        assert got["meta"]["rerank"]["rescored"] == 4
        assert set(got["ids"]) <= {"7", "6", "5", "4"}  # a document's chunks are numbered
