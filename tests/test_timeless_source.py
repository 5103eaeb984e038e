"""Comments and docstrings under src/ctxsel say what the code does and why, never what one run measured.

A date, a machine's name, a run's count or a duration measured on one machine is true of that run only,
and goes stale without anything failing: such a sentence belongs in docs/ or benchmarks/results/, and
the source keeps the reason (``far cheaper than building model instances``) and a pointer to the
benchmark that measures it. This test reads every .py file under src/ctxsel: comments with
``tokenize``, docstrings with ``ast`` (those of modules, classes and functions, and any other bare
string statement, such as an attribute's docstring: none of them is a value the code uses). String
literals the code uses (messages, help texts) are code, not checked here. Only .py files are read:
``src/ctxsel/data/ldar/MODEL_CARD.md`` and the other model cards are data, written by the command that
made the artefact, and may carry the date it was made.

The rules (:func:`offences`), each over one line of a comment or docstring:

- a date: ``20YY-MM`` (``2026-11-28``), anywhere in the line;
- a measured duration: a number followed by a time unit, ``ms``, ``µs``, ``us``, ``sec``, ``secs``,
  ``second(s)``, ``min(s)``, ``minute(s)``, ``hour(s)``, with or without a space (``40 ms``, ``~40ms``,
  ``1.2 ms``, ``3 seconds``); the one-letter units ``s`` and ``h`` only after a space or a decimal
  number (``2 s``, ``1.5s``), so that plurals of numbers (HTTP's ``401s``, ``the 1990s``) do not
  count. The number must start a word, so a name that holds digits (``bm25s``, ``top-5s``) is none;
- a measured rate: a number and a unit per second (``284 requests/s``, ``3 passages per second``),
  or a speed-up (``4x faster``);
- a run's count: ``N of M`` with both numbers written out (``18 of 37 replies``);
- a machine's name: Xeon, EPYC, Ryzen, H100, H200, A100, V100, A10G (any case).

Code spans are left out before the duration, rate and count rules are applied: text between double
backticks (``timeout_s=30``) or single ones (`ctxsel serve --deadline 30`) is code, whose numbers are
settings, not measurements. The date and machine rules read the whole line, code spans included.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.support.paths import SRC

PACKAGE = SRC / "ctxsel"

DATE = re.compile(r"(?<![0-9])20[0-9]{2}-[0-9]{2}")
#: a number that starts a word: not the digits inside ``bm25s`` or after the dash of ``top-5s``
_NUMBER = r"(?<![\w.\-])\d(?:[\d,.]*\d)?"
DURATION = re.compile(
    _NUMBER + r"(?:\s?(?:ms|µs|us|secs?|seconds?|mins?|minutes?|hours?)\b|\s(?:s|h)\b)"
    r"|(?<![\w.\-])\d+\.\d+(?:s|h)\b"
)
RATE = re.compile(_NUMBER + r"\s?(?:[A-Za-z]+/s\b|[A-Za-z]+ per second\b|x (?:faster|slower)\b)")
RUN_COUNT = re.compile(r"(?<![\w.\-])\d+ of \d+\b")
MACHINE = re.compile(r"\b(?:xeon|epyc|ryzen|h100|h200|a100|v100|a10g)\b", re.IGNORECASE)
CODE_SPAN = re.compile(r"``.*?``|`[^`]*`")

RULES: list[tuple[str, re.Pattern[str], bool]] = [
    # (name, pattern, whether it reads code spans too)
    ("date", DATE, True),
    ("duration", DURATION, False),
    ("rate", RATE, False),
    ("run count", RUN_COUNT, False),
    ("machine", MACHINE, True),
]


def offences(line: str) -> list[str]:
    """``"rule: matched text"`` for each rule that ``line`` (one line of a comment or docstring) breaks."""
    prose = CODE_SPAN.sub(" ", line)
    out = []
    for name, pattern, whole_line in RULES:
        m = pattern.search(line if whole_line else prose)
        if m:
            out.append(f"{name}: {m.group(0)!r}")
    return out


def comment_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line of ``path``'s comments and docstrings."""
    source = path.read_text(encoding="utf-8")
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            # a docstring, or a bare string statement (an attribute's docstring): never a value the code uses
            out += [(node.lineno + i, text) for i, text in enumerate(node.value.value.splitlines())]
    return sorted(out)


def source_files() -> list[Path]:
    """Every .py file under src/ctxsel (model cards and other data files are not read)."""
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize(
    "text",
    [
        "BM25 is fast: about 2 s for 100k short chunks.",
        "(1000 chunks: 0.6 against 1.2 ms, benchmarks/serve_load.py)",
        "every keep-alive response waited ~40 ms for the ACK",
        "every keep-alive response waited ~40ms for the ACK",
        "the thread hop costs about 0.3 ms of CPU",
        "the export took 3 seconds",
        "a stage ran for 2.5h",
        "a step took 90 s",
        "one reply ran for 12 minutes",
        "measured on 2026-11-28 at night",
        "on one H100",
        "an Intel(R) Xeon(R) Processor",
        "about 80 ms of cl100k",
        "284 requests/s on 2 cores",
        "about 4x faster than json.loads",
        "the 1.5B opened a code fence in 18 of 37 replies",
        "a date in a code span is still a date: ``2026-11-28``",
    ],
)
def test_the_rules_catch_measurements(text: str) -> None:
    assert offences(text), text


@pytest.mark.parametrize(
    "text",
    [
        "BM25 relevance with bm25s (numpy only)",
        "the top-5s of two runs",
        "every request is logged (401s, 413s and 503s included)",
        "tables from the 1990s",
        "a timeout, ``timeout_s=30``, per attempt",
        "``ctxsel serve --deadline 30 s``",
        "`ctxsel serve --deadline 30 s`",
        "Zhu et al., arXiv 2512.14465, Sec. 3.3",
        "grown 8x up to N/8, the top 5 chunks, 5k tokens",
        "ids s00000, s00001 ... in context order",
        "a request carries up to 1,000 chunks; the I-th of N parts",
        "``seconds`` (a float) and ``select_ms``",
        "Qwen2.5-Coder-1.5B-Instruct, Gemma 3 270M",
        "a 2-core machine, 0.5 CPU per actor, 25 % jitter, 95% interval",
    ],
)
def test_the_rules_spare_ordinary_text(text: str) -> None:
    assert offences(text) == [], text


def test_the_reader_finds_comments_and_docstrings(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        '"""Module: took 3 s."""\n'
        "X = 1  # a comment: 40 ms\n"
        'Y = "a value: 50 ms"\n'
        '"""Y\'s docstring: 2026-11-28."""\n'
        "def f() -> None:\n"
        '    """First line.\n\n    Third line: one H100."""\n',
        encoding="utf-8",
    )
    found = {(n, text) for n, text in comment_lines(path) if offences(text)}
    assert {n for n, _ in found} == {1, 2, 4, 8}, found


def test_no_comment_or_docstring_carries_a_measurement() -> None:
    files = source_files()
    assert len(files) > 50, "src/ctxsel should be found"
    bad = [
        f"{path.relative_to(SRC.parent)}:{n}: {'; '.join(found)}: {text.strip()}"
        for path in files
        for n, text in comment_lines(path)
        if (found := offences(text))
    ]
    assert not bad, (
        "a date, a machine's name, a run's count or a measured duration in a comment or docstring "
        "(say why instead, and put the number in docs/ or benchmarks/results/):\n" + "\n".join(bad)
    )
