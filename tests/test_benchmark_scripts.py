"""Every benchmark and experiment module imports as part of its package, ``benchmarks`` (speed) or
``experiments`` (quality; they run outside the suite, so a broken import or a typo would go unseen); each
room's README lists its modules; ``make bench`` names modules that exist."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.support.paths import REPO

ROOMS = ("benchmarks", "experiments")
MODULES = {room: sorted(p.stem for p in (REPO / room).glob("*.py") if p.stem != "__init__") for room in ROOMS}


@pytest.mark.parametrize("name", [f"{room}.{m}" for room in ROOMS for m in MODULES[room]])
def test_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(name)
    if not name.split(".")[1].startswith("_"):  # run as `python -m ROOM.NAME`
        assert callable(module.main), name
        assert module.__doc__, f"{name}: its docstring says what it measures"


def test_the_benchmarks_are_found() -> None:
    assert len(MODULES["benchmarks"]) >= 10 and len(MODULES["experiments"]) >= 10


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_lists_its_modules(room: str) -> None:
    """benchmarks/README.md and experiments/README.md name every module of their room, and no module of the
    other room as theirs (a moved script leaves no stale row)."""
    readme = (REPO / room / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(\w+)` \|", readme, re.M)) | set(re.findall(r"^\*\*`(\w+)`\*\*", readme, re.M))
    mine = {m for m in MODULES[room] if not m.startswith("_")}
    assert mine - listed == set()
    other = next(r for r in ROOMS if r != room)
    assert listed & set(MODULES[other]) == set()


def test_no_benchmark_edits_the_import_path() -> None:
    offenders = [
        p.name for room in ROOMS for p in (REPO / room).glob("*.py") if "sys.path" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_make_bench_runs_benchmark_modules() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    target = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    run = re.findall(r"-m benchmarks\.(\w+)", target)
    assert len(run) >= 8
    assert set(run) <= set(MODULES["benchmarks"])
    assert set(re.findall(r"-m experiments\.(\w+)", makefile)) <= set(MODULES["experiments"])


#: what a benchmark that writes into the package's source looks like: the generated sha256 tables of the
#: past (bundled.py rewritten by a regex), paths built into src/, or the package's own data folders
WRITES_INTO_SRC = re.compile(
    r"bundled\.py|write_sha_table|BUNDLED_PY|_SHA256\.(?:update|clear)|\bROOT\s*/\s*\"src\"|PACKAGE_ROOT"
    r"|smooth_amax_path\(\)|files\(\"ctxsel\"\)"
)


def test_no_benchmark_writes_into_the_package() -> None:
    """The release steps write where their command says (``make ldar-policy`` passes ``--bundle
    src/ctxsel/data/ldar``): no benchmark defaults to, or special-cases, a folder of src/, and none
    rewrites a module; ctxsel.bundled reads each artefact's manifest.json."""
    import ast

    offenders = []
    for path in sorted(p for room in ROOMS for p in (REPO / room).glob("*.py")):
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.name}: {m.group(0)}" for m in WRITES_INTO_SRC.finditer(text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for kw in node.keywords:
                    if kw.arg == "default" and re.search(
                        r"\bsrc\b|package_folder|PACKAGE_ROOT|bundled\.get", ast.unparse(kw.value)
                    ):
                        offenders.append(f"{path.name}: {ast.unparse(node)[:80]}")
    assert offenders == []
    bundled_py = (REPO / "src" / "ctxsel" / "bundled.py").read_text(encoding="utf-8")
    assert "generated" not in bundled_py and "_SHA256: dict" not in bundled_py


#: The largest results file a results folder holds by design (the LDAR training curves, a few hundred KB);
#: a run log of a long table is megabytes.
MAX_RESULTS_FILE = 600_000


def _tracked(folder: str) -> list[str]:
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", folder], cwd=REPO, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def test_no_run_log_is_committed_under_the_results() -> None:
    """Results folders keep summaries (tables, examples.csv); per-example run logs (results.jsonl, the LLM
    response caches) stay in runs/, and .gitignore keeps them out."""
    tracked = _tracked("benchmarks/results")
    assert len(tracked) > 50
    logs = [p for p in tracked + _tracked("experiments") if p.endswith((".jsonl", ".sqlite"))]
    assert logs == []
    big = [p for p in tracked if (REPO / p).is_file() and (REPO / p).stat().st_size > MAX_RESULTS_FILE]
    assert big == []
    ignore = (REPO / ".gitignore").read_text(encoding="utf-8")
    assert "benchmarks/results/**/*.jsonl" in ignore


def test_every_kept_run_has_its_summary() -> None:
    """Each folder of kept runs holds examples.csv (the numbers its table is rebuilt from), without texts."""
    summaries = [p for p in _tracked("benchmarks/results") if p.endswith("/examples.csv")]
    assert len(summaries) >= 7
    for p in summaries:
        header = (REPO / p).read_text(encoding="utf-8").split("\n", 1)[0].split(",")
        assert header[:2] == ["example_id", "method"], p
        assert not {"answer", "ids", "gold_ids", "explanation", "trace", "rationale", "question"} & set(header), p
