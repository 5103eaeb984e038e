"""Expansion (second hop, mention links) on hand-built pools where the second
paragraph of a bridge question is reachable only through the first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxsel
from ctxsel.cli.main import main
from ctxsel.query import Query
from ctxsel.ranking import (
    Expansion,
    MentionLinks,
    Ranking,
    SecondHop,
    expand,
    parse_expansion,
)
from ctxsel.ranking.links import build_graph, mention_graph, title_of
from ctxsel.scoring.keywords import KeywordScorer
from ctxsel.types import Chunk

QUESTION = "Where was the director of Film X born?"
# "Jane Doe" shares no word with the question: only Film X's paragraph leads to her.
BRIDGE = [
    Chunk(id="Film X", text="Film X: Film X is a 1999 drama directed by Jane Doe.", position=0),
    Chunk(id="Jane Doe", text="Jane Doe: Jane Doe, who directed a drama in 1999, lives in Lisbon.", position=1),
    Chunk(id="Opera", text="Opera: The opera director was born in Vienna.", position=2),
    Chunk(id="Sailing", text="Sailing: The regatta director was born at sea.", position=3),
    Chunk(id="Bread", text="Bread: Bread is baked from flour and water.", position=4),
]


def keyword_scores(question: str = QUESTION) -> np.ndarray:
    return KeywordScorer().score(question, BRIDGE)


class TestMentionLinks:
    def test_second_paragraph_only_reachable_by_link(self) -> None:
        scores = keyword_scores()
        assert scores[1] == 0  # invisible to the first hop
        plain = ctxsel.select(QUESTION, BRIDGE, "top-k@2", scores=scores)
        assert "Jane Doe" not in plain.ids
        sel = ctxsel.select(QUESTION, BRIDGE, "top-k@2", scores=scores, expand="links[m=1,boost=1]")
        assert sel.ids == ["Film X", "Jane Doe"]
        came_in = sel.meta["expansion"]["came_in"]
        assert came_in == {"Jane Doe": {"first_hop_rank": 4, "by": "link", "linked_from": ["Film X"]}}
        assert sel.meta["expansion"]["pinned"] == ["Film X"]
        assert "expansion brought in 'Jane Doe' (linked from 'Film X')" in sel.explanation

    def test_question_mentions_are_boosted(self) -> None:
        flat = np.zeros(len(BRIDGE))
        exp = Expansion(links=MentionLinks(m=1, boost=0.5, question=True))
        out = expand("Tell me about Bread and Opera", BRIDGE, flat, None, exp)
        assert out.linked_from[4] == ["question"] and out.linked_from[2] == ["question"]
        off = expand(
            "Tell me about Bread", BRIDGE, flat, None, Expansion(links=MentionLinks(m=1, boost=0.5, question=False))
        )
        assert 4 not in off.linked_from

    def test_graph_from_titles(self) -> None:
        g = build_graph(BRIDGE)
        assert g.key_source == "titles"
        assert g.links[0] == frozenset({1})  # Film X names Jane Doe
        assert g.links[1] == frozenset()  # itself excluded
        assert g.n_links == 1

    def test_untitled_pool_links_by_salient_names(self) -> None:
        pool = [
            Chunk(id="a", text="The observatory was founded in 1911 by the astronomer Edith Marlowe."),
            Chunk(id="b", text="Her star atlas made Edith Marlowe rich enough to pay for the first dome."),
            Chunk(id="c", text="Tickets cost 8 euros for adults."),
        ]
        g = build_graph(pool, keys="entities")
        assert g.key_source == "entities"
        assert g.links[0] == frozenset({1}) and g.links[1] == frozenset({0}) and g.links[2] == frozenset()
        assert build_graph(pool, keys="auto").key_source == "entities"
        # by default an untitled pool gets no links, so `links` leaves its ranking as it was
        assert build_graph(pool).n_links == 0
        scores = np.array([0.2, 0.1, 0.9])
        out = expand("Who founded the observatory?", pool, scores, None, Expansion(links=MentionLinks()))
        assert np.argsort(-out.scores, kind="stable").tolist() == [2, 0, 1] and out.linked_from == {}

    def test_a_few_labels_do_not_make_titles(self) -> None:
        pool = [
            Chunk(id="n", text="Note: Edith Marlowe paid for the dome."),
            Chunk(id="a", text="Edith Marlowe founded it."),
            Chunk(id="b", text="Nothing here."),
        ]
        assert build_graph(pool).n_keys == 0  # one label in three chunks is not a titled pool
        titled = [
            Chunk(id="x", text="Body", meta={"title": "Edith Marlowe"}),
            Chunk(id="y", text="Edith Marlowe founded it."),
            Chunk(id="z", text="Nothing here."),
        ]
        assert build_graph(titled).links[1] == frozenset({0})  # a meta title always counts

    def test_titles(self) -> None:
        assert title_of(Chunk(id="x", text="Kiss and Tell (1945 film): A comedy.")) == "Kiss and Tell (1945 film)"
        heading = Chunk(id="x", text="# Harbour Town Observatory: visitor handbook")
        assert title_of(heading) == "Harbour Town Observatory"
        assert title_of(Chunk(id="x", text="Body text", meta={"heading": "Opening hours"})) == "Opening hours"
        assert title_of(Chunk(id="x", text="This sentence is long and has no label at all in it: really.")) is None
        assert title_of(Chunk(id="x", text="No label here.")) is None
        # the disambiguator is not part of what the text must say
        pool = [
            Chunk(id="k", text="Kiss and Tell (1945 film): A comedy."),
            Chunk(id="s", text="Shirley Temple: She starred in Kiss and Tell."),
        ]
        assert build_graph(pool).links[1] == frozenset({0})

    def test_graph_is_built_once_per_pool(self) -> None:
        pool = list(BRIDGE)
        g = mention_graph(pool)
        assert mention_graph(pool) is g
        assert mention_graph(list(BRIDGE)) is g  # same content, another list: found by hash
        assert mention_graph(pool, keys="entities") is not g


class TestSecondHop:
    def test_hop_brings_in_the_bridge_paragraph(self) -> None:
        sel = ctxsel.select(
            QUESTION, BRIDGE, "top-k@2", scores=keyword_scores(), scorer=KeywordScorer(), expand="hop[m=1,weight=0.7]"
        )
        assert sel.ids == ["Film X", "Jane Doe"]
        assert sel.meta["expansion"]["came_in"]["Jane Doe"]["by"] == "second hop"

    def test_hop_merge_is_the_documented_formula(self) -> None:
        first = keyword_scores()
        out = expand(QUESTION, BRIDGE, first, KeywordScorer(), Expansion(hop=SecondHop(m=1, weight=0.7)))
        top = int(np.argmax(first))
        second = KeywordScorer().score(QUESTION + "\n" + BRIDGE[top].text, BRIDGE).astype(float)
        rest = [i for i in range(len(BRIDGE)) if i != top]
        # the widened chunk's own self-match is left out of the second hop's normalisation
        lo, hi = second[rest].min(), second[rest].max()
        f = (first - first.min()) / (first.max() - first.min())
        want = 0.3 * f + 0.7 * np.clip((second - lo) / (hi - lo), 0, 1)
        np.testing.assert_allclose(out.scores[rest], want[rest])
        assert out.scores[top] > out.scores[rest].max()  # pinned

    def test_hop_needs_a_scorer(self) -> None:
        with pytest.raises(ValueError, match="needs a scorer"):
            expand(QUESTION, BRIDGE, keyword_scores(), None, Expansion(hop=SecondHop()))

    def test_an_expanding_chain_ranks_a_query(self) -> None:
        chain = Ranking(KeywordScorer(), expand="hop+links")
        assert chain.name == "keywords+hop[m=1,weight=0.7]+links[m=1,boost=0.3,question=true,keys=titles]"
        scored = chain.rank(Query(QUESTION, BRIDGE))
        assert scored.scores is not None and scored.scores.shape == (5,) and int(np.argmax(scored.scores)) == 0
        assert scored.expanded is not None and scored.expanded.hop_used
        assert chain.rank(Query(QUESTION, [])).scores is not None


class TestSpec:
    def test_defaults_and_options(self) -> None:
        assert parse_expansion("hop") == Expansion(hop=SecondHop())
        e = parse_expansion("hop[m=2,weight=0.3]+links[m=3,boost=0.2,question=false]")
        assert e == Expansion(SecondHop(2, 0.3), MentionLinks(3, 0.2, False))
        assert e.pinned == 3
        assert parse_expansion(e.spec()) == e
        assert parse_expansion("none") is None and parse_expansion(None) is None

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("jump", "bad expansion stage 'jump'"),
            ("hop+hop", "names hop twice"),
            ("hop[m=0]", "m must be >= 1, got 0"),
            ("hop[weight=2]", "weight must be >= 0 and <= 1, got 2"),
            ("links[boost=-1]", "boost must be >= 0 and < 1000000, got -1"),
            ("links[keys=words]", "keys must be one of auto, titles, entities"),
            ("links[depth=2]", "no option 'depth'; its options are: m, boost, question, keys"),
            ("links[m]", "expected key=value"),
        ],
    )
    def test_bad_specs_say_what_is_wrong(self, spec: str, message: str) -> None:
        with pytest.raises(ValueError, match=message.replace("[", r"\[")):
            parse_expansion(spec)

    def test_expand_with_a_scoreless_method_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="uses none"):
            ctxsel.select(QUESTION, BRIDGE, "full", expand="links")

    def test_nan_scores_keep_the_selectors_policy(self) -> None:
        scores = keyword_scores().astype(float)
        scores[3] = np.nan
        with pytest.raises(ValueError):
            ctxsel.select(QUESTION, BRIDGE, "top-k@2", scores=scores, expand="links")
        sel = ctxsel.select(QUESTION, BRIDGE, "top-k@4", scores=scores, expand="links", nan_policy="last")
        assert len(sel.ids) == 4 and "Sailing" not in sel.ids  # a NaN is ranked last: kept only past the rest
        sel = ctxsel.select(QUESTION, BRIDGE, "top-k@5", scores=scores, expand="links", nan_policy="last")
        assert sel.ids[-1] == "Sailing" and sel.scores[-1] is None


# --- property: expansion never removes a chunk the first hop kept in its top m ---------------

TITLES = ["Alpha", "Beta Gamma", "Delta", "Epsilon", "Zeta Eta", "Theta", "Iota", "Kappa"]


@st.composite
def pools(draw: st.DrawFn) -> tuple[list[Chunk], np.ndarray]:
    n = draw(st.integers(1, 8))
    chunks = []
    for i in range(n):
        named = draw(st.lists(st.sampled_from(TITLES), max_size=3))
        chunks.append(Chunk(id=f"c{i}", text=f"{TITLES[i]}: text naming " + " and ".join(named) + ".", position=i))
    # coarse values make ties likely: ties must still keep the pinned set
    scores = np.array(draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.5, 0.9, 1.0]), min_size=n, max_size=n)))
    return chunks, scores


expansions = st.builds(
    Expansion,
    hop=st.none() | st.builds(SecondHop, m=st.integers(1, 4), weight=st.sampled_from([0.0, 0.3, 0.5, 1.0])),
    links=st.none()
    | st.builds(
        MentionLinks, m=st.integers(1, 4), boost=st.sampled_from([0.0, 0.3, 1.0, 100.0]), question=st.booleans()
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=pools(), exp=expansions, question=st.sampled_from(["Alpha and Delta?", "what?", "Zeta Eta Kappa"]))
def test_expansion_keeps_the_first_hops_top_m(
    pool: tuple[list[Chunk], np.ndarray], exp: Expansion, question: str
) -> None:
    chunks, scores = pool
    m = min(exp.pinned, len(chunks))
    out = expand(question, chunks, scores, KeywordScorer(), exp)
    first_top = list(np.argsort(-scores, kind="stable")[:m])
    new_top = np.argsort(-out.scores, kind="stable")[:m].tolist()
    assert new_top == [int(i) for i in first_top]  # the same chunks, in the same order
    assert out.pinned == [int(i) for i in first_top]
    # a cut that keeps k <= m chunks keeps the same chunks as without expansion
    for k in range(1, m + 1):
        plain = ctxsel.select(question, chunks, f"top-k@{k}", scores=scores)
        expanded = ctxsel.select(question, chunks, f"top-k@{k}", scores=scores, scorer=KeywordScorer(), expand=exp)
        assert set(plain.ids) == set(expanded.ids)


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def bridge_jsonl(tmp_path: Path) -> Path:
    p = tmp_path / "bridge.jsonl"
    rows = [
        {
            "id": "q1",
            "question": QUESTION,
            "gold_ids": ["Film X", "Jane Doe"],
            "chunks": [{"id": c.id, "text": c.text} for c in BRIDGE],
        }
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return p


class TestCLI:
    def test_select_expand_explains(
        self, capsys: pytest.CaptureFixture[str], bridge_jsonl: Path, tmp_path: Path
    ) -> None:
        doc = tmp_path / "doc.jsonl"
        doc.write_text("\n".join(json.dumps({"id": c.id, "text": c.text}) for c in BRIDGE), encoding="utf-8")
        rc = main(
            [
                "select",
                "--document",
                str(doc),
                "--question",
                QUESTION,
                "--method",
                "top-k@2",
                "--scorer",
                "keywords",
                "--expand",
                "links[m=1,boost=1]",
                "--json",
            ]
        )
        out = json.loads(capsys.readouterr().out)
        assert rc == 0
        assert out["reading_order"] == ["Film X", "Jane Doe"]
        assert "linked from 'Film X'" in out["explanation"]

    def test_eval_rankings_side_by_side(
        self, capsys: pytest.CaptureFixture[str], bridge_jsonl: Path, tmp_path: Path
    ) -> None:
        rc = main(
            [
                "eval",
                "--dataset",
                str(bridge_jsonl),
                "--output",
                str(tmp_path / "o"),
                "--no-progress",
                "--methods",
                "top-k@2",
                "--rankings",
                "keywords,bm25,keywords+links[m=1,boost=1]",
            ]
        )
        out = capsys.readouterr().out
        assert rc == 0
        summary = json.loads((tmp_path / "o" / "summary.json").read_text())
        methods = summary["methods"] if "methods" in summary else summary
        assert {"top-k@2 on keywords", "top-k@2 on bm25", "top-k@2 on keywords+links[m=1,boost=1]"} <= set(methods)
        assert "| top-k@2 on keywords+links[m=1,boost=1] | 100.0 [100.0, 100.0] |" in out
        assert "| top-k@2 on keywords | 50.0 [50.0, 50.0] |" in out
        row = [
            json.loads(x)
            for x in (tmp_path / "o" / "results.jsonl").read_text().splitlines()
            if "links" in json.loads(x)["method"]
        ][0]
        assert row["expansion"]["came_in"]["Jane Doe"]["linked_from"] == ["Film X"]

    def test_eval_scorer_with_expand(
        self, capsys: pytest.CaptureFixture[str], bridge_jsonl: Path, tmp_path: Path
    ) -> None:
        rc = main(
            [
                "eval",
                "--dataset",
                str(bridge_jsonl),
                "--output",
                str(tmp_path / "o"),
                "--no-progress",
                "--methods",
                "top-k@2",
                "--scorer",
                "hybrid[dense=0,bm25=1]",
                "--expand",
                "links[boost=1]",
            ]
        )
        assert rc == 0 and "| top-k@2 | 50.0 [50.0, 50.0] |" in capsys.readouterr().out
        config = json.loads((tmp_path / "o" / "config.json").read_text())
        assert config["scorer"].startswith("hybrid+links[m=1,boost=1,question=true,keys=titles]")
        row = json.loads((tmp_path / "o" / "results.jsonl").read_text().splitlines()[0])
        # BM25 ranks "Opera" first (director, born); the question names "Film X", which comes in by its title
        assert row["ids"] == ["Opera", "Film X"]
        assert row["expansion"]["came_in"] == {
            "Film X": {"first_hop_rank": 3, "by": "link", "linked_from": ["question"]}
        }

    @pytest.mark.parametrize("argv", [["--expand", "jump"], ["--scorer", "hybrid[fusion"]])
    def test_bad_specs_exit_2(self, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
        with pytest.raises(SystemExit) as e:
            main(["select", "--document", "x", "--question", "q", *argv])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "bad expansion stage 'jump'" in err or "bad scorer spec" in err


class TestService:
    """The service passes ``expand`` through: the same re-ranking and the same meta as ctxsel.select."""

    @pytest.fixture
    def client(self) -> object:
        pytest.importorskip("fastapi")
        from fastapi.testclient import TestClient

        from ctxsel.service import ServiceSettings, create_app

        return TestClient(create_app(ServiceSettings(scorer="keywords")))

    def body(self, **extra: object) -> dict:
        return {
            "question": QUESTION,
            "method": "top-k@2",
            "chunks": [{"id": c.id, "text": c.text} for c in BRIDGE],
            **extra,
        }

    def test_select_with_expand(self, client: Any) -> None:
        r = client.post("/select", json=self.body(expand="links[m=1,boost=1]"))
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["ids"] == ["Film X", "Jane Doe"]
        assert out["meta"]["expansion"]["came_in"]["Jane Doe"]["linked_from"] == ["Film X"]
        hop = client.post("/select", json=self.body(expand="hop[m=1,weight=0.7]"))
        assert hop.status_code == 200 and hop.json()["ids"] == ["Film X", "Jane Doe"]
        plain = client.post("/select", json=self.body())
        assert "Jane Doe" not in plain.json()["ids"] and "expansion" not in plain.json()["meta"]

    def test_bad_expand_is_422(self, client: Any) -> None:
        r = client.post("/select", json=self.body(expand="jump"))
        assert r.status_code == 422 and "bad expansion stage 'jump'" in r.text
