"""One select request, sent through the Python API, the command line and HTTP, and the verdicts compared.

    req = Request("Who?", ("a", "b"), "top-k@1", scores=(0.1, 0.9))
    verdicts = [via_python(req), via_cli(req, tmp_path), via_http(req, server)]

A :class:`Request` is the one description; each surface writes it the way a user of that surface
would (keyword arguments; a .jsonl document, a --scores file and flags; a JSON body), and its answer
becomes a :class:`Verdict`: accepted with the selected ids, or refused with a message whose
:func:`message_key` (the field it names and the message's first clause) the surfaces must share.
A crash (an exception that is no CtxselError, exit 1, a 500, a traceback) is a :class:`Crash`.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import logging
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ctxsel
from ctxsel.cli.main import main as cli_main
from ctxsel.errors import CtxselError

SURFACES = ("python", "cli", "http")
SCORER = "keywords"  # no model: every surface scores with keyword overlap when no scores are given


@dataclass(frozen=True)
class Raw:
    """A JSON number written as ``text`` (``1e999``), which Python holds as ``value``."""

    text: str
    value: float


@dataclass(frozen=True)
class Request:
    """A select request, as one description every surface writes its own way.

    ``chunks``: texts (ids "0", "1", ...) or ``{"id": ..., "text": ...}`` dicts. ``options``:
    ``min_k`` / ``max_tokens`` as keyword options (Python keywords, CLI flags, HTTP ``options``);
    spec options go in ``method``. ``scores_lines``: the CLI writes --scores one number a line
    (else a JSON list). ``expand``: an expansion spec (Python's ``expand=``, ``--expand``, HTTP's ``expand``).
    """

    question: str
    chunks: tuple[Any, ...]
    method: str = "top-k@2"
    scores: tuple[Any, ...] | None = None
    options: tuple[tuple[str, Any], ...] = ()
    scores_lines: bool = False
    expand: str | None = None

    def cli_can_say(self) -> bool:
        """Whether the command line can write this request: a flag's value is text, so a keyword option
        that is a str (Python's "10" is not 10) has no CLI form, and an empty document is no chunk list."""
        if any(isinstance(v, str) or v is None for _, v in self.options):
            return False
        if any(
            isinstance(c, dict) and (not isinstance(c.get("text"), str) or set(c) - {"id", "text", "n_tokens"})
            for c in self.chunks
        ):
            return False  # a .jsonl line without a text string is the file's error, not the chunk's
        return bool(self.chunks) and all(isinstance(c, (str, dict)) for c in self.chunks)


@dataclass(frozen=True)
class Verdict:
    surface: str
    ids: tuple[str, ...] | None = None  # accepted: the selected ids, best first
    message: str = ""  # refused: what the user reads
    lines: int = 1  # refused on the command line: how many error lines it printed (a usage dump is more)

    @property
    def accepted(self) -> bool:
        return self.ids is not None

    @property
    def key(self) -> tuple[str, str]:
        return message_key(self.message)

    def same(self, other: Verdict) -> bool:
        if self.accepted or other.accepted:
            return self.ids == other.ids
        return self.key == other.key

    def __str__(self) -> str:
        return (
            f"{self.surface}: accepted {list(self.ids)}" if self.ids is not None else f"{self.surface}: {self.message}"
        )


class Crash(AssertionError):
    """A surface crashed: an exception that is no CtxselError, exit 1, a 500, or a traceback."""


# -- the message key -----------------------------------------------------------------------------

#: What a surface puts before the message proper: the flag or file it read (which names the field
#: when the rest does not), the spec it parsed.
_PREFIXES = [
    re.compile(r"^argument --(?P<flag>[a-z-]+): "),
    re.compile(r"^--(?P<flag>scores) \S+?(?::\d+)?: "),
    re.compile(r"^--(?P<flag>[a-z-]+): "),
    re.compile(r"^bad options for method '[^']*': "),
    re.compile(r"^method '[^']*': "),
    re.compile(r"^options\.[a-z_]+: "),
    re.compile(r"^chunks: "),
    re.compile(r"^\S+\.jsonl:\d+: "),  # the CLI's .jsonl document names the line before the chunk's own words
]
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[\d+\]|\.\d+)*(?=[\s:.,]|$)")
_FIELDS = {"question", "chunks", "scores", "min_k", "max_tokens", "k", "nan_policy", "method", "options"}


def message_key(message: str) -> tuple[str, str]:
    """(field, first clause) of a refusal: ``"max_tokens must be an integer, got 2.5: ..."`` ->
    ``("max_tokens", "must be an integer")``. Surface prefixes (``--max-tokens: ``, ``--scores FILE: ``,
    ``bad options for method 'top-k': ``) are dropped, and a flag names the field when the rest of the
    message does not; an index (``scores[0]``) is dropped; the clause ends at the first ``,:;(``."""
    text, flag = message.strip(), ""
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            m = p.match(text)
            if m:
                flag = (m.groupdict().get("flag") or flag).replace("-", "_")
                text, changed = text[m.end() :], True
    name = flag if flag in _FIELDS else ""
    m = _FIELD.match(text)
    if m and m.group(1) in _FIELDS:
        name = m.group(1)
        text = text[m.end() :].lstrip(" :")
    clause = re.split(r"[,:;(]", text, maxsplit=1)[0]
    return name, " ".join(clause.lower().split())


# -- how each surface writes a value --------------------------------------------------------------


def python_value(v: Any) -> Any:
    return v.value if isinstance(v, Raw) else v


def to_json(v: Any) -> str:
    """JSON text as a client could send it: NaN, Infinity and :class:`Raw` numbers (1e999) included."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(to_json(x) for x in v) + "]"
    return json.dumps(v)  # \\u escapes: a lone surrogate travels as a client would send it


def spec_text(v: Any) -> str:
    """A value as written in a spec or on the command line: ``5``, ``2.5``, ``nan``, ``true``."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


# -- the surfaces ----------------------------------------------------------------------------------


def via_python(req: Request) -> Verdict:
    """``ctxsel.select`` with the request's keyword options; a CtxselError is a refusal."""
    scores = None if req.scores is None else [python_value(v) for v in req.scores]
    chunks: Any = [dict(c) if isinstance(c, dict) else c for c in req.chunks]  # dicts too: a row of issue 45
    try:
        sel = ctxsel.select(
            req.question,
            chunks,
            req.method,
            scores,
            scorer=SCORER,
            expand=req.expand,
            **{k: python_value(v) for k, v in req.options},
        )
    except CtxselError as e:
        return Verdict("python", message=str(e))
    except Exception as e:
        raise Crash(f"python: {type(e).__name__}: {e}") from e
    return Verdict("python", ids=tuple(sel.ids))


def via_cli(req: Request, folder: Path) -> Verdict:
    """``ctxsel select --json`` in this process, the chunks as a .jsonl document and the scores as a
    file; exit 2 with one error line is a refusal, anything else but 0 a crash."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = folder / "chunks.jsonl"
    rows = [c if isinstance(c, dict) else {"id": str(i), "text": c} for i, c in enumerate(req.chunks)]
    doc.write_text("".join(to_json(r) + "\n" for r in rows), encoding="utf-8")
    argv = ["select", "--document", str(doc), f"--question={req.question}", f"--method={req.method}", "--json"]
    argv += ["--scorer", SCORER]
    if req.expand is not None:
        argv.append(f"--expand={req.expand}")
    if req.scores is not None:
        path = folder / "scores.txt"
        if req.scores_lines:
            path.write_text("".join(spec_text(v) + "\n" for v in req.scores), encoding="utf-8")
        else:
            path.write_text(to_json(list(req.scores)), encoding="utf-8")
        argv += ["--scores", str(path)]
    for k, v in req.options:
        argv.append(f"--{k.replace('_', '-')}={spec_text(v)}")
    rc, out, err = run_cli(argv)
    if "Traceback" in out + err:
        raise Crash(f"cli: a traceback: {err}")
    if rc == 0:
        return Verdict("cli", ids=tuple(json.loads(out)["ids"]))
    errors = [line for line in err.splitlines() if not line.startswith("ctxsel select: warning:")]
    if rc != 2 or not errors or not errors[-1].startswith("ctxsel select: error: "):
        raise Crash(f"cli: exit {rc}: {err}")
    return Verdict("cli", message=errors[-1].removeprefix("ctxsel select: error: "), lines=len(errors))


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``ctxsel ARGV`` in this process: exit code (argparse's SystemExit too), stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def http_body(req: Request) -> bytes:
    body: dict[str, Any] = {"question": req.question, "chunks": list(req.chunks), "method": req.method}
    if req.scores is not None:
        body["scores"] = list(req.scores)
    if req.options:
        body["options"] = dict(req.options)
    if req.expand is not None:
        body["expand"] = req.expand
    body["with_text"] = False
    return to_json(body).encode()


def via_http(req: Request, server: LoopbackServer) -> Verdict:
    """POST /select to a real uvicorn server; 422 is a refusal, any other error status a crash."""
    status, body = server.post("/select", http_body(req))
    if server.errors_logged():
        raise Crash(f"http: the server logged an error: {server.errors_logged()}")
    if status == 200:
        return Verdict("http", ids=tuple(body["ids"]))
    if status != 422 or "Traceback" in json.dumps(body):
        raise Crash(f"http: {status} {body}")
    return Verdict("http", message=body["message"])


# -- the server ------------------------------------------------------------------------------------


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@dataclass
class LoopbackServer:
    """The service app in a real uvicorn server on 127.0.0.1, in a thread of this process (its HTTP
    parser and the app's JSON reading are the ones ``ctxsel serve`` runs)."""

    port: int = 0
    _errors: _Errors = field(default_factory=_Errors)
    _conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        for attempt in range(2):  # a keep-alive connection the server closed: reconnect once
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self._conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                resp = self._conn.getresponse()
                data = resp.read()
                return resp.status, json.loads(data)
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def errors_logged(self) -> list[str]:
        out, self._errors.records[:] = list(self._errors.records), []
        return out


@contextlib.contextmanager
def loopback_server() -> Iterator[LoopbackServer]:
    """``create_app`` with the keyword scorer, served by uvicorn on a free loopback port."""
    import uvicorn

    from ctxsel.service import ServiceSettings, create_app
    from ctxsel.service.middleware import log

    app = create_app(ServiceSettings(scorer=SCORER, max_concurrency=4))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="differential-uvicorn", daemon=True)
    handle = LoopbackServer()
    log.addHandler(handle._errors)
    level = log.level
    log.setLevel(logging.ERROR)  # the request log stays quiet; errors are still seen
    thread.start()
    try:
        end = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > end or not thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            time.sleep(0.01)
        handle.port = server.servers[0].sockets[0].getsockname()[1]
        while app.state.service.status != "ok":  # the keyword scorer warms in a moment
            time.sleep(0.01)
        yield handle
    finally:
        if handle._conn is not None:
            handle._conn.close()
        server.should_exit = True
        thread.join(10)
        log.removeHandler(handle._errors)
        log.setLevel(level)


def disagreements(verdicts: list[Verdict]) -> list[tuple[Verdict, Verdict]]:
    """Pairs of surfaces whose verdicts differ (Python's is the reference)."""
    first = verdicts[0]
    return [(first, v) for v in verdicts[1:] if not first.same(v)]


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
