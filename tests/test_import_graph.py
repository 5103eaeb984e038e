"""The import graph of src/ctxsel stays a pyramid: no cycles, and no layer imports one above it.

Read from the source (ast), not by importing: every ``import`` counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:`` (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import SRC

#: layer of each top-level part of the package, top (0) to bottom; a module may import its own
#: layer and those below it. cli -> service/eval/integrations -> pipeline -> selectors/train
#: -> datasets/reader -> llm/scoring/expansion -> the core types and helpers. A part's packages
#: share its layer: train.ldar and train.context_picker are "train", beside selectors.ldar and
#: selectors.context_picker.
LAYERS: dict[str, int] = {
    "cli": 0,
    "service": 1,
    "eval": 1,
    "integrations": 1,
    "pipeline": 2,
    "__init__": 2,
    "api": 2,
    "client": 2,
    "selectors": 3,
    "stages": 3,
    "train": 3,
    "rewards": 3,
    "ranking": 4,
    "datasets": 4,
    "reader": 4,
    "judge": 4,
    "grading": 4,
    "chunking": 4,
    "llm": 5,
    "scoring": 5,
    "types": 6,
    "query": 6,
    "inputs": 6,
    "specs": 6,
    "options": 6,
    "tokens": 6,
    "metrics": 6,
    "paths": 6,
    "bundled": 6,
    "sqlite_store": 6,
    "_version": 6,
    "errors": 6,
    "threads": 6,
    "plotting": 6,
    "numbers": 6,
    "explainer": 6,
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in (SRC / "ctxsel").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The ctxsel modules ``name`` imports (resolved to the longest known module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # ``from ctxsel import metrics`` imports the module ctxsel.metrics, not the package's API
            targets = [m if (m := f"{base}.{a.name}") in known else base for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    assert part in LAYERS, f"{module}: add its part {part!r} to LAYERS"
    return LAYERS[part]


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_layer_imports_one_above_it() -> None:
    graph = _graph()
    upward = sorted(
        f"{a} -> {b}"
        for a, deps in graph.items()
        for b in deps
        if a != "ctxsel" and b != "ctxsel._version" and _layer(b) < _layer(a)
    )
    assert upward == []


def test_selectors_are_inference_only() -> None:
    """Selecting needs no optimizer, TRL or peft: those live in ctxsel.train (and peft, to run a
    trained adapter, in ctxsel.llm.hf_client)."""
    graph = _graph()
    offending = []
    for name, path in _modules().items():
        if not name.startswith("ctxsel.selectors"):
            continue
        offending += [
            f"{name} -> {dep}" for dep in graph[name] if dep.startswith(("ctxsel.train", "ctxsel.eval", "ctxsel.cli"))
        ]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offending += [
                f"{name} -> {n}" for n in names if n.split(".")[0] in ("trl", "peft") or n.startswith("torch.optim")
            ]
    assert offending == []


def test_each_trained_method_has_one_home_beside_its_selector() -> None:
    """train/<method>/ mirrors selectors/<method>/ (one spelling per method), and one method's
    training never imports another's."""
    train = SRC / "ctxsel" / "train"
    methods = sorted(p.name for p in train.iterdir() if (p / "__init__.py").is_file())
    assert methods == ["context_picker", "ldar"]
    assert all((SRC / "ctxsel" / "selectors" / m / "__init__.py").is_file() for m in methods)
    assert sorted(p.name for p in train.glob("*.py")) == ["__init__.py"]  # no module outside a method's package
    graph = _graph()
    crossing = sorted(
        f"{a} -> {b}"
        for a, deps in graph.items()
        for b in deps
        if a.startswith("ctxsel.train.") and b.startswith("ctxsel.train.") and a.split(".")[2] != b.split(".")[2]
    )
    assert crossing == []


def test_selectors_never_touch_an_optimizer() -> None:
    """Resuming a run (an optimizer's state) is training: ctxsel.train.ldar.checkpoint, not selectors."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in (SRC / "ctxsel" / "selectors").rglob("*.py"))
    assert "optimizer" not in text.lower().replace("optimizers", "")


def test_the_command_line_starts_without_torch() -> None:
    """Building the parser (every ``ctxsel ...`` call, ``--help`` too) reads the training configs'
    dataclasses, which live apart from their torch code."""
    import subprocess
    import sys

    code = "import sys, ctxsel.cli.main as m; m.build_parser(); print(sorted(k for k in ('torch', 'trl', 'transformers') if k in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
