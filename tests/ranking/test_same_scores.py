"""Which score ids a trained or calibrated rule treats as its own: one model's routes, not another model."""

from __future__ import annotations

from ctxsel.ranking.chain import find_same, same_scores

INT8 = "cascade:cascade(all-MiniLM-L6-v2|dense=1,bm25=0.25,fusion=minmax>nomic-v1.5|onnx-int8-v1-smooth-a0.75-f0836fbf)"
FP32 = "cascade:cascade(all-MiniLM-L6-v2|dense=1,bm25=0.25,fusion=minmax>nomic-v1.5|onnx-v1)"
LLAMA = "cascade:cascade(all-MiniLM-L6-v2|dense=1,bm25=0.25,fusion=minmax>nomic-v1.5|llama-f16)"


def test_a_gguf_embedders_routes_name_the_same_scores() -> None:
    want = "cascade:cascade(all-MiniLM-L6-v2|dense=1,bm25=0.25,fusion=minmax>nomic-v1.5)"
    assert {same_scores(i + "|head_tokens=5000") for i in (INT8, FP32, LLAMA)} == {want + "|head_tokens=5000"}
    assert same_scores("dense:all-MiniLM-L6-v2|onnx-int8-v1-per-text") == "dense:all-MiniLM-L6-v2"
    assert same_scores("dense:nomic-v1.5|llama-q8_0|dim=256") == "dense:nomic-v1.5|dim=256"


def test_find_same_matches_across_routes_but_not_across_models() -> None:
    by_id = {INT8: "cascade", "dense:all-MiniLM-L6-v2": "minilm", "bm25": "bm25"}
    assert find_same(by_id, FP32) == "cascade" and find_same(by_id, LLAMA) == "cascade"
    assert find_same(by_id, "dense:all-MiniLM-L6-v2|onnx-int8-v1-per-text") == "minilm"
    assert find_same(by_id, "dense:nomic-v1.5|onnx-v1") is None
    assert find_same(by_id, "dense:nomic-v1.5|onnx-v1|dim=256") is None
