"""The HTTP service guide's example (docs/guide/service.md), run as written against a live server."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from tests.support.paths import REPO

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.slow  # each test runs a real server process (1-20 s)

README = REPO / "docs" / "guide" / "service.md"


def http_section() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize("example", [0, 1], ids=["urllib", "client"])
def test_the_readme_example_prints_what_it_says(example: int) -> None:
    section = http_section()
    start_line = next(line for line in code_blocks(section, "bash")[0].splitlines() if "ctxsel serve" in line)
    words = shlex.split(start_line)
    token = words[0].split("=", 1)[1]
    args = words[words.index("serve") + 1 :]
    port = args[args.index("--port") + 1]
    args[args.index("--port") + 1] = "0"  # any free port instead of the README's
    code = code_blocks(section, "python")[example]
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    assert expected, "the README example shows its output as '# ...' lines"
    with ServerProcess(args, token=token) as srv:
        live = code.replace(f"http://127.0.0.1:{port}", srv.base_url)
        assert live != code, "the example should call the address the server command listens on"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(live, str(README), "exec"), {})
        assert out.getvalue().splitlines() == expected
