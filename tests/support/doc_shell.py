"""Run the docs' shell blocks for real, in a sandbox a test can afford.

Each page's ``bash`` blocks run in order, line by line, in one scratch folder (so a policy
trained in one block is there for the block that uses it, as for a reader following the page).
What would take hours, a GPU or the network is made small, and *only* that -- the command,
its subcommand and every other flag stay as written:

- ``--dataset hotpotqa-long`` runs for real on the copy bundled in the package, on 2 questions
  (``--limit`` is at most 2, and is added where a command takes one); ``novelqa:path/to/NovelQA``
  reads the NovelQA fixture.
- Nothing outside the install is read: while a ``ctxsel`` command runs, an audit hook records every
  file it opens, and one inside the checkout but outside the package (or in a ``shared/`` folder
  beside it, where the HotpotQA file used to be found) fails the page.
- ``--document report.md`` (or any file the page assumes) is the bundled example document.
- Every reader -- ``--reader local`` or a server URL -- is a local OpenAI-compatible HTTP server
  that answers every JSON schema it is sent with a valid instance (the smallest one) and every
  free-form prompt with a short answer (the right one for the example dataset's and hotpotqa-long's questions): the methods' real clients, parsers and retries run, over
  HTTP, against a model that is not there.
- LDAR trains 2 steps; Context-Picker's GRPO one step a stage, on the tiny random model
  (``--base tiny``). ``ctxsel serve`` starts on a free port, answers ``/health``, and stops.
- ``python -m benchmarks.X ...`` or ``python -m experiments.X ...``: the module starts (``--help``) and
  takes every flag the line gives; running them is ``make bench`` or the experiment (minutes to hours).
- ``pip install 'ctxsel[extra]'``: the extra exists in pyproject.toml.

A line's optional parts in brackets run both ways. Lines that are comments or shell output (``# answer: ...``) are skipped; a block that cannot run
even so says why in ``<!-- not-run: ... -->`` just above it.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.metadata
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ctxsel.datasets.hotpotqa import bundled_hotpotqa_file
from tests.support.fake_server import FakeOpenAIServer, schema_responder
from tests.support.paths import REPO

EXAMPLE_DOC = REPO / "src" / "ctxsel" / "data" / "example.md"
NOVELQA = REPO / "tests" / "fixtures" / "novelqa"
#: the sandbox model knows the answers of the example dataset and of hotpotqa-long, so that mining keeps
#: questions as with a good reader; to anything else it answers "Edith Marlowe"
KNOWN = {
    **{
        d["question"]: d["answers"][0]
        for d in map(json.loads, (REPO / "src" / "ctxsel" / "data" / "example.jsonl").read_text().splitlines())
    },
    **{d["question"]: d["answer"] for d in json.loads(gzip.decompress(bundled_hotpotqa_file().read_bytes()))},
}


#: where a user's install has nothing: the checkout and a ``shared/`` folder beside it
WATCHED = (REPO, REPO.parent / "shared")
#: what a sandboxed command may read there: the package (an editable install is ``src/``), the virtual
#: environment, and the fixture the sandbox substitutes for a page's NovelQA folder
ALLOWED_IN_CHECKOUT = (REPO / "src", REPO / ".venv", NOVELQA)
_opened: list[str] | None = None  # the paths opened while a command runs (None: not recording)


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | bytes):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed: it records only inside `reads_nothing_outside`


@contextlib.contextmanager
def reads_nothing_outside(*allowed: Path) -> Iterator[None]:
    """Fail if the block opens a file in ``WATCHED`` that is not in ``ALLOWED_IN_CHECKOUT`` or ``allowed``
    (the page's scratch folder)."""
    global _opened
    _opened, roots = [], [*ALLOWED_IN_CHECKOUT, *allowed]
    try:
        yield
    finally:
        opened, _opened = _opened, None
    outside = sorted(
        {
            str(f)
            for f in (Path(p).resolve() for p in opened if p)
            if any(f.is_relative_to(w) for w in WATCHED)
            and not any(f.is_relative_to(r.resolve()) for r in roots)
            and not (f.suffix == ".py" and f.is_relative_to(REPO / "tests"))  # this harness's source: a
            # warning or a traceback shows its lines (linecache), which is no data a command reads
        }
    )
    assert not outside, f"read files outside the install: {outside[:5]}"


def _flag(words: list[str], name: str) -> int | None:
    return words.index(name) if name in words else None


def _set(words: list[str], name: str, value: str) -> None:
    i = _flag(words, name)
    if i is None:
        words += [name, value]
    else:
        words[i + 1] = value


def sandbox(words: list[str], reader_url: str) -> list[str]:
    """A ``ctxsel`` command line (after ``ctxsel``) made small; see the module docstring."""
    words = list(words)
    i = _flag(words, "--dataset")
    if i is not None:
        if words[i + 1].startswith("novelqa:"):
            words[i + 1] = f"novelqa:{NOVELQA}"
        elif words[i + 1] != "hotpotqa-long":
            words[i + 1] = "example"
        elif words[0] in ("eval", "mine"):  # the commands that take --limit
            _set(words, "--limit", "2")
    i = _flag(words, "--document")
    if i is not None:
        words[i + 1] = str(EXAMPLE_DOC)
    i = _flag(words, "--limit")
    if i is not None:
        words[i + 1] = str(min(2, int(words[i + 1])))
    if words[0] == "answer" and "--reader" not in words:  # its default reader is the local model
        words += ["--reader", "local"]
    i = _flag(words, "--reader")
    if i is not None:
        words[i + 1] = f"{reader_url}/v1"
        _set(words, "--reader-model", "sandbox")
        for local_only in ("--llm-threads", "--n-ctx"):
            j = _flag(words, local_only)
            if j is not None:
                del words[j : j + 2]
    if words[:2] == ["train", "ldar"]:
        _set(words, "--steps", "2")
    if words[:2] in (
        ["train", "context-picker"],
        ["train", "picker"],
    ):  # GRPO on the tiny random model: one step a stage
        _set(words, "--base", "tiny")
        _set(words, "--stage1-max-steps", "1")
        _set(words, "--stage2-steps", "1")
    return words


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


def command_lines(body: str) -> list[str]:
    """A block's commands: continuation lines joined, comments and shell output dropped."""
    lines, cur = [], ""
    for raw in body.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        cur = (cur + " " + line.rstrip("\\").strip()).strip() if cur else line.rstrip("\\").strip()
        if line.endswith("\\"):
            continue
        if cur:
            lines.append(cur)
        cur = ""
    return lines


class Sandbox:
    """One page's scratch folder and sandbox model; :meth:`run` runs one command line."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.server = FakeOpenAIServer(responder=schema_responder(KNOWN, default="Edith Marlowe"))

    def __enter__(self) -> Sandbox:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def run(self, line: str) -> None:
        """Run ``line``; a line with optional parts (``[--json]``, ``[--reader local | URL ...]``)
        runs twice: without them (in a folder of its own) and with each one's first alternative."""
        optional = re.compile(r"\s\[(--[^\]]*)\]")
        if optional.search(line):
            here, self.cwd = self.cwd, Path(tempfile.mkdtemp(dir=self.cwd, prefix="plain-"))
            try:
                self.run(optional.sub("", line))
            finally:
                self.cwd = here
            line = optional.sub(lambda m: " " + m[1].split(" | ")[0], line)
        env, words = _split_env(shlex.split(line.replace('"..."', '"Who built the main telescope?"')))
        prog = Path(words[0]).name
        if prog == "ctxsel" and words[1:2] == ["serve"]:
            return self._serve(words[2:], env)
        if prog == "ctxsel":
            self._ctxsel(sandbox(words[1:], self.server.base_url), line)
            return None
        if prog == "python" and words[1:2] == ["-m"] and words[2].startswith(("benchmarks.", "experiments.")):
            return self._benchmark(words[2], words[3:], env)
        if words[:2] == ["pip", "install"]:
            extras = importlib.metadata.metadata("ctxsel").get_all("Provides-Extra") or []
            for spec in words[2:]:
                extra = re.fullmatch(r"ctxsel\[([\w,-]+)\]", spec)
                assert extra and set(extra[1].split(",")) <= set(extras), f"{line}: no such extra"
            return None
        raise AssertionError(f"the docs sandbox cannot run `{line}`: mark its block <!-- not-run: why -->")

    def output(self, line: str) -> str:
        """What the ``ctxsel`` command ``line`` prints on stdout, sandboxed as :meth:`run` runs it."""
        words = shlex.split(line)
        assert Path(words[0]).name == "ctxsel", f"a console block shows ctxsel commands only: `{line}`"
        return self._ctxsel(sandbox(words[1:], self.server.base_url), line)

    def _ctxsel(self, argv: list[str], line: str) -> str:
        from ctxsel.cli.main import main

        out, err, here = io.StringIO(), io.StringIO(), Path.cwd()
        os.chdir(self.cwd)
        try:
            with (
                reads_nothing_outside(self.cwd),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                rc = main([*argv, *(["--no-progress"] if argv[0] in ("eval", "mine") else [])])
        finally:
            os.chdir(here)
        assert rc == 0, f"`{line}` (sandboxed: ctxsel {shlex.join(argv)}) exited {rc}: {err.getvalue()[-2000:]}"
        return out.getvalue()

    def _serve(self, args: list[str], env: dict[str, str]) -> None:
        from tests.support.server_process import ServerProcess

        i = _flag(args, "--port")
        if i is not None:
            del args[i : i + 2]
        token = env.get("CTXSEL_SERVE_TOKEN")
        with ServerProcess(args, token=token) as srv:
            status, _, body = srv.request("GET", "/health")
            assert status == 200, body

    def _benchmark(self, script: str, args: list[str], env: dict[str, str]) -> None:
        sub = args[:1] if args and not args[0].startswith("-") else []  # a subcommand has its own flags
        out = subprocess.run(
            [sys.executable, "-m", script, *sub, "--help"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **env},
            timeout=120,
        )
        assert out.returncode == 0, f"{script} --help: {out.stderr[-2000:]}"
        for flag in (w.split("=", 1)[0] for w in args if w.startswith("--")):
            assert flag in out.stdout, f"{script} has no flag {flag}"
