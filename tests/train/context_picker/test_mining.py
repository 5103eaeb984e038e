"""Evidence mining (Algorithm 1): BM25 on q + a, drop wrong, leave-one-out to a
greedily minimal sufficient set; resumable JSONL; comparison with gold chunks.

The generator is a rule-based in-process LLM client (a fake at the LLM
boundary): it answers correctly only when both hops are in its prompt."""

from __future__ import annotations

import json

import pytest

from ctxsel.llm.base import Completion
from ctxsel.reader import Reader
from ctxsel.train.context_picker.mining import (
    bm25_candidates,
    compare_with_supporting_facts,
    comparison_markdown,
    mine,
    mine_example,
    read_mined,
)
from ctxsel.types import Chunk, Example, LLMUsage

TEXTS = {
    "hop1": "The Blue Tower stands in Glimmer, built of blue stone.",
    "hop2": "Glimmer is a city in Freedonia, on the river.",
    "cheese": "Freedonia exports cheese and Freedonia exports wine.",
    "paint": "The Blue Tower was painted in 1901; the Blue Tower is tall.",
    "boats": "Unrelated text about boats and harbours.",
    "birds": "Another paragraph, about birds.",
}
CHUNKS = [Chunk(k, v, position=i) for i, (k, v) in enumerate(TEXTS.items())]
QUESTION = "In which country is the city where the Blue Tower stands?"


class TwoHopLLM:
    """Answers 'Freedonia' iff both hops are in the prompt (or always, with parametric=True)."""

    model_id = "two-hop-fake"

    def __init__(self, parametric: bool = False, fail: bool = False) -> None:
        self.prompts: list[str] = []
        self.parametric, self.fail = parametric, fail

    def complete(self, prompt, *, max_tokens=256, temperature=0.0, stop=None, seed=None, **extra):
        if self.fail:
            raise AssertionError("the generator must not be called")
        self.prompts.append(prompt)
        both = TEXTS["hop1"] in prompt and TEXTS["hop2"] in prompt
        text = "Freedonia" if both or self.parametric else "Glimmer"
        return Completion(text, LLMUsage(1, len(prompt) // 4, 1))


def example(i: int = 0, answer: str = "Freedonia") -> Example:
    return Example(f"ex{i}", QUESTION, CHUNKS, gold_ids=["hop1", "hop2"], answers=[answer])


def test_bm25_on_question_plus_answer_finds_the_answer_paragraphs():
    cand = [c.id for c in bm25_candidates(example(), k=4)]
    assert len(cand) == 4 and {"hop1", "hop2", "cheese", "paint"} == set(cand)


def test_leave_one_out_keeps_exactly_the_two_hops_and_asks_each_subset_once():
    llm = TwoHopLLM()
    rec = mine_example(example(), Reader(llm), k=4)
    assert rec["kept"] is True
    assert sorted(rec["s_gold"]) == ["hop1", "hop2"]
    assert len(llm.prompts) == len(set(llm.prompts)) == rec["llm_calls"]
    assert rec["steps"][0]["try"] == "S_cand" and rec["steps"][0]["correct"] is True
    # minimal: removing either hop flips the answer
    assert not any(s["correct"] for s in rec["steps"] if s["try"] in ("without hop1", "without hop2"))


def test_a_wrong_answer_on_s_cand_drops_the_example_after_one_call():
    llm = TwoHopLLM()
    rec = mine_example(example(answer="Atlantis"), Reader(llm), k=4)
    assert rec["kept"] is False and rec["s_gold"] == [] and rec["llm_calls"] == 1


def test_the_last_chunk_is_never_removed():
    rec = mine_example(example(), Reader(TwoHopLLM(parametric=True)), k=4)
    best = bm25_candidates(example(), k=1)[0].id
    assert rec["s_gold"] == [best]  # weakest-first removal keeps the strongest BM25 match


def test_mine_writes_jsonl_and_resumes_without_calling_again(tmp_path):
    out = tmp_path / "mined.jsonl"
    recs = mine(
        [example(0), example(1, "Atlantis")],
        Reader(TwoHopLLM()),
        out,
        k=4,
        progress=False,
        settings={"generator": "two-hop-fake"},
    )
    assert [r["kept"] for r in recs] == [True, False]
    assert [r["id"] for r in read_mined(out)] == ["ex0", "ex1"]
    with out.open("a") as f:
        f.write('{"id": "torn')  # a kill mid-line
    again = mine(
        [example(0), example(1, "Atlantis")],
        Reader(TwoHopLLM(fail=True)),
        out,
        k=4,
        progress=False,
        settings={"generator": "two-hop-fake"},
    )
    assert [r["s_gold"] for r in again] == [r["s_gold"] for r in recs]
    with pytest.raises(ValueError, match="other settings"):
        mine([example(0)], Reader(TwoHopLLM()), out, k=3, progress=False, settings={"generator": "two-hop-fake"})


def test_augment_edits_records_before_they_are_written(tmp_path):
    out = tmp_path / "m.jsonl"
    mine([example(0)], Reader(TwoHopLLM()), out, k=4, progress=False, augment=lambda r: {**r, "rewrites": ["Q?"]})
    assert json.loads(out.read_text().splitlines()[0])["rewrites"] == ["Q?"]


def test_comparison_with_supporting_facts_on_literal_records():
    def rec(s_gold, kept=True, s_cand=("a", "b", "x")):
        return {"kept": kept, "s_gold": list(s_gold), "supporting": ["a", "b"], "s_cand": list(s_cand), "llm_calls": 3}

    cmp = compare_with_supporting_facts(
        [rec(["a", "b"]), rec(["a", "b", "x"]), rec(["a"]), rec(["x"]), rec([], kept=False, s_cand=("x", "y"))]
    )
    assert cmp["n_examples"] == 5 and cmp["n_kept"] == 4 and cmp["kept_share"] == 0.8
    assert cmp["equals_supporting"] == 0.25
    assert cmp["contains_supporting"] == 0.5
    assert cmp["contains_one_supporting"] == 0.75
    assert cmp["no_supporting"] == 0.25
    assert cmp["s_gold_inside_supporting"] == 0.5
    assert cmp["mean_s_gold_size"] == pytest.approx(7 / 4)
    assert cmp["s_cand_recall_all"] == pytest.approx(0.8) and cmp["s_cand_recall_kept"] == 1.0
    md = comparison_markdown(cmp)
    assert "| S_gold contains both supporting paragraphs | 50.0 % |" in md


def test_cli_mine_and_train_picker_say_what_is_missing(capsys):
    from ctxsel.cli.main import main

    assert main(["mine", "--dataset", "example", "--output", "x.jsonl"]) == 2
    assert "needs a generator: --reader local" in capsys.readouterr().err
    assert main(["train", "context-picker", "--dataset", "example", "--output", "out"]) == 2
    assert "needs either --mined FILE.jsonl" in capsys.readouterr().err
    # picker: the older name of the same command
    assert main(["train", "picker", "--dataset", "example", "--labels", "--mined", "m.jsonl", "--output", "o"]) == 2
    assert "needs either --mined FILE.jsonl (from `ctxsel mine`) or --labels" in capsys.readouterr().err


def test_labelled_records_take_s_gold_from_the_gold_chunks():
    from ctxsel.train.context_picker.mining import labelled_records
    from ctxsel.types import Chunk, Example

    chunks = [Chunk("a", "x"), Chunk("b", "y")]
    recs = labelled_records([Example("q1", "Who?", chunks, gold_ids=["b", "a"]), Example("q2", "What?", chunks)])
    assert [(r["id"], r["question"], r["s_gold"], r["kept"]) for r in recs] == [
        ("q1", "Who?", ["b", "a"], True),
        ("q2", "What?", [], False),
    ]


def test_the_picker_trains_only_on_the_datasets_training_split():
    """A kept question of the dataset's test split (the one `ctxsel eval --split test` holds out) is never
    trained on, though a split over the kept questions alone would put some of them in training."""
    from ctxsel.cli.train_context_picker_cmd import picker_split
    from ctxsel.datasets.splits import split_ids

    ids = [f"q{i:02d}" for i in range(50)]
    train, test = split_ids(ids)
    records = [{"id": i, "kept": i in test or i in train[:5]} for i in ids]
    split = picker_split(ids, records, 0.8, 0)
    assert split["test"] == test and split["dataset_test"] == test and split["train"] == train[:5]
    kept_only_train, _ = split_ids([r["id"] for r in records if r["kept"]])
    assert set(kept_only_train) & set(test), "the old split (over kept ids) would have trained on test questions"


def test_mine_takes_the_same_split_as_eval():
    import argparse

    from ctxsel.cli.common import load_examples
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples

    every = load_dataset("example")
    for part in ("train", "test"):
        args = argparse.Namespace(
            dataset="example", hotpotqa=None, split=part, train_fraction=0.5, split_seed=0, limit=None
        )
        got = [e.id for e in load_examples(args)]
        assert got == [e.id for e in split_examples(every, part, 0.5, 0)] and got
        args.limit = 1
        assert [e.id for e in load_examples(args)] == got[:1]
