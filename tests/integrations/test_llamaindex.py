"""The LlamaIndex postprocessor against the real llama-index-core package,
offline: MockEmbedding and MockLLM come with llama-index-core itself."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from ctxsel.integrations._core import META_KEYS
from ctxsel.integrations.llamaindex import CtxselPostprocessor
from tests.support.museum import QUERY, TEXTS


def nodes(scores: list[float | None] | None = None) -> list[NodeWithScore]:
    scores = scores or [None] * len(TEXTS)
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"page": i}), score=s)
        for i, (t, s) in enumerate(zip(TEXTS, scores))
    ]


def test_nodes_with_score_none_and_bundle_without_embedding() -> None:
    pp = CtxselPostprocessor(method="top-k@2", scorer="keywords")
    assert isinstance(pp, BaseNodePostprocessor)
    inputs = nodes()
    bundle = QueryBundle(QUERY)
    assert bundle.embedding is None
    out = pp.postprocess_nodes(inputs, bundle)
    assert [n.node.node_id for n in out] == ["n1", "n3"]
    assert all(n.score is not None and n.score > 0 for n in out)
    md = out[0].node.metadata
    assert md["page"] == 1 and set(META_KEYS) <= set(md)
    assert md["ctxsel_explanation"] == "fixed top-2: kept 2 of 5"
    assert md["ctxsel_score"] == out[0].score
    # the ctxsel keys never reach the LLM or the embedder, and inputs are untouched
    assert "ctxsel" not in out[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "ctxsel" not in out[0].node.get_content(metadata_mode=MetadataMode.EMBED)
    assert "page" in out[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert all(set(n.node.metadata) == {"page"} and n.score is None for n in inputs)
    # query_str works too, and no query at all is a clear error
    assert [n.node.node_id for n in pp.postprocess_nodes(nodes(), query_str=QUERY)] == ["n1", "n3"]
    with pytest.raises(ValueError, match="needs the query"):
        pp.postprocess_nodes(nodes())


def test_node_scores_used_only_when_all_present() -> None:
    pp = CtxselPostprocessor(method="top-k@1", scorer="keywords", use_node_scores=True)
    out = pp.postprocess_nodes(nodes([0.1, 0.2, 0.9, 0.3, 0.05]), query_str=QUERY)
    assert [n.node.node_id for n in out] == ["n2"] and out[0].score == pytest.approx(0.9)
    assert out[0].node.metadata["ctxsel_scores_from"] == "input"
    with pytest.raises(ValueError, match=r"documents\[2\].score is missing: give every document a finite"):
        pp.postprocess_nodes(nodes([0.1, 0.2, None, 0.3, 0.05]), query_str=QUERY)
    pp = CtxselPostprocessor(method="top-k@1", scorer="keywords", use_node_scores=True, missing_scores="rescore")
    with pytest.warns(UserWarning, match=r"documents\[2\].score is missing"):
        out = pp.postprocess_nodes(nodes([0.1, 0.2, None, 0.3, 0.05]), query_str=QUERY)
    assert [n.node.node_id for n in out] == ["n1"]
    assert out[0].node.metadata["ctxsel_scores_from"] == "scorer:keywords"
    assert "ctxsel_note" in out[0].node.excluded_llm_metadata_keys


def test_default_adaptive_k_never_empty() -> None:
    out = CtxselPostprocessor(scorer="keywords").postprocess_nodes(nodes(), query_str=QUERY)
    assert out and out[0].node.metadata["ctxsel_method"] == "adaptive-k"
    pp = CtxselPostprocessor(scorer="keywords", selector_options={"max_tokens": 1})
    out = pp.postprocess_nodes(nodes(), query_str=QUERY)
    assert pp.last_report is not None
    assert [n.node.node_id for n in out] == ["n1"] and pp.last_report["allow_empty_fallback"]
    pp = CtxselPostprocessor(scorer="keywords", selector_options={"max_tokens": 1}, allow_empty=True)
    assert pp.postprocess_nodes(nodes(), query_str=QUERY) == []
    assert CtxselPostprocessor(scorer="keywords").postprocess_nodes([], query_str=QUERY) == []


def test_in_query_engine_with_mock_llm_and_embedding() -> None:
    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=MockEmbedding(embed_dim=8))
    pp = CtxselPostprocessor(method="top-k@2", scorer="keywords")
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=5, node_postprocessors=[pp])
    response = engine.query(QUERY)
    # MockLLM echoes its prompt: exactly the two selected passages are in it, no ctxsel metadata
    assert sorted(n.node.get_content() for n in response.source_nodes) == sorted([TEXTS[1], TEXTS[3]])
    prompt = str(response)
    assert TEXTS[1] in prompt and TEXTS[3] in prompt
    assert TEXTS[0] not in prompt and TEXTS[2] not in prompt and TEXTS[4] not in prompt
    assert "ctxsel" not in prompt
    assert pp.last_report is not None
    assert pp.last_report["n_candidates"] == 5 and pp.last_report["k"] == 2


async def _apost(pp: CtxselPostprocessor) -> list[NodeWithScore]:
    return await pp.apostprocess_nodes(nodes(), query_str=QUERY)


def test_async_path() -> None:
    import asyncio

    out = asyncio.run(_apost(CtxselPostprocessor(method="top-k@1", scorer="keywords")))
    assert [n.node.node_id for n in out] == ["n1"]
