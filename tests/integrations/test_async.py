"""The framework components' async methods (LangChain's acompress_documents, LlamaIndex's
apostprocess_nodes) select off the event loop, as ctxsel.aselect does, and keep what the sync call keeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from ctxsel.types import Chunk
from tests.support.event_loop import ticks_while

TEXTS = ["The meteorite weighs 300 kg.", "Tickets cost 5 euros.", "The museum is open at nine."]
QUERY = "How heavy is the meteorite?"


class SlowKeywords:
    """Word overlap after a pause, recording the thread it scored on."""

    name = "slow-keywords"

    def __init__(self) -> None:
        self.threads: list[str] = []

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        time.sleep(0.3)
        words = set(question.lower().strip("?").split())
        return np.array([len(words & set(c.text.lower().strip(".").split())) for c in chunks], dtype=float)


def test_langchain_acompress_documents_runs_off_the_loop() -> None:
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    scorer = SlowKeywords()
    comp = CtxselCompressor(method="top-k@1", scorer=scorer)
    docs = [Document(page_content=t) for t in TEXTS]
    kept, ticks = ticks_while(lambda: comp.acompress_documents(docs, QUERY))
    assert [d.page_content for d in kept] == [d.page_content for d in comp.compress_documents(docs, QUERY)]
    assert kept[0].page_content == TEXTS[0] and ticks >= 10
    assert scorer.threads[0] != threading.main_thread().name


def test_llamaindex_apostprocess_nodes_runs_off_the_loop() -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    scorer = SlowKeywords()
    pp = CtxselPostprocessor(method="top-k@1", scorer=scorer)
    nodes = [NodeWithScore(node=TextNode(text=t)) for t in TEXTS]
    kept, ticks = ticks_while(lambda: pp.apostprocess_nodes(nodes, query_str=QUERY))
    assert [n.node.get_content() for n in kept] == [TEXTS[0]] and ticks >= 10
    assert scorer.threads[0] != threading.main_thread().name
