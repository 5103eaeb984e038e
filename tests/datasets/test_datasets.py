"""Datasets: hotpotqa-long (from the shared file), generic JSONL, HELMET layout."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from ctxsel.datasets import BUNDLED, load_dataset
from ctxsel.datasets.hotpotqa import FILENAME, bundled_hotpotqa_file, find_hotpotqa_file, load_hotpotqa_long
from ctxsel.datasets.jsonl import load_jsonl

#: the bundled copy (gzip); the test below checks it is the HotpotQA file, byte for byte
HOTPOT = bundled_hotpotqa_file()
HOTPOT_SHA256 = "32ed3ffab548f1d57ba65365bd581d17b428980fa7be881ab0c45f79d9fe6827"


@pytest.fixture(scope="module")
def hotpot():
    return load_hotpotqa_long(), json.loads(gzip.decompress(HOTPOT.read_bytes()))


class TestHotpotQALong:
    def test_the_bundled_file_is_the_published_one(self) -> None:
        assert hashlib.sha256(gzip.decompress(HOTPOT.read_bytes())).hexdigest() == HOTPOT_SHA256
        assert (HOTPOT.parent / "README.md").read_text(encoding="utf-8").count("CC BY-SA 4.0") == 1

    def test_sizes(self, hotpot) -> None:
        examples, raw = hotpot
        assert len(raw) == 100
        assert len(examples) == 100
        assert all(len(ex.chunks) == 991 for ex in examples)
        assert [ex.id for ex in examples] == [f"hotpotqa-{i:03d}" for i in range(100)]

    def test_one_shared_pool(self, hotpot) -> None:
        examples, _ = hotpot
        pool = examples[0].chunks
        assert all(ex.chunks is pool or ex.chunks == pool for ex in examples)
        assert len({c.id for c in pool}) == 991
        assert [c.position for c in pool] == list(range(991))
        assert {c.doc_id for c in pool} == {"hotpotqa-pool"}

    def test_gold(self, hotpot) -> None:
        examples, raw = hotpot
        ids = {c.id for c in examples[0].chunks}
        for ex, item in zip(examples, raw):
            assert len(ex.gold_ids) == 2
            assert len(set(ex.gold_ids)) == 2
            assert set(ex.gold_ids) <= ids
            assert set(ex.gold_ids) == set(item["supporting_facts"]["title"])
            assert set(ex.gold_ids) <= set(item["context"]["title"])  # in its own context
            assert ex.answers == [item["answer"]]
            assert ex.question == item["question"]

    def test_pool_order_and_text_rebuilt_independently(self, hotpot) -> None:
        examples, raw = hotpot
        texts: dict[str, str] = {}
        for item in raw:
            for title, sents in zip(item["context"]["title"], item["context"]["sentences"]):
                texts[title] = f"{title}: {''.join(sents)}"
        order = sorted(texts)
        random.Random(0).shuffle(order)
        pool = examples[0].chunks
        assert [c.id for c in pool] == order
        assert [c.text for c in pool] == [texts[t] for t in order]
        assert order != sorted(texts)  # really shuffled

    def test_about_139k_tokens(self, hotpot) -> None:
        examples, _ = hotpot
        total = sum(c.n_tokens for c in examples[0].chunks)
        assert 120_000 < total < 160_000

    def test_limit_and_name(self) -> None:
        examples = load_dataset("hotpotqa-long", limit=3)
        assert [e.id for e in examples] == ["hotpotqa-000", "hotpotqa-001", "hotpotqa-002"]
        assert len(examples[0].chunks) == 991

    def test_a_path_or_the_env_overrides_the_bundled_copy(
        self, hotpot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("CTXSEL_HOTPOTQA", raising=False)
        assert find_hotpotqa_file() == HOTPOT
        _, raw = hotpot
        plain = tmp_path / FILENAME
        plain.write_text(json.dumps(raw[:3]), encoding="utf-8")  # plain JSON, a 3-question override
        assert find_hotpotqa_file(tmp_path) == plain
        assert len(load_hotpotqa_long(tmp_path)) == 3
        monkeypatch.setenv("CTXSEL_HOTPOTQA", str(plain))
        assert find_hotpotqa_file() == plain
        assert len(load_dataset("hotpotqa-long")) == 3
        monkeypatch.setenv("CTXSEL_HOTPOTQA", str(tmp_path / "missing.json"))
        with pytest.raises(FileNotFoundError, match="missing.json"):
            load_dataset("hotpotqa-long")


def test_hotpotqa_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="HotpotQA file not found"):
        load_hotpotqa_long(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hostname\n", r":1: not valid JSON \(Expecting value\)"),
        ('[{"question": "q"}]', "expected a JSON list of HotpotQA"),
    ],
)
def test_hotpotqa_file_of_another_shape(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / FILENAME
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):  # was a JSONDecodeError or KeyError: "this is a bug"
        load_hotpotqa_long(p)


def test_hotpotqa_conflicting_paragraphs(tmp_path: Path) -> None:
    item = {
        "question": "q",
        "answer": "a",
        "supporting_facts": {"title": ["T"], "sent_id": [0]},
        "context": {"title": ["T"], "sentences": [["One."]]},
    }
    other = json.loads(json.dumps(item))
    other["context"]["sentences"] = [["Two."]]
    p = tmp_path / FILENAME
    p.write_text(json.dumps([item, other]), encoding="utf-8")
    with pytest.raises(ValueError, match="paragraph title 'T' appears with two different texts"):
        load_hotpotqa_long(p)


def test_hotpotqa_tiny_file(tmp_path: Path) -> None:
    items = [
        {
            "question": "Q1?",
            "answer": "A1",
            "type": "bridge",
            "level": "hard",
            "supporting_facts": {"title": ["B", "A", "B"], "sent_id": [0, 1, 1]},
            "context": {"title": ["A", "B"], "sentences": [["A one.", " A two."], ["B one."]]},
        },
        {
            "question": "Q2?",
            "answer": "A2",
            "type": "comparison",
            "level": "hard",
            "supporting_facts": {"title": ["C"], "sent_id": [0]},
            "context": {"title": ["C", "A"], "sentences": [["C one."], ["A one.", " A two."]]},
        },
    ]
    p = tmp_path / FILENAME
    p.write_text(json.dumps(items), encoding="utf-8")
    examples = load_hotpotqa_long(p)
    order = ["A", "B", "C"]
    random.Random(0).shuffle(order)
    assert [c.id for c in examples[0].chunks] == order
    by_id = {c.id: c for c in examples[0].chunks}
    assert by_id["A"].text == "A: A one. A two."
    assert by_id["A"].meta["sentences"] == ["A one.", " A two."]
    assert examples[0].gold_ids == ["B", "A"]  # distinct, in order of first mention
    assert examples[1].gold_ids == ["C"]
    assert examples[0].meta == {"type": "bridge", "level": "hard"}


def write_jsonl(path: Path, rows: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class TestGenericJSONL:
    def test_chunks_form(self, tmp_path: Path) -> None:
        p = write_jsonl(
            tmp_path / "d.jsonl",
            [
                {
                    "id": "q1",
                    "question": "Who?",
                    "chunks": [{"id": "c1", "text": "Alpha."}, {"id": "c2", "text": "Beta."}],
                    "gold_ids": ["c2"],
                    "answers": ["Beta"],
                    "options": ["A", "B"],
                    "meta": {"src": "x"},
                },
                {"id": "q2", "question": "What?", "chunks": ["plain string", "another"], "answer": "one"},
            ],
        )
        ex1, ex2 = load_jsonl(p)
        assert [(c.id, c.text, c.doc_id, c.position) for c in ex1.chunks] == [
            ("c1", "Alpha.", "q1", 0),
            ("c2", "Beta.", "q1", 1),
        ]
        assert (ex1.gold_ids, ex1.answers, ex1.choices, ex1.meta) == (["c2"], ["Beta"], ["A", "B"], {"src": "x"})
        assert [c.id for c in ex2.chunks] == ["0", "1"]
        assert ex2.answers == ["one"]
        assert ex2.gold_ids == []

    def test_document_form_paragraphs(self, tmp_path: Path) -> None:
        p = write_jsonl(
            tmp_path / "d.jsonl",
            [
                {"id": "q1", "question": "?", "document": "Para one.\n\nPara two. Still two.", "gold_ids": ["q1#1"]},
                {"id": "q2", "question": "?", "document": "One.\n\nTwo.", "doc_id": "book", "gold_ids": ["book#0"]},
            ],
        )
        ex1, ex2 = load_jsonl(p)
        assert [c.id for c in ex1.chunks] == ["q1#0", "q1#1"]
        assert ex1.chunks[1].text == "Para two. Still two."
        assert [c.id for c in ex2.chunks] == ["book#0", "book#1"]

    def test_document_form_sentences(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": "q", "question": "?", "document": "One. Two. Three."}])
        (ex,) = load_jsonl(p, chunking="sentences")
        assert [c.text for c in ex.chunks] == ["One.", "Two.", "Three."]

    def test_nested_answers_flattened(self, tmp_path: Path) -> None:
        p = write_jsonl(
            tmp_path / "d.jsonl", [{"id": "q", "question": "?", "chunks": ["x"], "answers": [["a", "b"], "c", 3]}]
        )
        assert load_jsonl(p)[0].answers == ["a", "b", "c", "3"]

    def test_blank_lines_and_limit(self, tmp_path: Path) -> None:
        rows = [{"id": f"q{i}", "question": "?", "chunks": ["x"]} for i in range(5)]
        p = tmp_path / "d.jsonl"
        p.write_text("\n".join(json.dumps(r) for r in rows).replace("\n", "\n\n  \n") + "\n", encoding="utf-8")
        assert [e.id for e in load_jsonl(p)] == ["q0", "q1", "q2", "q3", "q4"]
        assert [e.id for e in load_jsonl(p, limit=2)] == ["q0", "q1"]

    def test_missing_id_uses_location(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "d.jsonl", [{"question": "?", "chunks": ["x"]}])
        assert load_jsonl(p)[0].id == "d.jsonl:1"

    def test_bundled_example(self) -> None:
        examples = load_dataset("example")
        assert len(examples) == 6
        for ex in examples:
            ids = {c.id for c in ex.chunks}
            assert ex.gold_ids and set(ex.gold_ids) <= ids
        assert (BUNDLED / "example.jsonl").is_file()

    def test_bundled_example_is_the_handbook_and_its_gold_chunks_hold_the_answers(self) -> None:
        """example.jsonl carries example.md as its document (regenerate both together) and gold ids by
        its chunking, headings attached: 28 chunks, none a heading alone."""
        examples = load_dataset("example")
        handbook = (BUNDLED / "example.md").read_text(encoding="utf-8")
        raw = [json.loads(line) for line in (BUNDLED / "example.jsonl").read_text(encoding="utf-8").splitlines()]
        assert {r["document"] for r in raw} == {handbook}
        for ex in examples:
            text = {c.id: c.text for c in ex.chunks}
            assert len(text) == 28
            assert not [c.id for c in ex.chunks if c.text.startswith("#") and "\n" not in c.text]  # no heading alone
            assert all(any(a in text[g] for g in ex.gold_ids) for a in ex.answers), ex.id
        assert {ex.id: ex.gold_ids for ex in examples} == {
            "q1": ["handbook#4"],
            "q2": ["handbook#8"],
            "q3": ["handbook#15"],
            "q4": ["handbook#12"],
            "q5": ["handbook#18", "handbook#8"],
            "q6": ["handbook#0"],
        }

    def test_load_dataset_path(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": "q", "question": "?", "document": "One. Two.\n\nThree."}])
        assert [c.text for c in load_dataset(p)[0].chunks] == ["One. Two.", "Three."]
        assert [c.text for c in load_dataset(str(p), chunking="sentences")[0].chunks] == ["One.", "Two.", "Three."]

    def test_unknown_dataset(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="neither a known name"):
            load_dataset(tmp_path / "missing.jsonl")


class TestJSONLErrors:
    def test_non_utf8(self, tmp_path: Path) -> None:
        p = tmp_path / "bad.jsonl"
        p.write_bytes(
            json.dumps({"id": "ok", "question": "?", "chunks": ["x"]}).encode()
            + b"\n"
            + b'{"id": "q", "question": "caf\xe9", "chunks": ["x"]}\n'
        )
        with pytest.raises(
            ValueError, match=r"bad\.jsonl:2: not valid UTF-8 \(byte 0xE9 at offset 28: invalid continuation byte\)"
        ):
            load_jsonl(p)

    def test_invalid_json_line(self, tmp_path: Path) -> None:
        p = tmp_path / "bad.jsonl"
        p.write_text('{"id": "a", "question": "?", "chunks": ["x"]}\n\n{"id": "b", "question": \n', encoding="utf-8")
        with pytest.raises(ValueError, match=r"bad\.jsonl:3: not valid JSON"):
            load_jsonl(p)

    def test_not_an_object(self, tmp_path: Path) -> None:
        p = tmp_path / "bad.jsonl"
        p.write_text("[1, 2]\n", encoding="utf-8")
        with pytest.raises(ValueError, match="bad.jsonl:1: expected a JSON object, got list"):
            load_jsonl(p)

    def test_gold_id_not_among_chunks(self, tmp_path: Path) -> None:
        p = write_jsonl(
            tmp_path / "bad.jsonl",
            [{"id": "q", "question": "?", "chunks": [{"id": "c1", "text": "x"}], "gold_ids": ["c1", "c9"]}],
        )
        with pytest.raises(ValueError, match=r"bad\.jsonl:1: gold ids not among the chunks: \['c9'\]"):
            load_jsonl(p)

    def test_missing_question(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "bad.jsonl", [{"id": "q", "chunks": ["x"]}])
        with pytest.raises(ValueError, match="bad.jsonl:1: missing 'question'"):
            load_jsonl(p)

    def test_no_context(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "bad.jsonl", [{"id": "q", "question": "?"}])
        with pytest.raises(ValueError, match="needs 'chunks' or 'document'"):
            load_jsonl(p)

    @pytest.mark.parametrize(
        ("line", "message"),
        [
            ({"question": 5, "document": "abc"}, "'question' must be a string, got int"),
            ({"question": "?", "chunks": 5}, "'chunks' must be a list, got int"),
            ({"question": "?", "chunks": [5]}, "chunk 0 must be a text or an object with 'text', got int"),
            ({"question": "?", "chunks": [{"text": 5}]}, "chunks[0].text must be a string, got int"),
            ({"question": "?", "document": 7}, "'document' must be a string, got int"),
            ({"question": "?", "document": "abc", "gold_ids": "0"}, "'gold_ids' must be a list, got str"),
            ({"question": "?", "ctxs": "abc"}, "'ctxs' must be a list, got str"),
            (
                {"question": "?", "chunks": [{"text": "a", "position": "x"}]},
                "chunks[0].position must be an integer, got 'x': pass a number, not text",
            ),
            ({"question": "?", "document": "abc", "answers": 5}, "a field has the wrong type"),
        ],
    )
    def test_fields_of_the_wrong_type_name_their_line(self, tmp_path: Path, line: dict, message: str) -> None:
        p = write_jsonl(tmp_path / "bad.jsonl", [line])
        with pytest.raises(ValueError, match=re.escape(f"bad.jsonl:1: {message}")):  # several were "this is a bug"
            load_jsonl(p)

    def test_chunk_without_text(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "bad.jsonl", [{"id": "q", "question": "?", "chunks": [{"id": "c"}]}])
        with pytest.raises(ValueError, match=r"chunks\[0\] has no 'text'"):
            load_jsonl(p)

    def test_duplicate_chunk_ids(self, tmp_path: Path) -> None:
        p = write_jsonl(
            tmp_path / "bad.jsonl",
            [{"id": "q", "question": "?", "chunks": [{"id": "c", "text": "x"}, {"id": "c", "text": "y"}]}],
        )
        with pytest.raises(ValueError, match="duplicate chunk id 'c'"):
            load_jsonl(p)

    def test_duplicate_example_ids(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "bad.jsonl", [{"id": "q", "question": "?", "chunks": ["x"]}] * 2)
        with pytest.raises(ValueError, match="example ids must be unique"):
            load_jsonl(p)


HELMET_ROWS = [
    {
        "id": "h1",
        "question": "Who wrote Hamlet?",
        "answers": ["Shakespeare", "William Shakespeare"],
        "ctxs": [
            {"id": "p10", "title": "Hamlet", "text": "Hamlet is a tragedy by Shakespeare.", "has_answer": True},
            {"id": "p11", "title": "Denmark", "text": "Denmark is a country.", "has_answer": False},
            {"id": "p12", "title": "", "text": "Untitled passage.", "has_answer": False},
            {"id": "p13", "title": "Globe", "text": "The Globe staged Shakespeare.", "has_answer": True},
        ],
    },
    {
        "question": "Capital of France?",
        "answers": [["Paris"]],
        "ctxs": [{"title": "France", "text": "Paris is the capital."}, {"title": "Spain", "text": "Madrid."}],
        "positive_ctxs": [{"id": "1", "title": "Spain"}, {"id": "999"}],
    },
]


class TestHELMET:
    def test_layout(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "helmet.jsonl", HELMET_ROWS)
        h1, h2 = load_jsonl(p)
        assert h1.id == "h1"
        assert [c.id for c in h1.chunks] == ["p10", "p11", "p12", "p13"]
        assert h1.chunks[0].text == "Hamlet: Hamlet is a tragedy by Shakespeare."
        assert h1.chunks[2].text == "Untitled passage."  # no title, no prefix
        assert [c.position for c in h1.chunks] == [0, 1, 2, 3]
        assert h1.gold_ids == ["p10", "p13"]
        assert h1.answers == ["Shakespeare", "William Shakespeare"]
        # no ids: positions; positives are listed by id (an unknown positive is ignored)
        assert h2.id == "helmet.jsonl:2"
        assert [c.id for c in h2.chunks] == ["0", "1"]
        assert h2.gold_ids == ["1"]
        assert h2.answers == ["Paris"]

    def test_explicit_gold_ids_added(self, tmp_path: Path) -> None:
        row = dict(HELMET_ROWS[0], gold_ids=["p11", "p10"])
        (ex,) = load_jsonl(write_jsonl(tmp_path / "h.jsonl", [row]))
        assert ex.gold_ids == ["p10", "p13", "p11"]

    def test_mixed_with_generic(self, tmp_path: Path) -> None:
        p = write_jsonl(tmp_path / "mix.jsonl", [HELMET_ROWS[0], {"id": "g", "question": "?", "chunks": ["x"]}])
        assert [e.id for e in load_jsonl(p)] == ["h1", "g"]

    def test_duplicate_ctx_ids(self, tmp_path: Path) -> None:
        row = {"id": "h", "question": "?", "ctxs": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}
        with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
            load_jsonl(write_jsonl(tmp_path / "h.jsonl", [row]))

    def test_gold_id_not_among_ctxs(self, tmp_path: Path) -> None:
        row = {"id": "h", "question": "?", "ctxs": [{"id": "a", "text": "x"}], "gold_ids": ["zzz"]}
        with pytest.raises(ValueError, match="gold ids not among the chunks"):
            load_jsonl(write_jsonl(tmp_path / "h.jsonl", [row]))

    @pytest.mark.parametrize(
        "row",
        [
            {"id": "h", "ctxs": [{"id": "a", "text": "x"}]},
            {"id": "h", "question": "?", "ctxs": [{"id": "a"}]},
        ],
        ids=["no-question", "ctx-without-text"],
    )
    def test_malformed_line_is_a_value_error(self, tmp_path: Path, row: dict) -> None:
        with pytest.raises(ValueError, match=r"h\.jsonl:1"):
            load_jsonl(write_jsonl(tmp_path / "h.jsonl", [row]))


def test_the_bundled_example_is_named_from_any_folder(tmp_path, monkeypatch, capsys) -> None:
    import json

    import pytest

    from ctxsel.cli.main import main
    from ctxsel.datasets import example_path
    from ctxsel.errors import InputError

    monkeypatch.chdir(tmp_path)  # nowhere near the checkout
    assert example_path("handbook").read_text(encoding="utf-8").startswith("# Harbour Town Observatory")
    question = "How heavy is the meteorite in the museum?"
    assert main(["select", "--document", "example:handbook", "--question", question, "--scorer", "bm25", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_candidates"] == 28
    with pytest.raises(InputError, match="no bundled example 'atlas'; choose handbook"):
        example_path("atlas")
    assert main(["select", "--document", "example:atlas", "--question", question]) == 2
    assert capsys.readouterr().err.strip() == "ctxsel select: error: no bundled example 'atlas'; choose handbook"
