"""Every benchmark script at least compiles (they run outside the suite, so a typo would go unseen)."""

from __future__ import annotations

import py_compile
from pathlib import Path

import pytest

from tests.support.paths import REPO

SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_compiles(script: Path, tmp_path: Path) -> None:
    py_compile.compile(str(script), cfile=str(tmp_path / "out.pyc"), doraise=True)


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 10
