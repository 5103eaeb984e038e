"""The framework examples of docs/guide/integrations.md, extracted by their ``<!-- readme-test: NAME -->``
marker and run as written (real frameworks, the bundled MiniLM), then checked."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.paths import REPO

README = (REPO / "docs" / "guide" / "integrations.md").read_text(encoding="utf-8")


def readme_block(name: str) -> str:
    m = re.search(rf"<!-- readme-test: {re.escape(name)} -->\n```python\n(.*?)```", README, re.S)
    assert m, f"README has no python block marked readme-test: {name}"
    return m.group(1)


def run_block(name: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"readme_{name}"}
    exec(compile(readme_block(name), f"README.md[{name}]", "exec"), ns)
    return ns


def readme_gap(fp32: str, int8: str) -> str:
    """The largest gap the README shows: the default vectors are int8 on a VNNI CPU, fp32 elsewhere."""
    from ctxsel.scoring.dense import resolve_backend

    return int8 if resolve_backend("auto") == "onnx-int8" else fp32


METEORITE = ["The museum shows a meteorite that weighs 3.2 kg.", "The meteorite fell near the town in 1902."]


@pytest.mark.model
def test_langchain_example() -> None:
    pytest.importorskip("langchain_classic")
    ns = run_block("langchain")
    kept = ns["kept"]
    assert [d.page_content for d in kept[:2]] == METEORITE and len(kept) == 3  # the default buffer over 5: 1
    assert kept[0].metadata["ctxsel_method"] == "adaptive-k"
    # the value the README shows in its comment
    assert (
        kept[0].metadata["ctxsel_explanation"]
        == f"largest gap {readme_gap('0.371', '0.389')} between ranks 2 and 3; kept 2 + buffer 1 = 3 of 5"
    )


@pytest.mark.model
def test_llamaindex_example() -> None:
    pytest.importorskip("llama_index.core")
    ns = run_block("llamaindex")
    response = ns["response"]
    kept = [n.node.get_content() for n in response.source_nodes]
    assert kept[:2] == METEORITE and len(kept) == 3
    assert response.source_nodes[0].node.metadata["ctxsel_explanation"].endswith("kept 2 + buffer 1 = 3 of 5")
    assert all(t in str(response) for t in METEORITE)


@pytest.mark.model
def test_haystack_example() -> None:
    pytest.importorskip("haystack")
    ns = run_block("haystack")
    result, one, same = ns["result"], ns["one"], ns["same"]
    kept = [d.content for d in result["selector"]["documents"]]
    assert kept[:2] == METEORITE and len(kept) == 3
    assert (
        result["selector"]["report"]["explanation"]
        == f"largest gap {readme_gap('0.423', '0.420')} between ranks 2 and 3; kept 2 + buffer 1 = 3 of 4"
    )
    assert [d.content for d in one["selector"]["documents"]] == METEORITE[:1]
    assert same.get_component("selector").to_dict() == ns["pipe"].get_component("selector").to_dict()
