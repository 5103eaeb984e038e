"""The one door and the one chain, as the source shows them: the question's check and the chunks'
normalisation have exactly one caller in src (the Query), and the ranking chain has no wrapper
scorers left to take apart."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import SRC

PACKAGE = SRC / "ctxsel"


def callers(name: str, root: Path = PACKAGE) -> list[str]:
    """``file:line`` of every call of ``name`` (as a bare name or an attribute) under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called == name:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def test_the_query_is_the_one_caller_of_the_input_checks() -> None:
    assert [c.split(":")[0] for c in callers("check_question")] == ["ctxsel/query.py"]
    assert [c.split(":")[0] for c in callers("as_chunks")] == ["ctxsel/query.py"]


def test_no_wrapper_scorers_and_no_expansion_package() -> None:
    assert not (PACKAGE / "expansion").exists()
    text = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    assert "ExpandingScorer" not in text and "RerankingScorer" not in text


def test_the_finder_finds_a_call(tmp_path: Path) -> None:
    # the walk above must be able to fail: a call through an attribute counts too
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("import ctxsel.inputs as i\ni.check_question('q')\n\ncheck_question('q')\n")
    assert callers("check_question", pkg) == ["pkg/m.py:2", "pkg/m.py:4"]
