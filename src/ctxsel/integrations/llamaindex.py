"""ctxsel as a LlamaIndex node postprocessor.

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    query_engine = index.as_query_engine(similarity_top_k=50, node_postprocessors=[CtxselPostprocessor()])

``CtxselPostprocessor`` is a ``BaseNodePostprocessor``:
``_postprocess_nodes(nodes, query_bundle)`` returns the kept nodes in rank
order. By default every node is scored with a ctxsel scorer from the query
text (``query_bundle.query_str``), so nodes whose ``score`` is None and
query bundles without an embedding need nothing special; with
``use_node_scores=True`` the retriever's scores are used when every node has
one (a node with score None makes it rescore all: partial scores are not
comparable with fresh ones).

Kept nodes are copies: ``score`` becomes the score ctxsel ranked by (unchanged
when the method uses none), and ``metadata`` gains the ``ctxsel_*`` keys
(score, rank, method, the reason for the cut...). Those keys are added to
``excluded_llm_metadata_keys`` and ``excluded_embed_metadata_keys`` so they
never reach the LLM prompt or an embedding. Input nodes are not modified.

Needs ``pip install 'ctxsel[llamaindex]'``.
"""

from __future__ import annotations

from typing import Any, Literal

from ctxsel.errors import InputError

try:
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
except ImportError as e:  # pragma: no cover - exercised by test_integrations_missing
    from ctxsel.integrations._core import missing_extra

    raise missing_extra("LlamaIndex", "llamaindex", e) from e

from ctxsel.integrations._core import (
    META_KEYS,
    NOTE_KEY,
    LazyParts,
    Outcome,
    check_documents,
    given_scores,
    select_positions,
)
from ctxsel.scoring.base import Scorer
from ctxsel.selectors.base import Selector

__all__ = ["CtxselPostprocessor"]


class CtxselPostprocessor(LazyParts, BaseNodePostprocessor):
    """Keep the nodes a ctxsel method selects for the query (adaptive-k by default).

    ``method`` is any ctxsel method spec or a Selector (``selector_options``
    go to it, ``llm`` to methods that call an LLM); ``scorer`` is a scorer name
    (None, the default: ``cascade``; ``"dense"``, ``"bm25"``, ``"keywords"``) or a Scorer object;
    ``allow_empty=False`` (default) keeps at least the best-ranked node of a
    non-empty input; ``stages`` run after the cut, in order (``["reorder"]``: lost-in-the-middle order).
    """

    method: Any = Field(
        default="adaptive-k", description="ctxsel method spec, e.g. 'adaptive-k', 'top-k@5', or a Selector"
    )
    selector_options: dict[str, Any] = Field(
        default_factory=dict, description="options for the selector (min_k, max_tokens...)"
    )
    scorer: Any = Field(
        default=None, description="a scorer name ('dense', 'bm25', 'cascade'; None: the default) or a ctxsel Scorer"
    )
    scorer_options: dict[str, Any] = Field(default_factory=dict, description="options for a scorer given by name")
    use_node_scores: bool = Field(default=False, description="rank by the retriever's scores (every node needs one)")
    missing_scores: Literal["error", "rescore"] = Field(
        default="error",
        description="with use_node_scores, a node without a finite score: 'error' (default) or 'rescore' "
        "(warn, score every node with the scorer, note it in ctxsel_note)",
    )
    allow_empty: bool = Field(default=False, description="allow an empty result for a non-empty input")
    stages: list[str] = Field(
        default_factory=list, description="ctxsel stages after the cut, in order, e.g. ['reorder']"
    )
    llm: Any = Field(default=None, exclude=True, description="ctxsel LLM client for methods that call one")
    choices: list[str] | None = Field(
        default=None, description="a multiple-choice question's answer options (SAGE reads them)"
    )

    _selector: Selector | None = PrivateAttr(default=None)
    _scorer: Scorer | None = PrivateAttr(default=None)
    _last_report: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "CtxselPostprocessor"

    @property
    def last_report(self) -> dict[str, Any] | None:
        """The selection report of the latest call (method, k, why, kept positions)."""
        return self._last_report

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InputError("CtxselPostprocessor needs the query: pass query_bundle=... or query_str=...")
        check_documents(nodes, "llama_index NodeWithScore")
        if not nodes:
            self._last_report = None
            return []
        selector = self._get_selector()
        scores, note = None, ""
        if self.use_node_scores:
            scores, note = given_scores([n.score for n in nodes], "score", self.missing_scores)
        scorer = self._get_scorer() if scores is None and selector.needs_scores else None
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        out: Outcome = select_positions(
            query_bundle.query_str,
            texts,
            selector,
            scorer,
            scores=scores,
            allow_empty=self.allow_empty,
            choices=self.choices,
            note=note,
            stages=self.stages,
        )
        self._last_report = out.report()
        kept = []
        for i, meta in zip(out.kept, out.metadata):
            src = nodes[i]
            node = src.node.model_copy(
                update={
                    "metadata": {**src.node.metadata, **meta},
                    "excluded_llm_metadata_keys": _plus(src.node.excluded_llm_metadata_keys, (*META_KEYS, NOTE_KEY)),
                    "excluded_embed_metadata_keys": _plus(
                        src.node.excluded_embed_metadata_keys, (*META_KEYS, NOTE_KEY)
                    ),
                }
            )
            if i in out.texts and hasattr(node, "text"):  # a stage (prune) changed the text
                node = node.model_copy(update={"text": out.texts[i]})
            score = meta["ctxsel_score"] if meta["ctxsel_score"] is not None else src.score
            kept.append(NodeWithScore(node=node, score=score))
        return kept


def _plus(existing: list[str], extra: tuple[str, ...]) -> list[str]:
    return list(existing) + [k for k in extra if k not in existing]
