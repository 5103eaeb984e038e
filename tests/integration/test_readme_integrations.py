"""The framework examples of docs/guide/integrations.md, extracted by their ``<!-- readme-test: NAME -->``
marker and run as written (real frameworks, the bundled MiniLM), then checked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

README = (REPO_ROOT / "docs" / "guide" / "integrations.md").read_text(encoding="utf-8")


def readme_block(name: str) -> str:
    m = re.search(rf"<!-- readme-test: {re.escape(name)} -->\n```python\n(.*?)```", README, re.S)
    assert m, f"README has no python block marked readme-test: {name}"
    return m.group(1)


def run_block(name: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"readme_{name}"}
    exec(compile(readme_block(name), f"README.md[{name}]", "exec"), ns)
    return ns


METEORITE = ["The museum shows a meteorite that weighs 3.2 kg.", "The meteorite fell near the town in 1902."]


@pytest.mark.model
def test_langchain_example() -> None:
    pytest.importorskip("langchain_classic")
    ns = run_block("langchain")
    kept = ns["kept"]
    assert [d.page_content for d in kept] == METEORITE
    assert kept[0].metadata["ctxsel_method"] == "adaptive-k"
    # the value the README shows in its comment
    assert (
        kept[0].metadata["ctxsel_explanation"] == "largest gap 0.371 between ranks 2 and 3; kept 2 + buffer 0 = 2 of 5"
    )


@pytest.mark.model
def test_llamaindex_example() -> None:
    pytest.importorskip("llama_index.core")
    ns = run_block("llamaindex")
    response = ns["response"]
    assert [n.node.get_content() for n in response.source_nodes] == METEORITE
    assert response.source_nodes[0].node.metadata["ctxsel_explanation"].endswith("kept 2 + buffer 0 = 2 of 5")
    assert all(t in str(response) for t in METEORITE) and "Parking" not in str(response)


@pytest.mark.model
def test_haystack_example() -> None:
    pytest.importorskip("haystack")
    ns = run_block("haystack")
    result, one, same = ns["result"], ns["one"], ns["same"]
    assert [d.content for d in result["selector"]["documents"]] == METEORITE
    assert (
        result["selector"]["report"]["explanation"]
        == "largest gap 0.423 between ranks 2 and 3; kept 2 + buffer 0 = 2 of 4"
    )
    assert [d.content for d in one["selector"]["documents"]] == METEORITE[:1]
    assert same.get_component("selector").to_dict() == ns["pipe"].get_component("selector").to_dict()
