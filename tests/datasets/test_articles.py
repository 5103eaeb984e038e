"""The generated long-article set: deterministic, labelled right, readable as JSONL."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxsel.datasets import load_dataset
from ctxsel.datasets.articles import make_examples, make_set, write_jsonl
from ctxsel.errors import InputError


def test_same_seed_same_set_other_seed_other_set() -> None:
    a, b = make_set(3, 0, 8), make_set(3, 0, 8)
    assert [(e.id, e.question, e.gold_ids, e.answers) for e in a] == [
        (e.id, e.question, e.gold_ids, e.answers) for e in b
    ]
    assert [c.text for c in a[0].chunks] == [c.text for c in b[0].chunks]
    other = make_set(4, 0, 8)
    assert [c.text for c in other[0].chunks] != [c.text for c in a[0].chunks]


def test_every_gold_paragraph_holds_an_answer_and_no_other_paragraph_of_its_article_does() -> None:
    examples = make_examples(seed=0, sets=2, articles=8)
    assert len(examples) == 2 * 8 * 4
    for e in examples:
        text = {c.id: c.text for c in e.chunks}
        assert 1 <= len(e.gold_ids) <= 2 and len(e.answers) == len(e.gold_ids)
        for g, ans in zip(e.gold_ids, e.answers):
            assert ans in text[g], (e.id, g, ans)
        article = e.gold_ids[0].split("p")[0]
        others = [t for cid, t in text.items() if cid.startswith(article + "p") and cid not in e.gold_ids]
        for ans in e.answers:
            assert not any(ans in t for t in others), (e.id, ans)
        assert not any(ans in e.question for ans in e.answers)  # the question does not give it away


def test_shape_long_sectioned_articles() -> None:
    examples = make_set(0, 0, 16)
    chunks = examples[0].chunks
    assert 300 <= len(chunks) <= 700
    assert all(e.chunks is chunks for e in examples)  # one context per set
    per_article: dict[str, int] = {}
    for c in chunks:
        per_article[c.id.split("p")[0]] = per_article.get(c.id.split("p")[0], 0) + 1
    assert len(per_article) == 16 and all(15 <= n <= 41 for n in per_article.values())
    assert sum(1 for e in examples if len(e.gold_ids) == 2) == 16
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_loader_spec_and_jsonl_round_trip(tmp_path: Path) -> None:
    got = load_dataset("articles[seed=1,sets=1,articles=4]", limit=3)
    assert [e.id for e in got] == [e.id for e in make_set(1, 0, 4)[:3]]
    path = tmp_path / "a.jsonl"
    write_jsonl(got, path)
    back = load_dataset(str(path))
    assert [(e.id, e.gold_ids, e.answers, [c.text for c in e.chunks]) for e in back] == [
        (e.id, e.gold_ids, e.answers, [c.text for c in e.chunks]) for e in got
    ]


@pytest.mark.parametrize(
    "spec", ["articles[colour=1]", "articles[seed=x]", "articles[articles=1]", "articles@3", "articles[sets=0]"]
)
def test_bad_options_are_clear_errors(spec: str) -> None:
    with pytest.raises(InputError):
        load_dataset(spec)
