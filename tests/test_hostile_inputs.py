"""Numbers, containers and text a hostile or careless caller sends (issue 68, items 3 and 4).

Each defect the issue lists, through the surface where it was found -- ``ctxsel.select``, ``ctxsel
select`` (its ``main(argv)`` in this process) and ``POST /select`` on a real uvicorn server -- and the
same case on the other two, which must give the same verdict and message: token counts past the
bound (and sums that would wrap), seeds, whole numbers in specs (``0.0004k``), expansion options,
booleans, a dict or a set of chunks, lone surrogates in ids, questions of invisible characters, the
length limits, and type errors in ctxsel's words over HTTP.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import ctxsel
from ctxsel import Chunk
from ctxsel.errors import CtxselError, InputError
from ctxsel.inputs import MAX_CHUNK_TOKENS, MAX_ID_CHARS, MAX_QUESTION_CHARS, MAX_SEED, MAX_SPEC_CHARS
from tests.support.differential import (
    LoopbackServer,
    Request,
    Verdict,
    loopback_server,
    message_key,
    via_cli,
    via_http,
    via_python,
)

QUESTION = "How heavy is the meteorite?"
TEXTS = ("The meteorite weighs three kilograms.", "The museum opens at noon.", "Bananas are yellow.")
SCORES = (0.9, 0.2, 0.1)


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with loopback_server() as srv:
        yield srv


def everywhere(req: Request, server: LoopbackServer, folder: Path) -> list[Verdict]:
    """The verdicts of Python, the command line and HTTP (each crash fails the test)."""
    return [via_python(req), via_cli(req, folder / uuid.uuid4().hex), via_http(req, server)]


def refused_alike(vs: list[Verdict], *words: str) -> str:
    """Every surface refused with the same message key, and the message holds ``words``; the message."""
    assert all(not v.accepted for v in vs), vs
    assert len({v.key for v in vs}) == 1, [(v.surface, v.message) for v in vs]
    for v in vs:
        for w in words:
            assert w in v.message, (w, v)
    return vs[0].message


def post(server: LoopbackServer, body: dict[str, Any] | str) -> tuple[int, Any]:
    raw = body if isinstance(body, str) else json.dumps(body)
    return server.post("/select", raw.encode())


# -- token counts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2**62, 2**63, 2**64, MAX_CHUNK_TOKENS + 1])
def test_a_token_count_past_the_bound_is_refused_everywhere(n: int, server: LoopbackServer, tmp_path: Path) -> None:
    """2**63 was a 500 over HTTP; 2**62 three times under max_tokens=100 kept all three and reported a
    wrapped sum: now any count past MAX_CHUNK_TOKENS is refused, in one message."""
    chunks = tuple({"id": f"c{i}", "text": t, "n_tokens": n} for i, t in enumerate(TEXTS))
    req = Request(QUESTION, chunks, "top-k@3", scores=SCORES, options=(("max_tokens", 100),))
    msg = refused_alike(everywhere(req, server, tmp_path), f"<= {MAX_CHUNK_TOKENS:,}")
    assert msg.startswith("chunks[0].n_tokens must be <= 1,000,000,000") or ".jsonl:" in msg
    with pytest.raises(InputError, match="n_tokens must be <= 1,000,000,000"):
        Chunk("a", "text", n_tokens=n)


def test_the_budget_is_never_exceeded_at_the_bound(server: LoopbackServer, tmp_path: Path) -> None:
    """Counts at the bound sum exactly: a budget below one chunk keeps none; two fit 2e9 exactly."""
    chunks = tuple({"id": f"c{i}", "text": t, "n_tokens": MAX_CHUNK_TOKENS} for i, t in enumerate(TEXTS))
    small = Request(QUESTION, chunks, "top-k@3", scores=SCORES, options=(("max_tokens", 100),))
    assert all(v.ids == () for v in everywhere(small, server, tmp_path)), "a 1e9-token chunk kept under 100"
    two = Request(QUESTION, chunks, "top-k@3", scores=SCORES, options=(("max_tokens", 2 * MAX_CHUNK_TOKENS),))
    assert all(v.ids == ("c0", "c1") for v in everywhere(two, server, tmp_path))
    sel = ctxsel.select(QUESTION, [dict(c) for c in chunks], "top-n-tokens@2000000000", list(SCORES))
    assert sel.ids == ["c0", "c1"] and sel.n_tokens == 2 * MAX_CHUNK_TOKENS
    sel = ctxsel.select(QUESTION, [dict(c) for c in chunks], "full", list(SCORES))
    assert sel.n_tokens == 3 * MAX_CHUNK_TOKENS  # no int64 wrap in the reported sum either


@pytest.mark.parametrize("budget", [10**30, 2**63, 1e30])
def test_a_budget_past_int64_is_no_budget(budget: Any, server: LoopbackServer, tmp_path: Path) -> None:
    req = Request(QUESTION, TEXTS, "top-k@2", scores=SCORES, options=(("max_tokens", budget),))
    assert all(v.ids == ("0", "1") for v in everywhere(req, server, tmp_path))
    spec = Request(QUESTION, TEXTS, "top-n-tokens@1e30", scores=SCORES)
    assert all(v.ids == ("0", "1", "2") for v in everywhere(spec, server, tmp_path))


@pytest.mark.parametrize("value", [2.5, -1, True, "5"])
def test_a_bad_token_count_is_one_refusal(value: Any, server: LoopbackServer, tmp_path: Path) -> None:
    chunks = ({"id": "a", "text": TEXTS[0], "n_tokens": value}, {"id": "b", "text": TEXTS[1]})
    req = Request(QUESTION, chunks, "top-k@1", scores=(0.9, 0.1))
    refused_alike(everywhere(req, server, tmp_path), "n_tokens")


def test_a_whole_float_token_count_is_its_integer() -> None:
    assert Chunk("a", "x", n_tokens=5.0).n_tokens == 5  # type: ignore[arg-type]
    with pytest.raises(InputError, match="n_tokens must be an integer, got 2.5"):
        Chunk("a", "x", n_tokens=2.5)  # type: ignore[arg-type]


# -- seeds, whole numbers and booleans --------------------------------------------------------------


@pytest.mark.parametrize("seed", ["1e30", "4294967296", "-1"])
def test_a_seed_out_of_range_is_refused(seed: str, server: LoopbackServer, tmp_path: Path) -> None:
    """``ldar[sample=true,seed=1e30]`` was a 500 over HTTP."""
    req = Request(QUESTION, TEXTS, f"ldar[sample=true,seed={seed}]", scores=SCORES)
    refused_alike(everywhere(req, server, tmp_path), "seed must be >= 0")
    assert f"<= {MAX_SEED}" in via_python(req).message or seed == "-1"


def test_a_text_seed_is_ctxsels_error_in_python() -> None:
    """``seed=abc`` was a raw ValueError in Python."""
    with pytest.raises(CtxselError, match="seed must be an integer, got 'abc'"):
        ctxsel.select(QUESTION, list(TEXTS), "ldar", list(SCORES), sample=True, seed="abc")


@pytest.mark.parametrize(
    ("spec", "got"),
    [("top-k@0.0004k", "0.4"), ("top-n-tokens@1.0005k", "1000.5"), ("top-k[k=2.5]", "2.5"), ("top-k@1.5", "1.5")],
)
def test_a_count_that_is_not_whole_is_refused(spec: str, got: str, server: LoopbackServer, tmp_path: Path) -> None:
    """``top-k@0.0004k`` was silently 0 and ``top-n-tokens@1.0005k`` 1000."""
    req = Request(QUESTION, TEXTS, spec, scores=SCORES)
    refused_alike(everywhere(req, server, tmp_path), "must be an integer", got)


@pytest.mark.parametrize(
    ("spec", "ids"),
    [("top-k@2.0", ("0", "1")), ("top-k@1e3", ("0", "1", "2")), ("top-k@0.002k", ("0", "1")), ("top-k@2", ("0", "1"))],
)
def test_a_whole_count_is_accepted_in_any_spelling(
    spec: str, ids: tuple[str, ...], server: LoopbackServer, tmp_path: Path
) -> None:
    req = Request(QUESTION, TEXTS, spec, scores=SCORES)
    assert all(v.ids == ids for v in everywhere(req, server, tmp_path))


@pytest.mark.parametrize(
    ("expand", "refusal"),
    [
        ("hop[m=2.0]", None),
        ("links[m=1e0]", None),
        ("links[question=false]", None),
        ("hop[m=2.5]", "m must be an integer, got 2.5"),
        ("hop[m=0]", "m must be >= 1, got 0"),
        ("links[question=maybe]", "question must be true or false, got 'maybe'"),
        ("links[question=1]", "question must be true or false, got 1"),
        ("hop[weight=yes]", "weight must be a number, got 'yes'"),
    ],
)
def test_expansion_options_follow_the_one_rule(
    expand: str, refusal: str | None, server: LoopbackServer, tmp_path: Path
) -> None:
    """``hop[m=2.0]`` was refused where ``top-k@2.0`` is accepted; ``links[question=maybe]`` was accepted."""
    req = Request(QUESTION, TEXTS, "top-k@2", scores=SCORES, expand=expand)
    vs = everywhere(req, server, tmp_path)
    if refusal is None:
        assert all(v.accepted for v in vs) and len({v.ids for v in vs}) == 1, vs
    else:
        refused_alike(vs, refusal)


def test_expansion_stages_built_in_python_follow_it_too() -> None:
    from ctxsel.ranking import MentionLinks, SecondHop

    assert SecondHop(m=2.0).m == 2  # type: ignore[arg-type]
    with pytest.raises(InputError, match="links question must be true or false"):
        MentionLinks(question="maybe")  # type: ignore[arg-type]


def test_a_rerank_depth_follows_the_whole_number_rule() -> None:
    from ctxsel.ranking.rerank import parse_rerank

    rerank = parse_rerank("bm25@5.0")
    assert rerank is not None and rerank.m == 5
    with pytest.raises(InputError, match="M must be an integer >= 1"):
        parse_rerank("bm25@2.5")


# -- containers -------------------------------------------------------------------------------------


def test_a_dict_of_texts_is_refused_with_what_to_pass(server: LoopbackServer) -> None:
    """``{"a": "real text"}`` selected the key "a" as the chunk's text."""
    with pytest.raises(TypeError, match=r"pass list\(d.values\(\)\)") as e:
        ctxsel.select(QUESTION, {"a": "real text"}, "top-k@1", [0.5])  # type: ignore[arg-type]
    status, body = post(server, {"question": QUESTION, "chunks": {"a": "real text"}, "method": "top-k@1"})
    assert status == 422 and body["message"] == str(e.value)


def test_one_chunk_object_in_place_of_the_list_is_refused(server: LoopbackServer) -> None:
    chunk = {"id": "a", "text": "real text"}
    with pytest.raises(TypeError, match=r"got one chunk object .*pass \[chunk\]") as e:
        ctxsel.select(QUESTION, chunk, "top-k@1")  # type: ignore[arg-type]
    status, body = post(server, {"question": QUESTION, "chunks": chunk, "method": "top-k@1"})
    assert status == 422 and body["message"] == str(e.value)


@pytest.mark.parametrize("container", [set, frozenset])
def test_a_set_of_chunks_is_refused(container: type) -> None:
    """Scores were attached in hash order: a different answer per PYTHONHASHSEED."""
    with pytest.raises(TypeError, match="a set has no order"):
        ctxsel.select(QUESTION, container(TEXTS), "top-k@1", list(SCORES))
    with pytest.raises(TypeError, match="scores must be a sequence of numbers"):
        ctxsel.select(QUESTION, list(TEXTS), "top-k@1", set(SCORES))


def test_ordered_containers_are_read_in_order() -> None:
    want = ctxsel.select(QUESTION, list(TEXTS), "top-k@2", list(SCORES)).ids
    assert ctxsel.select(QUESTION, tuple(TEXTS), "top-k@2", SCORES).ids == want
    assert ctxsel.select(QUESTION, np.array(TEXTS), "top-k@2", np.array(SCORES)).ids == want  # type: ignore[arg-type]
    gen = (t for t in TEXTS)  # read once, in order
    assert ctxsel.select(QUESTION, gen, "top-k@2", list(SCORES)).ids == want  # type: ignore[arg-type]
    assert ctxsel.select(QUESTION, {t: 1 for t in TEXTS}.keys(), "top-k@2", list(SCORES)).ids == want  # type: ignore[arg-type]


# -- text -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cid", ["\ud800", "a\udfffb"])
def test_a_lone_surrogate_id_is_one_refusal(cid: str, server: LoopbackServer, tmp_path: Path) -> None:
    """Accepted by Python, an internal error in the CLI, pydantic's union noise over HTTP."""
    chunks = ({"id": cid, "text": TEXTS[0]}, {"id": "b", "text": TEXTS[1]})
    vs = everywhere(Request(QUESTION, chunks, "top-k@1", scores=(0.9, 0.1)), server, tmp_path)
    msg = refused_alike(vs, "chunks[0].id contains a lone surrogate", "not valid Unicode")
    assert "ChunkIn" not in msg and "Input should" not in msg
    with pytest.raises(InputError, match="Chunk id contains a lone surrogate"):
        Chunk(cid, "text")


def test_a_lone_surrogate_doc_id_is_refused(server: LoopbackServer) -> None:
    chunks = [{"id": "a", "text": TEXTS[0], "doc_id": "\ud800"}]
    with pytest.raises(InputError, match=r"chunks\[0\].doc_id contains a lone surrogate") as e:
        ctxsel.select(QUESTION, chunks, "top-k@1", [0.5])
    status, body = post(server, {"question": QUESTION, "chunks": chunks, "scores": [0.5], "method": "top-k@1"})
    assert status == 422 and body["message"] == str(e.value)


@pytest.mark.parametrize(
    "question",
    ["\x00", "\x00\x01\x7f", "\u0301", "\u0301\u0302\u20dd", "\u3164", "\u115f\u1160", " \uffa0 ", "\u200b\u0301\x00"],
)
def test_a_question_of_invisible_characters_is_empty(question: str, server: LoopbackServer, tmp_path: Path) -> None:
    """NUL, combining marks and U+3164 passed the empty-question rule and selected arbitrary chunks."""
    vs = everywhere(Request(question, TEXTS, "top-k@1", scores=SCORES), server, tmp_path)
    refused_alike(vs, "is empty")
    assert all(v.key == ("question", "is empty") for v in vs)


@pytest.mark.parametrize("question", ["e\u0301t\u00e9", "a\x00b", "\u3164x"])
def test_a_question_with_text_among_them_is_not_empty(question: str, server: LoopbackServer, tmp_path: Path) -> None:
    vs = everywhere(Request(question, TEXTS, "top-k@1", scores=SCORES), server, tmp_path)
    assert all(v.ids == ("0",) for v in vs), vs


# -- length limits ----------------------------------------------------------------------------------


def test_an_id_over_the_limit_is_refused_everywhere(server: LoopbackServer, tmp_path: Path) -> None:
    """Python and the CLI accepted what HTTP refused with 422: one limit, one message, 422 everywhere."""
    long_id = "x" * (MAX_ID_CHARS + 1)
    chunks = ({"id": long_id, "text": TEXTS[0]}, {"id": "b", "text": TEXTS[1]})
    vs = everywhere(Request(QUESTION, chunks, "top-k@1", scores=(0.9, 0.1)), server, tmp_path)
    refused_alike(vs, "chunks[0].id is too long: 1,025 characters", f"at most {MAX_ID_CHARS:,}")
    ok = ({"id": "x" * MAX_ID_CHARS, "text": TEXTS[0]}, {"id": "b", "text": TEXTS[1]})
    vs = everywhere(Request(QUESTION, ok, "top-k@1", scores=(0.9, 0.1)), server, tmp_path)
    assert all(v.ids == ("x" * MAX_ID_CHARS,) for v in vs)
    with pytest.raises(InputError, match="Chunk id is too long"):
        Chunk(long_id, "text")


def test_a_question_over_the_limit_is_refused_everywhere(server: LoopbackServer, tmp_path: Path) -> None:
    question = "why " * (MAX_QUESTION_CHARS // 4) + "?"
    vs = everywhere(Request(question, TEXTS, "top-k@1", scores=SCORES), server, tmp_path)
    refused_alike(vs, "question is too long: 100,001 characters", f"{MAX_QUESTION_CHARS:,}")
    status, body = post(server, {"question": question, "chunks": list(TEXTS)})
    assert status == 422 and body["error"] == "invalid_body" and "Input should" not in body["message"]


def test_a_spec_over_the_limit_is_refused_everywhere(server: LoopbackServer, tmp_path: Path) -> None:
    spec = "top-k[k=2" + " " * MAX_SPEC_CHARS + "]"
    vs = everywhere(Request(QUESTION, TEXTS, spec, scores=SCORES), server, tmp_path)
    refused_alike(vs, "method spec is too long", f"at most {MAX_SPEC_CHARS:,}")
    for field, value in (("expand", "hop" + " " * MAX_SPEC_CHARS), ("stages", ["reorder" + " " * MAX_SPEC_CHARS])):
        status, body = post(server, {"question": QUESTION, "chunks": list(TEXTS), "scores": list(SCORES), field: value})
        assert status == 422 and "spec is too long" in body["message"], body
    with pytest.raises(InputError, match="expansion spec is too long"):
        ctxsel.select(QUESTION, list(TEXTS), "top-k@1", list(SCORES), expand="hop" + " " * MAX_SPEC_CHARS)


# -- type errors over HTTP in ctxsel's words -------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "python"),
    [
        ("question", 5, {"question": 5}),
        ("question", ["q"], {"question": ["q"]}),
        ("chunks", "one text", {"chunks": "one text"}),
        ("chunks", 5, {"chunks": 5}),
        ("chunks", [5], {"chunks": [5]}),
        ("scores", "0.9", {"scores": "0.9"}),
        ("scores", {"a": 1}, {"scores": {"a": 1}}),
        ("scores", [True, 0.1, 0.2], {"scores": [True, 0.1, 0.2]}),
        ("method", 5, {"method": 5}),
        ("options", {"min_k": "2"}, {"min_k": "2"}),
        ("options", {"min_k": 2.5}, {"min_k": 2.5}),
    ],
)
def test_a_body_type_error_uses_ctxsels_words(
    field: str, value: Any, python: dict[str, Any], server: LoopbackServer
) -> None:
    """Pydantic's "Input should be a valid string" is gone: the Python API's message, over HTTP too."""
    kwargs: dict[str, Any] = {"question": QUESTION, "chunks": list(TEXTS), "scores": list(SCORES), "method": "top-k@1"}
    opts = {k: v for k, v in python.items() if k not in kwargs}
    kwargs.update({k: v for k, v in python.items() if k in kwargs})
    with pytest.raises(CtxselError) as e:
        ctxsel.select(kwargs["question"], kwargs["chunks"], kwargs["method"], kwargs["scores"], **opts)
    body = {"question": QUESTION, "chunks": list(TEXTS), "scores": list(SCORES), "method": "top-k@1", field: value}
    status, got = post(server, body)
    assert status == 422, got
    assert "Input should" not in got["message"] and "valid" not in got["message"].split(":")[0], got
    assert message_key(got["message"]) == message_key(str(e.value)), (got["message"], str(e.value))


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("options", [1], "options must be an object of option names to values"),
        ("options", {"min_k": [1]}, "options.min_k must be one value"),
        ("expand", 5, "expand must be a spec string"),
        ("rerank", 5, "rerank must be a spec string"),
        ("stages", [5], "stages: a stage must be a spec string"),
    ],
)
def test_other_body_type_errors_are_ctxsels_too(field: str, value: Any, words: str, server: LoopbackServer) -> None:
    status, got = post(server, {"question": QUESTION, "chunks": list(TEXTS), field: value})
    assert status == 422 and got["message"].startswith(words), got


def test_the_limits_are_documented_with_their_values() -> None:
    from tests.support.paths import REPO

    http = (REPO / "docs" / "reference" / "http.md").read_text(encoding="utf-8")
    for n in (MAX_QUESTION_CHARS, MAX_ID_CHARS, MAX_SPEC_CHARS, MAX_CHUNK_TOKENS):
        assert f"at most {n:,}" in http, n
        assert f"{n:,}" in (ctxsel.select.__doc__ or ""), n
    assert "422 ``invalid_body``" in http
