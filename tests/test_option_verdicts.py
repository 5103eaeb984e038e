"""Every declared option of every method and stage, given bad values, gets one verdict on every surface.

For each option the declaration (:mod:`ctxsel.options`) names, the test writes values a careless or
hostile caller would (text, a fraction, a boolean, a huge number, out of range, NaN) into a spec
(``top-k[k=1.5]``), which Python, the command line and HTTP read as the same text, and as a keyword
option (Python's keyword, HTTP's ``options``). Every surface must refuse or accept alike, with the same
message, and none may crash. The one designed difference: an option that changes the whole process
(LDAR's ``threads``) is refused over HTTP with the server flag that sets it, whatever its value.
"""

from __future__ import annotations

import re
import typing
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from ctxsel.options import OptionInfo, declared
from ctxsel.selectors import available_methods, get_selector_class
from ctxsel.stages import available_stages, stage_class
from tests.support.differential import LoopbackServer, Request, Verdict, loopback_server, via_cli, via_http, via_python

QUESTION = "How heavy is the meteorite?"
CHUNKS = ("The meteorite weighs three kilograms.", "The museum opens at noon.", "Bananas are yellow.")
SCORES = (0.9, 0.2, 0.1)
COMMON = {"min_k", "max_tokens", "nan_policy"}

#: bad (and borderline) values by the option's base type, as spec text and as a JSON value
VALUES: dict[str, list[tuple[str, Any]]] = {
    "int": [
        ("abc", "abc"),
        ("1.5", 1.5),
        ("true", True),
        ("1e30", 1e30),
        ("-1", -1),
        ("nan", None),
        ("2.0", 2.0),
        ("0.0004k", None),
    ],
    "float": [("abc", "abc"), ("true", True), ("nan", None), ("1e999", None), ("-1", -1)],
    "bool": [("1", 1), ("maybe", "maybe"), ("0", 0)],
    "str": [("1", 1), ("true", True), ("bogus", "bogus")],
}


def base_type(info: OptionInfo) -> str | None:
    tp = info.type
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) not in (None,) else []
    if typing.get_origin(tp) is typing.Literal:
        return "str"
    if args and len(args) == 1:
        tp = args[0]
        if typing.get_origin(tp) is typing.Literal:
            return "str"
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(tp)


def method_cases() -> Iterator[Any]:
    for name in sorted(available_methods()):
        cls = get_selector_class(name)
        for opt, info in declared(cls.Options).items():
            if opt in COMMON and name != "top-k":  # the common options once, on top-k
                continue
            kind = base_type(info)
            for text, value in VALUES.get(kind or "", []):
                yield pytest.param(name, opt, text, value, bool(info.server_flag), id=f"{name}[{opt}={text}]")


def stage_cases() -> Iterator[Any]:
    for name in sorted(available_stages()):
        for opt, info in declared(stage_class(name)).items():
            for text, _ in VALUES.get(base_type(info) or "", []):
                yield pytest.param(name, opt, text, id=f"stage {name}[{opt}={text}]")
        yield pytest.param(name, "no_such_option", "1", id=f"stage {name}[no_such_option=1]")


def expansion_cases() -> Iterator[Any]:
    from ctxsel.ranking import MentionLinks, SecondHop

    for name, cls in (("hop", SecondHop), ("links", MentionLinks)):
        for opt, info in declared(cls).items():
            for text, _ in VALUES.get(base_type(info) or "", []):
                yield pytest.param(name, opt, text, id=f"expand {name}[{opt}={text}]")


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with loopback_server() as srv:
        yield srv


_PREFIX = re.compile(r"^(?:--method: |--stage: |method '[^']*': )")


def said(v: Verdict) -> str:
    """What a refusal says, without the surface's own prefix (the flag it read). The options of an LLM
    method accepted, each surface then asks for its LLM in its own words (a flag, a server setting)."""
    if v.accepted or "needs an LLM client" in v.message or "calls an LLM and this server has no reader" in v.message:
        return "accepted"
    return _PREFIX.sub("", v.message)


@pytest.mark.parametrize(("method", "opt", "text", "value", "process"), list(method_cases()))
def test_one_verdict_for_every_option_value(
    method: str, opt: str, text: str, value: Any, process: bool, server: LoopbackServer, tmp_path: Path
) -> None:
    spec = Request(QUESTION, CHUNKS, f"{method}[{opt}={text}]", scores=SCORES)
    python, cli, http = via_python(spec), via_cli(spec, tmp_path / uuid.uuid4().hex), via_http(spec, server)
    assert said(python) == said(cli), (python, cli)
    if process:  # a request cannot change the server's process: refused whatever the value
        assert not http.accepted and f"'{opt}' changes the whole server" in http.message
        assert "--threads" in http.message
    else:
        assert said(python) == said(http), (python, http)
    if value is not None:  # the same value as a keyword option: Python's keyword, HTTP's "options"
        keyword = Request(QUESTION, CHUNKS, method, scores=SCORES, options=((opt, value),))
        py_kw, http_kw = via_python(keyword), via_http(keyword, server)
        if not process:
            assert said(py_kw) == said(http_kw), (py_kw, http_kw)
    if text in ("abc", "maybe") and not process:  # text where a number or a boolean belongs: never accepted
        assert not python.accepted and opt in python.message, python


@pytest.mark.parametrize(("stage", "opt", "text"), list(stage_cases()))
def test_one_verdict_for_every_stage_option(stage: str, opt: str, text: str, server: LoopbackServer) -> None:
    import ctxsel
    from ctxsel.errors import CtxselError

    spec = f"{stage}[{opt}={text}]"
    try:
        ctxsel.select(QUESTION, list(CHUNKS), "top-k@2", scores=list(SCORES), stages=[spec])
        python = "accepted"
    except CtxselError as e:
        python = str(e)
    body = {"question": QUESTION, "chunks": list(CHUNKS), "scores": list(SCORES), "method": "top-k@2", "stages": [spec]}
    import json

    status, got = server.post("/select", json.dumps(body).encode())
    http = "accepted" if status == 200 else got["message"]
    assert status in (200, 422) and python == http


def test_the_cases_the_issue_names(server: LoopbackServer, tmp_path: Path) -> None:
    for spec, python_says in (
        ("ldar[threads=1.5]", "bad options for method 'ldar': threads must be an integer, got 1.5"),
        ("adaptive-k[window=3]", "window is the moving average's width: it applies to strategy=moving_avg"),
        ("ldar[seed=1.5]", "seed must be an integer, got 1.5"),
        ("ldar[seed=3]", "seed makes a sampled band repeatable: it applies to sample=true only"),
    ):
        req = Request(QUESTION, CHUNKS, spec, scores=SCORES)
        python, cli = via_python(req), via_cli(req, tmp_path / uuid.uuid4().hex)
        assert python_says in python.message and said(python) == said(cli)
        http = via_http(req, server)
        assert said(http) == said(python) or "changes the whole server" in http.message


def test_get_methods_lists_every_declared_option(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    got = service_client(ServiceSettings(scorer="keywords")).get("/methods")
    assert got.status_code == 200
    body = got.json()
    assert set(body["methods"]) == set(available_methods()) and set(body["stages"]) == set(available_stages())
    for name, entry in body["methods"].items():
        assert [o["name"] for o in entry["options"]] == list(declared(get_selector_class(name).Options))
    k = {o["name"]: o for o in body["methods"]["top-k"]["options"]}["k"]
    assert k == {**k, "value": "an integer >= 0", "default": 5, "minimum": 0}
    threads = {o["name"]: o for o in body["methods"]["ldar"]["options"]}["threads"]
    assert threads["server_flag"] == "--threads"


@pytest.mark.parametrize(("stage", "opt", "text"), list(expansion_cases()))
def test_one_verdict_for_every_expansion_option(
    stage: str, opt: str, text: str, server: LoopbackServer, tmp_path: Path
) -> None:
    """The expansion stages' options are declared too (issue 68): one rule, one message, everywhere."""
    req = Request(QUESTION, CHUNKS, "top-k@2", scores=SCORES, expand=f"{stage}[{opt}={text}]")
    python, cli, http = via_python(req), via_cli(req, tmp_path / uuid.uuid4().hex), via_http(req, server)
    assert said(python) == said(http), (python, http)
    assert said(python) == said(cli).removeprefix("--expand: "), (python, cli)
    if text in ("abc", "maybe", "1.5", "0.0004k"):
        assert not python.accepted and opt in python.message, python
