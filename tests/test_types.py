"""Chunk, Example, Selection, LLMUsage, as_chunks, and the method records' shared reading (MethodDetails)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import ctxsel
from ctxsel.numbers import short_number
from ctxsel.tokens import count_tokens
from ctxsel.types import (
    Chunk,
    Example,
    LLMUsage,
    MethodDetails,
    Selection,
    TextChunks,
    as_chunks,
    check_unique_ids,
    meta_key,
)


class TestChunk:
    def test_token_count_filled_in_with_the_project_tokenizer(self) -> None:
        c = Chunk(id="a", text="The meteorite weighs three kilograms.")
        assert c.n_tokens == count_tokens("The meteorite weighs three kilograms.")
        assert c.n_tokens > 0

    def test_explicit_token_count_is_kept_even_zero(self) -> None:
        assert Chunk(id="a", text="many many words here", n_tokens=7).n_tokens == 7
        assert Chunk(id="a", text="many many words here", n_tokens=0).n_tokens == 0

    def test_empty_text_has_zero_tokens(self) -> None:
        assert Chunk(id="a", text="").n_tokens == 0

    def test_defaults(self) -> None:
        c = Chunk(id="x", text="t")
        assert (c.doc_id, c.position, c.meta) == ("doc", 0, {})

    @pytest.mark.parametrize("bad", ["", None, 3])
    def test_id_must_be_a_non_empty_string(self, bad: object) -> None:
        with pytest.raises(ValueError, match="non-empty string"):
            Chunk(id=bad, text="t")  # type: ignore[arg-type]

    def test_text_must_be_str(self) -> None:
        with pytest.raises(TypeError, match="text must be str"):
            Chunk(id="a", text=b"bytes")  # type: ignore[arg-type]

    def test_frozen(self) -> None:
        c = Chunk(id="a", text="t")
        with pytest.raises(AttributeError):
            c.text = "other"  # type: ignore[misc]

    def test_equality_and_hash_ignore_meta(self) -> None:
        a = Chunk(id="a", text="t", n_tokens=1, meta={"x": 1})
        b = Chunk(id="a", text="t", n_tokens=1, meta={"y": 2})
        assert a == b
        assert hash(a) == hash(b)
        assert len({a, b}) == 1

    def test_to_dict_drops_empty_meta(self) -> None:
        assert Chunk(id="a", text="t", doc_id="d", position=3, n_tokens=1).to_dict() == {
            "id": "a",
            "text": "t",
            "doc_id": "d",
            "position": 3,
            "n_tokens": 1,
        }
        assert Chunk(id="a", text="t", n_tokens=1, meta={"k": "v"}).to_dict()["meta"] == {"k": "v"}


class TestAsChunks:
    def test_strings_get_positional_ids(self) -> None:
        chunks = as_chunks(["alpha", "beta", "gamma"], doc_id="book")
        assert [c.id for c in chunks] == ["0", "1", "2"]
        assert [c.position for c in chunks] == [0, 1, 2]
        assert {c.doc_id for c in chunks} == {"book"}
        assert [c.text for c in chunks] == ["alpha", "beta", "gamma"]

    def test_chunks_pass_through_unchanged(self) -> None:
        c = Chunk(id="z", text="t", doc_id="d", position=9, n_tokens=4)
        assert as_chunks([c])[0] is c

    def test_mixed_strings_and_chunks(self) -> None:
        chunks = as_chunks([Chunk(id="z", text="t", n_tokens=1), "second"])
        assert [c.id for c in chunks] == ["z", "1"]

    def test_duplicate_ids_raise(self) -> None:
        with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
            as_chunks([Chunk(id="a", text="x", n_tokens=1), Chunk(id="a", text="y", n_tokens=1)])

    def test_string_id_colliding_with_chunk_id_raises(self) -> None:
        with pytest.raises(ValueError, match="duplicate chunk id '1'"):
            as_chunks([Chunk(id="1", text="x", n_tokens=1), "second gets id 1"])

    def test_duplicate_texts_are_fine(self) -> None:
        chunks = as_chunks(["same", "same", "same"])
        assert [c.id for c in chunks] == ["0", "1", "2"]

    def test_other_types_raise(self) -> None:
        with pytest.raises(
            TypeError, match=r"chunks\[1\] must be a text, a Chunk or an object with .id. and .text., got int"
        ):
            as_chunks(["ok", 5])  # type: ignore[list-item]

    @pytest.mark.parametrize(
        "items",
        [
            ["alpha beta", "gamma"],  # texts (their own fast path)
            [{"id": "x", "text": "alpha beta"}, {"id": "y", "text": "gamma", "doc_id": "d2", "meta": {"k": 1}}],
            ["alpha beta", Chunk(id="c", text="given", n_tokens=9)],
        ],
    )
    def test_built_chunks_equal_the_constructor_s(self, items: list[object]) -> None:
        """as_chunks builds Chunks without __post_init__: the result must be what the constructor makes."""
        built = as_chunks(items, doc_id="book")  # type: ignore[arg-type]
        for i, (c, item) in enumerate(zip(built, items, strict=True)):
            if isinstance(item, Chunk):
                assert c is item
                continue
            fields = {"id": str(i), "text": item} if isinstance(item, str) else dict(item)  # type: ignore[call-overload]
            expected = Chunk(**{"doc_id": "book", "position": i, **fields})
            assert (c.id, c.text, c.doc_id, c.position, c.n_tokens, c.meta) == (
                expected.id,
                expected.text,
                expected.doc_id,
                expected.position,
                expected.n_tokens,
                expected.meta,
            )
        assert built[0].n_tokens == 2
        metas = [c.meta for c in built]
        assert len({id(m) for m in metas}) == len(metas)  # each its own dict, as default_factory gives

    def test_every_shape_is_checked_before_any_text(self) -> None:
        """HTTP's order: chunk 1's wrong type is named before chunk 0's lone surrogate."""
        with pytest.raises(TypeError, match=r"chunks\[1\] must be a text"):
            as_chunks(["bad \ud800 text", 5])  # type: ignore[list-item]
        with pytest.raises(ValueError, match=r"chunk '0' contains a lone surrogate U\+D800"):
            as_chunks(["bad \ud800 text", "fine"])
        with pytest.raises(ValueError, match=r"chunk 'b' contains a lone surrogate"):
            as_chunks([{"id": "a", "text": "fine"}, {"id": "b", "text": "\udfff"}])

    def test_texts_come_back_as_lazy_chunks_equal_to_the_list(self) -> None:
        texts = ["alpha beta", "gamma", "delta epsilon zeta"]
        lazy = as_chunks(texts, doc_id="book")
        assert type(lazy) is TextChunks
        assert lazy.n_tokens == [count_tokens(t) for t in texts]
        eager = [Chunk(id=str(i), text=t, doc_id="book", position=i) for i, t in enumerate(texts)]
        assert lazy == eager and lazy != eager[:2] and lazy == as_chunks(texts, doc_id="book")
        assert [lazy[-1], lazy[1:]] == [eager[-1], eager[1:]]
        assert lazy[2] is lazy[-1] is lazy[2]  # built once, then the same object
        with pytest.raises(IndexError):
            lazy[3]
        assert as_chunks(lazy) is lazy  # checked already: passed through
        texts.append("added later")
        assert len(lazy) == 3  # a copy of the caller's list
        assert repr(lazy).startswith("TextChunks([Chunk(id='0', text='alpha beta'")

    def test_a_ranking_builds_only_the_chunks_it_keeps(self) -> None:
        lazy = as_chunks([f"text {i}" for i in range(50)])
        assert isinstance(lazy, TextChunks)
        sel = ctxsel.select("q", lazy, method="top-k@3", scores=[float(i) for i in range(50)])
        assert sel.ids == ["49", "48", "47"] and sel.chunks == [lazy[49], lazy[48], lazy[47]]
        assert sum(c is not None for c in lazy._built) == 3

    def test_an_iterable_is_read_once(self) -> None:
        assert [c.text for c in as_chunks(t for t in ["a", "b"])] == ["a", "b"]

    def test_check_unique_ids_accepts_unique(self) -> None:
        check_unique_ids([Chunk(id=str(i), text="x", n_tokens=1) for i in range(5)])


def _selection() -> Selection:
    c1 = Chunk(id="b", text="second para", doc_id="d", position=1, n_tokens=3)
    c2 = Chunk(id="a", text="first para", doc_id="d", position=0, n_tokens=2)
    c3 = Chunk(id="z", text="other doc", doc_id="c", position=5, n_tokens=4)
    return Selection(
        ids=["b", "a", "z"],
        scores=[0.9, 0.5, None],
        chunks=[c1, c2, c3],
        method="top-k",
        config={"k": 3},
        explanation="why",
        n_candidates=10,
    )


class TestSelection:
    def test_k_and_tokens(self) -> None:
        s = _selection()
        assert s.k == 3
        assert s.n_tokens == 9

    def test_reading_order_sorts_by_doc_then_position(self) -> None:
        s = _selection()
        assert s.reading_order == ["z", "a", "b"]
        assert s.text() == "other doc\n\nfirst para\n\nsecond para"
        assert s.text(" | ") == "other doc | first para | second para"

    def test_to_dict_is_json_and_ranked(self) -> None:
        d = _selection().to_dict()
        json.dumps(d)  # serialisable
        assert d["method"] == "top-k"
        assert (d["k"], d["n_tokens"], d["n_candidates"]) == (3, 9, 10)
        assert d["ids"] == ["b", "a", "z"]
        assert d["reading_order"] == ["z", "a", "b"]
        assert [(c["id"], c["rank"], c["score"], c["n_tokens"]) for c in d["chunks"]] == [
            ("b", 1, 0.9, 3),
            ("a", 2, 0.5, 2),
            ("z", 3, None, 4),
        ]
        assert d["chunks"][0]["text"] == "second para"
        assert d["usage"] == {"calls": 0, "tokens_in": 0, "tokens_out": 0, "tokens_reused": 0}

    def test_to_dict_without_text(self) -> None:
        d = _selection().to_dict(with_text=False)
        assert all("text" not in c for c in d["chunks"])

    def test_empty_selection(self) -> None:
        s = Selection(ids=[], scores=[], chunks=[], method="m", config={}, explanation="", n_candidates=0)
        assert (s.k, s.n_tokens, s.reading_order, s.text()) == (0, 0, [], "")


def test_llm_usage_adds() -> None:
    assert LLMUsage(1, 10, 2) + LLMUsage(2, 5, 3) == LLMUsage(3, 15, 5)


def test_example_defaults_are_independent() -> None:
    a = Example(id="a", question="q", chunks=[])
    b = Example(id="b", question="q", chunks=[])
    a.gold_ids.append("x")
    assert b.gold_ids == [] and b.answers == [] and b.choices == [] and b.meta == {}


@dataclasses.dataclass(frozen=True, slots=True)
class _Record(MethodDetails):
    """A method's record as a plugin would write one."""

    plain: int
    renamed: float | None = dataclasses.field(default=None, metadata=meta_key("Renamed"))
    kept_none: str | None = dataclasses.field(default=None, metadata=meta_key(omit_none=False))
    note: str = dataclasses.field(default="", metadata=meta_key(in_row=True))


def test_a_record_writes_its_meta_keys_and_its_row_fields() -> None:
    bare = _Record(3)
    assert bare.to_meta() == {"plain": 3, "kept_none": None, "note": ""}  # a None under meta_key() is left out
    assert bare.row_fields() == {} and bare.kept_band() is None  # an empty row field is not written
    full = _Record(3, 0.5, "x", "why")
    assert full.to_meta() == {"plain": 3, "Renamed": 0.5, "kept_none": "x", "note": "why"}
    assert full.row_fields() == {"note": "why"}
    sel = _selection()
    sel.details = full
    assert sel.to_dict()["meta"] == {"plain": 3, "Renamed": 0.5, "kept_none": "x", "note": "why"}


def test_the_built_in_records_keep_their_json_and_rows() -> None:
    """Each method's record lives beside its method; the JSON and the eval rows read them generically."""
    from ctxsel.selectors.adaptive_k import AdaptiveKGap
    from ctxsel.selectors.context_picker.picker import PickerDetails
    from ctxsel.selectors.ldar.band import LDARBand
    from ctxsel.selectors.sage.selector import SageDetails
    from ctxsel.selectors.self_route import SelfRouteDetails

    picked = PickerDetails("2 and 5 hold both hops", True, False, 1, ["e"], ["r1", "r2"], 1, 0.25)
    unpicked = PickerDetails(None, False, True, 2, ["e1", "e2"], ["r1", "r2"], 0, 0.5)
    assert picked.row_fields() == {"rationale": "2 and 5 hold both hops"}
    assert unpicked.row_fields() == {} and unpicked.to_meta()["rationale"] is None
    assert list(picked.to_meta()) == [
        "rationale",
        "valid",
        "fallback",
        "invalid_replies",
        "errors",
        "replies",
        "constrained_replies",
        "seconds",
    ]
    band = LDARBand(10, l=3, u=8, q_l=0.3, q_d=0.5, q_u=0.8)
    assert band.kept_band() == (3, 8) and LDARBand(10, l=1, u=2).kept_band() == (9, 10)
    assert LDARBand(10, n_picked=4).kept_band() is None and band.row_fields() == {}
    assert band.to_meta() == {
        "n_ranked": 10,
        "reward": None,
        "variant": None,
        "sample": False,
        "l": 3,
        "u": 8,
        "q_L": 0.3,
        "q_D": 0.5,
        "q_U": 0.8,
    }
    assert AdaptiveKGap(2, 0.5, "largest_gap").to_meta() == {"cut_index": 2, "gap": 0.5, "strategy": "largest_gap"}
    assert SageDetails(3, 1, 2).to_meta() == {"verdicts": 3, "unreadable_verdicts": 1, "constrained_replies": 2}
    assert SelfRouteDetails().to_meta() == {} and SelfRouteDetails("bad").to_meta() == {"route_reply_unreadable": "bad"}


@pytest.mark.parametrize(
    ("x", "shown"),
    [
        (0.0833, "0.083"),
        (0.0, "0.000"),
        (12345.6789, "12345.679"),
        (1e308, "1e+308"),
        (-1e308, "-1e+308"),
        (2.5e-7, "2.5e-07"),
        (float("inf"), "inf"),
        (float("nan"), "nan"),
    ],
)
def test_short_number_never_prints_hundreds_of_digits(x: float, shown: str) -> None:
    assert short_number(x) == shown


def test_an_explanation_of_extreme_scores_is_compact() -> None:
    """Issue 45: scores [1e308, -1e308, 0] printed a 309-digit gap."""
    sel = ctxsel.select("q?", ["a", "b", "c"], "adaptive-k", scores=[1e308, -1e308, 0.0])
    assert sel.explanation == "largest gap 1e+308 between ranks 1 and 2; kept 1 + buffer 1 = 2 of 3"
    assert ctxsel.select("q?", ["a", "b", "c"], "adaptive-k", scores=[0.9, 0.1, 0.05]).explanation.startswith(
        "largest gap 0.800 between ranks 1 and 2"
    )
