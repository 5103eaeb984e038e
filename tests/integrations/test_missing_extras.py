"""Without its framework, each integration module says which extra to install;
``import ctxsel`` and ``ctxsel.integrations`` import no framework."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("ctxsel.integrations.langchain", "langchain_core", "langchain"),
        ("ctxsel.integrations.llamaindex", "llama_index", "llamaindex"),
        ("ctxsel.integrations.haystack", "haystack", "haystack"),
    ],
)
def test_missing_framework_names_the_extra(module: str, blocked: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    print('imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert f'pip install "ctxsel[{extra}]"' in out, out


def test_package_imports_no_framework() -> None:
    code = (
        "import sys, ctxsel, ctxsel.integrations\n"
        "print(sorted(m for m in ('langchain_core', 'llama_index', 'haystack', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"
