"""The documentation is checked like code.

- The site builds offline with ``mkdocs build --strict`` (no warning: no broken link, no missing
  page, no docstring mkdocstrings cannot read).
- Every fenced code block in README.md and docs/ runs: ``python`` blocks as written, ``bash``
  blocks line by line in the sandbox of ``tests/support/doc_shell.py`` (the example dataset for hotpotqa-long,
  an HTTP model that answers every reply format for ``--reader``, 2 training steps). A block that
  cannot run even so says why in an HTML comment just above it: ``<!-- not-run: the reason -->``;
  a ``python`` block marked ``<!-- after-shell -->`` runs after its page's commands, in their folder,
  and one marked ``<!-- slow -->`` (a local model) runs with the tests marked slow.
- What a page shows a command printing is checked against what it prints: a ``pycon`` block runs as a
  doctest, a ``console`` block's ``$ ctxsel ...`` lines run in the sandbox and their stdout must match
  the lines under them (``...`` stands for any text, as in doctest). Either failure shows both values.
- Numbers from a measurement sit in ``<!-- results: NAME -->`` blocks rendered from
  ``benchmarks/results`` (``tests/support/doc_results.py``); a block that differs fails with both.
- Every relative link in README.md names a file that exists, and its ``#anchor`` a heading there (the
  strict site build checks the same for docs/).
- docs/reference/cli.md is the CLI's own ``--help``, docs/reference/http.md the service's OpenAPI
  document: ``python -m tests.test_docs`` regenerates both, and every results block.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"(?:<!-- (?P<mark>[a-z-]+)(?::(?P<why>[^>]*))? -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
#: blocks that other tests run against live servers or real frameworks (their own test names them)
RUN_ELSEWHERE = {"readme-test", "after-shell", "slow"}


@pytest.fixture(autouse=True, scope="module")
def float32_vectors() -> Iterator[None]:
    """The pages show float32 vectors' outputs, the same on every CPU: ``CTXSEL_INT8=off`` keeps
    ``backend=auto`` off the int8 routes, whose kernels differ between CPUs (docs/guide/install.md)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXSEL_INT8", "off")
        yield


def blocks(lang: str, mark: str | None = None) -> list[tuple[str, str]]:
    """``(page[i], body)`` of the ``lang`` blocks with ``mark`` (None: the unmarked ones)."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for i, m in enumerate(FENCE.finditer(text)):
            if m["lang"] != lang or m["mark"] == "not-run":
                continue
            if (m["mark"] == mark) if mark else m["mark"] not in RUN_ELSEWHERE:
                out.append((f"{page.relative_to(REPO)}[{i}]", m["body"]))
    return out


PYTHON_BLOCKS = [
    *blocks("python"),
    *(pytest.param(w, b, marks=pytest.mark.slow, id=w) for w, b in blocks("python", mark="slow")),
]


@pytest.mark.parametrize(("where", "body"), PYTHON_BLOCKS)
def test_python_blocks_run(where: str, body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxsel import selectors, stages

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(selectors, "_REGISTRY", dict(selectors._REGISTRY))  # a page's register_method stays here
    monkeypatch.setattr(stages, "_STAGES", dict(stages._STAGES))  # and its register_stage
    page = types.ModuleType("__docs__")  # a module, as a user's script is one (dataclasses look theirs up)
    monkeypatch.setitem(sys.modules, "__docs__", page)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(body, where, "exec", dont_inherit=True), page.__dict__)


DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize(("where", "body"), blocks("pycon"))
def test_pycon_blocks_print_what_they_show(
    where: str, body: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "docs-cache"))  # models built once
    page = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", page)
    test = doctest.DocTestParser().get_doctest(body, page.__dict__, where, where, 0)
    runner, report = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS), io.StringIO()
    runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()  # doctest's report: the line, Expected and Got


def console_examples(body: str) -> list[tuple[str, str]]:
    """A console block's ``(command, expected stdout)`` pairs: ``$ `` lines and the lines under them."""
    pairs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        else:
            assert pairs, f"console block starts with output, not a `$ ` command: {line!r}"
            pairs[-1][1].append(line)
    return [(cmd, "\n".join(out).strip() + "\n") for cmd, out in pairs]


@pytest.mark.parametrize(("where", "body"), blocks("console"))
def test_console_blocks_print_what_they_show(
    where: str, body: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.doc_shell import Sandbox

    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "docs-cache"))
    monkeypatch.setattr(sys, "argv", ["ctxsel"])
    checker = doctest.OutputChecker()
    with Sandbox(tmp_path) as box:
        for command, want in console_examples(body):
            got = box.output(command)
            assert checker.check_output(want, got, DOCTEST_FLAGS), (
                f"{where}: `{command}`\nthe page shows:\n{want}\nthe command prints:\n{got}"
            )


def test_results_blocks_are_their_results() -> None:
    from tests.support.doc_results import drift

    problems = [p for page in PAGES for p in drift(page)]
    assert not problems, "\n".join(problems) + "\nregenerate: python -m tests.test_docs"


def test_a_hand_edited_number_fails_with_both_values(tmp_path: Path) -> None:
    from tests.support.doc_results import RENDERERS, drift

    table = RENDERERS["scorers"]()
    edited = table.replace("96.0 [93.5, 98.5]", "96.1 [93.5, 98.5]", 1)
    assert edited != table, "the example number is no longer in the table: pick another"
    page = tmp_path / "edited.md"
    page.write_text(f"<!-- results: scorers -->\n{edited}<!-- /results -->\n", encoding="utf-8")
    (message,) = drift(page)
    assert "96.1 [93.5, 98.5]" in message and "96.0 [93.5, 98.5]" in message


def test_the_readme_and_results_stay_a_page_each() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    results = (REPO / "docs" / "results.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 100, f"README.md has {len(readme)} lines: at most 100"
    assert len(results) <= 300, f"docs/results.md has {len(results)} lines: at most 300"
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    archive = nav.index("  - Archive:")
    logs = [m.start() for m in re.finditer(r"(results-log|-runs)\.md", nav)]
    assert logs and min(logs) > archive, "the runs logs belong under Archive in mkdocs.yml's nav, nowhere else"


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_the_readmes_links_and_anchors_resolve() -> None:
    from markdown.extensions.toc import slugify

    readme = REPO / "README.md"
    missing = []
    for target in LINK.findall(readme.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (readme.parent / path) if path else readme
        if not file.exists():
            missing.append(target)
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)
            if anchor not in {slugify(h.strip(), "-") for h in headings}:
                missing.append(target)
    assert not missing, f"README.md links to what is not there: {missing}"


SHELL_PAGES = sorted({w.split("[")[0] for w, _ in blocks("bash")})


@pytest.mark.slow  # every command of a page, sandboxed: seconds to a minute a page
@pytest.mark.parametrize("page", SHELL_PAGES)
def test_shell_blocks_run(
    page: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.doc_shell import Sandbox, command_lines

    # one embedding cache for every page: the example document and hotpotqa-long's pool are embedded once
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "docs-cache"))
    monkeypatch.delenv("CTXSEL_HOTPOTQA", raising=False)  # hotpotqa-long from the package alone
    monkeypatch.setattr(sys, "argv", ["ctxsel"])
    with Sandbox(tmp_path) as box:
        for where, body in blocks("bash"):
            if where.startswith(page + "["):
                for line in command_lines(body):
                    box.run(line)
    # python blocks that read what the commands wrote (a trained policy), run where they wrote it
    monkeypatch.chdir(tmp_path)
    for where, body in blocks("python", mark="after-shell"):
        if where.startswith(page + "["):
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(body, where, "exec"), {"__name__": "__docs__"})


def test_the_sandbox_fails_a_command_that_reads_outside_the_install(tmp_path: Path) -> None:
    from tests.support.doc_shell import reads_nothing_outside

    with reads_nothing_outside(tmp_path):  # the package and the page's scratch folder are fine
        (REPO / "src" / "ctxsel" / "data" / "example.md").read_bytes()
        (tmp_path / "x").write_text("x")
    with (
        pytest.raises(AssertionError, match=r"outside the install: \['.*README.md'\]"),
        reads_nothing_outside(tmp_path),
    ):
        (REPO / "README.md").read_bytes()


def cli_reference() -> str:
    """docs/reference/cli.md: each command's --help, as the installed CLI prints it."""
    env = {**os.environ, "COLUMNS": "100"}
    parts = [
        "# Command line\n\nEvery command's `--help`, generated from the parser "
        "(`python -m tests.test_docs` rewrites this page).\n"
    ]
    commands = [
        "",
        "select",
        "answer",
        "eval",
        "train ldar",
        "train context-picker",
        "mine",
        "env",
        "make-holo",
        "serve",
    ]
    for cmd in commands:
        argv = [sys.executable, "-m", "ctxsel.cli.main", *cmd.split(), "--help"]
        text = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
        text = text.replace(Path(sys.executable).name, "ctxsel").replace("main.py", "ctxsel")
        parts.append(
            f"\n## ctxsel {cmd}\n\n```text\n{text.rstrip()}\n```\n" if cmd else f"\n```text\n{text.rstrip()}\n```\n"
        )
    return "".join(parts)


def http_reference() -> str:
    """docs/reference/http.md: the service's endpoints and schemas, from its own OpenAPI document."""
    from ctxsel.service import ServiceSettings, create_app

    api = create_app(ServiceSettings(scorer="keywords")).openapi()
    schemas = api["components"]["schemas"]

    def kind(prop: dict) -> str:
        if "$ref" in prop:
            return prop["$ref"].rsplit("/", 1)[-1]
        if "anyOf" in prop:
            return " or ".join(kind(p) for p in prop["anyOf"])
        if prop.get("type") == "array":
            return f"list of {kind(prop.get('items', {}))}"
        if "enum" in prop:
            return " / ".join(f"`{v}`" for v in prop["enum"])
        if "const" in prop:
            return f"`{prop['const']}`"
        return str(prop.get("type", "any"))

    out = [
        "# HTTP API\n\n`ctxsel serve` answers these endpoints (generated from the server's own OpenAPI "
        "document, which it serves at `/openapi.json`; `python -m tests.test_docs` rewrites this page).\n",
        connection_limits(),
    ]
    for path, ops in api["paths"].items():
        for method, op in ops.items():
            out.append(
                f"\n## {method.upper()} {path}\n\n{(op.get('description') or op.get('summary') or '').strip()}\n"
            )
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                out.append(f"\nRequest body: `{kind(body)}`.\n")
            out.append("\n| status | meaning |\n|---|---|\n")
            for code, resp in op["responses"].items():
                out.append(f"| {code} | {resp.get('description', '').replace('|', '/')} |\n")
    for name in sorted(schemas):
        sch = schemas[name]
        out.append(f"\n## {name}\n\n")
        if sch.get("description"):
            out.append(" ".join(sch["description"].split()) + "\n\n")
        out.append("| field | type | required | meaning |\n|---|---|---|---|\n")
        required = set(sch.get("required", []))
        for field, prop in sch.get("properties", {}).items():
            desc = " ".join(str(prop.get("description", "")).split()).replace("|", "/")
            out.append(f"| `{field}` | {kind(prop)} | {'yes' if field in required else ''} | {desc} |\n")
    return "".join(out)


def connection_limits() -> str:
    """The limits on a request's headers, body and timing (hand-written; the values are ServiceSettings')."""
    from ctxsel.service import ServiceSettings

    d = ServiceSettings(scorer="keywords")
    rows = [
        ("headers", f"at most {d.max_headers:,} (`--max-headers`)", "431 `headers_too_large`"),
        (
            "request target and header names and values",
            f"at most {d.max_header_bytes:,} bytes together (`--max-header-bytes`); a header section still "
            f"incomplete past {2 * d.max_header_bytes:,} bytes is refused as it arrives, on either HTTP parser",
            "431 `headers_too_large`, connection closed",
        ),
        (
            "body",
            f"at most {d.max_body_bytes:,} bytes (`--max-body-bytes`), by Content-Length or as it streams",
            "413 `body_too_large`, connection closed",
        ),
        (
            "body arrival",
            f"the whole body within {d.body_timeout_s:g} s of the headers (`--body-timeout`); it is read before "
            "the request takes a concurrency slot, so a slow client holds its connection, never a slot",
            "408 `body_timeout`, connection closed",
        ),
        (
            "bodies held at once",
            "`--max-body-bytes` x (`--max-concurrency` + `--max-queue`) bytes of bodies read or waiting",
            "503 `overloaded` with Retry-After",
        ),
        ("HTTP that does not parse", "-", "400 `bad_request` in the same JSON shape, connection closed"),
    ]
    table = "".join(f"| {a} | {b} | {c} |\n" for a, b, c in rows)
    return (
        "\n## Limits of a request\n\nChecked before any route runs, in this order: headers, token, body, "
        "readiness, concurrency slot. Every refusal is the JSON error `{error, message, status, request_id}`; "
        "one sent before the body was read (401, 413, 431) reads and drops what the client still sends "
        "(up to 64 MiB, while it keeps coming) before closing, so a client that sends its whole body "
        "before reading (Python's urllib) reads the status. A 502 from `/answer` says how the reader "
        "failed, never where it is.\n\n| what | limit (server flag) | past it |\n|---|---|---|\n" + table
    )


def options_reference() -> str:
    """docs/reference/options.md: every method's and stage's options, from their declarations."""
    from ctxsel.options import declared, option_table
    from ctxsel.selectors import available_methods, get_selector_class
    from ctxsel.stages import available_stages, stage_class

    out = [
        "# Options\n\n",
        "Generated from each method's and stage's declared options (`ctxsel.options`): regenerate with "
        "`python -m tests.test_docs`. Every surface (Python keywords, spec options such as `top-k[k=3]`, "
        "HTTP `options`) checks a value by the rule its type names: an integer is a whole number "
        "(`5.0` and `1e3` are whole, `2.5` is not), a number is finite, `true or false` is a boolean and "
        "nothing else. An option that does not apply to the configuration chosen is refused with the "
        "reason. Options marked *server* change the whole process: a request to the service cannot set "
        "them (the flag named sets them for the server).\n\n",
        "## Every method: the common options\n\n",
    ]

    def table(cls: Any, skip: set[str]) -> list[str]:
        rows = [r for r in option_table(cls) if r["option"] not in skip]
        if not rows:
            return ["No options.\n\n"]
        flags = {n: i.server_flag for n, i in declared(cls).items()}
        lines = ["| option | value | default | what it does |\n", "| --- | --- | --- | --- |\n"]
        for r in rows:
            server = f" *server: {flags[r['option']]}*" if flags.get(r["option"]) else ""
            value = r["value"].replace("|", "/")
            lines.append(f"| `{r['option']}` | {value} | `{r['default']}` | {r['doc']}{server} |\n")
        return [*lines, "\n"]

    from ctxsel.options import CommonOptions

    out += table(CommonOptions, set())
    common = set(declared(CommonOptions))
    out.append("## Methods\n\n")
    for name, info in sorted(available_methods().items()):
        out.append(f"### `{name}`\n\n{info.summary}\n\n" if info.summary else f"### `{name}`\n\n")
        out += table(get_selector_class(name).Options, common)
    out.append("## Stages\n\n")
    for name, stage in sorted(available_stages().items()):
        out.append(f"### `{name}`\n\n{stage.summary}\n\n")
        out += table(stage_class(name), set())
    return "".join(out).rstrip("\n") + "\n"


def test_the_options_reference_is_the_declarations() -> None:
    page = REPO / "docs" / "reference" / "options.md"
    assert page.read_text(encoding="utf-8") == options_reference(), "regenerate: python -m tests.test_docs"


def test_the_http_reference_is_the_servers_schema() -> None:
    pytest.importorskip("fastapi")
    page = REPO / "docs" / "reference" / "http.md"
    assert page.read_text(encoding="utf-8") == http_reference(), "regenerate: python -m tests.test_docs"


@pytest.mark.slow  # ten interpreters
def test_the_cli_reference_is_the_cli_help() -> None:
    page = REPO / "docs" / "reference" / "cli.md"
    assert page.read_text(encoding="utf-8") == cli_reference(), "regenerate: python -m tests.test_docs"


@pytest.mark.slow  # about 5 s
def test_the_site_builds_strict_with_no_warning(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8").count("Pipeline") > 3


if __name__ == "__main__":
    from tests.support.doc_results import render

    for doc in PAGES:
        text = doc.read_text(encoding="utf-8")
        if render(text) != text:
            doc.write_text(render(text), encoding="utf-8")
    (REPO / "docs" / "reference" / "cli.md").write_text(cli_reference(), encoding="utf-8")
    (REPO / "docs" / "reference" / "http.md").write_text(http_reference(), encoding="utf-8")
    (REPO / "docs" / "reference" / "options.md").write_text(options_reference(), encoding="utf-8")
