"""One exception tree: what the user can fix is exit 2 / HTTP 422 (502 for an LLM backend, 500 for a
server missing an extra); a bug is exit 1 with a hint / HTTP 500 with the request id, never "invalid input"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ctxsel
from ctxsel.cli.main import main
from ctxsel.errors import (
    CtxselError,
    DatasetError,
    InputError,
    InputTypeError,
    LLMError,
    LLMTimeout,
    MissingExtraError,
    MissingLLMError,
    ModelError,
    SpecError,
)
from ctxsel.selectors.fixed import TopK


def test_the_tree_keeps_the_builtin_bases_callers_caught() -> None:
    assert issubclass(InputError, ValueError) and issubclass(InputTypeError, TypeError)
    assert issubclass(SpecError, InputError) and issubclass(DatasetError, ValueError)
    assert issubclass(MissingExtraError, ImportError) and issubclass(ModelError, RuntimeError)
    for cls in (
        InputError,
        InputTypeError,
        SpecError,
        DatasetError,
        ModelError,
        MissingExtraError,
        LLMError,
        LLMTimeout,
        MissingLLMError,
    ):
        assert issubclass(cls, CtxselError), cls


def test_bad_input_raises_from_the_tree() -> None:
    with pytest.raises(InputError, match="must match"):
        ctxsel.select("q?", ["a", "b"], "top-k@1", scores=[1.0])
    with pytest.raises(InputTypeError, match="sequence"):
        ctxsel.select("q?", "one string", "top-k@1", scores=[1.0])
    with pytest.raises(InputError, match="unknown method"):
        ctxsel.select("q?", ["a"], "no-such-method", scores=[1.0])


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "doc.txt"
    p.write_text("The meteorite weighs 3.2 kg.\n\nCats sleep.", encoding="utf-8")
    return p


def _boom(exc: BaseException) -> Any:
    def select(self: Any, *a: Any, **kw: Any) -> Any:
        raise exc

    return select


@pytest.mark.parametrize(
    "exc",
    [
        InputError("bad scores"),
        SpecError("bad spec"),
        DatasetError("bad record"),
        ModelError("no model"),
        MissingExtraError("pip install 'ctxsel[x]'"),
    ],
)
def test_cli_maps_every_ctxsel_error_to_exit_2(
    exc: Exception, doc: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TopK, "_select", _boom(exc))
    rc = main(["select", "--document", str(doc), "--question", "q?", "--scorer", "keywords", "--method", "top-k@1"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"ctxsel select: error: {exc}\n"


@pytest.mark.parametrize("exc", [KeyError("chunk_id"), TypeError("unsupported operand"), ZeroDivisionError("x")])
def test_cli_reports_a_bug_as_exit_1_with_a_hint(
    exc: Exception, doc: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TopK, "_select", _boom(exc))
    rc = main(["select", "--document", str(doc), "--question", "q?", "--scorer", "keywords", "--method", "top-k@1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith(f"ctxsel select: internal error: {type(exc).__name__}")
    assert "CTXSEL_DEBUG=1" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (InputError("bad scores"), 422, "invalid_input"),
        (SpecError("bad spec"), 422, "invalid_input"),
        (MissingExtraError("pip install 'ctxsel[bm25]'"), 500, "server_misconfigured"),
        (KeyError("chunk_id"), 500, "internal_error"),
        (TypeError("unsupported operand"), 500, "internal_error"),
    ],
)
def test_service_maps_errors_by_kind(
    exc: Exception, status: int, code: str, monkeypatch: pytest.MonkeyPatch, service_client: Any
) -> None:
    from ctxsel.service import ServiceSettings

    monkeypatch.setattr(TopK, "_select", _boom(exc))
    client = service_client(ServiceSettings(scorer="keywords"))
    got = client.post(
        "/select", json={"question": "q?", "chunks": ["a", "b"], "method": "top-k@1", "scores": [0.5, 0.1]}
    )
    body = got.json()
    assert got.status_code == status and body["error"] == code
    if code == "internal_error":  # the message points at the log line, never at the client's input
        assert body["request_id"] and body["request_id"] in body["message"] and str(exc) not in body["message"]
    else:
        assert str(exc).strip("'") in body["message"]


@pytest.mark.parametrize(
    "call",
    [
        lambda: ctxsel.select("q?", ["a"], "top-k[", scores=[1.0]),
        lambda: ctxsel.select("q?", ["a"], "top-k[foo=1]", scores=[1.0]),
        lambda: ctxsel.select("q?", ["a"], scorer="magic"),
        lambda: ctxsel.select("q?", ["a"], expand="leap", scores=[1.0]),
    ],
)
def test_a_spec_that_does_not_parse_is_a_spec_error(call: Any) -> None:
    with pytest.raises(SpecError):
        call()


def test_every_exception_class_lives_in_errors_py_and_its_tree() -> None:
    """One home: no module but ctxsel/errors.py defines an exception (or warning) class, and the
    tree diagram in its docstring names every one it defines."""
    import ast
    import builtins

    import ctxsel.errors as errors

    src = Path(errors.__file__).parent
    ours = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    builtin = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    known = ours | builtin | {"HTTPException", "StarletteHTTPException"}
    outside = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "errors.py" and path.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
                if bases & known or any(b.endswith(("Error", "Exception", "Warning")) for b in bases):
                    outside.append(f"{path.relative_to(src)}: {node.name}")
    assert outside == []
    diagram = errors.__doc__ or ""
    assert sorted(n for n in ours if f" {n} " not in diagram and f" {n}\n" not in diagram) == []
