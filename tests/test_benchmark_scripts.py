"""Every benchmark module imports as part of the ``benchmarks`` package (they run outside the suite, so a
broken import or a typo would go unseen); ``make bench`` names modules that exist."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.support.paths import REPO

MODULES = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    if not name.startswith("_"):  # run as `python -m benchmarks.NAME`
        assert callable(module.main), name
        assert module.__doc__, f"{name}: its docstring says what it measures"


def test_the_benchmarks_are_found() -> None:
    assert len(MODULES) >= 10


def test_no_benchmark_edits_the_import_path() -> None:
    offenders = [p.name for p in (REPO / "benchmarks").glob("*.py") if "sys.path" in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_make_bench_runs_benchmark_modules() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    target = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    run = re.findall(r"-m benchmarks\.(\w+)", target)
    assert len(run) >= 8
    assert set(run) <= set(MODULES)
