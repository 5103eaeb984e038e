"""Headless Chromium (Debian's ``chromium`` package) for the explainer's tests and the docs' screenshot.

    python -m tests.support.browser docs/selection_explainer.png    # the docs' picture of a selection

Chromium runs with a fresh profile and no background networking (the machine has no network; without
those flags it retries its own connections at every start). ``rendered`` loads a page with a script
appended that writes, into the DOM, what the browser drew: each chunk's computed background colour and
each SVG mark's on-screen x, then dumps the DOM, so a test reads the page as rendered.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

#: appended to the page under test: the rendered state, as attributes the dumped DOM carries
PROBE = """<script>
for (const el of document.querySelectorAll('.chunk'))
  el.setAttribute('data-rendered-bg', getComputedStyle(el).backgroundColor);
for (const el of document.querySelectorAll('#curve circle, #cut, #gap, #band')) {
  const box = el.getBoundingClientRect();
  el.setAttribute('data-screen-x', String(box.x + box.width / 2));
}
document.body.setAttribute('data-probed', 'yes');
</script>"""


def _run(page: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    if CHROMIUM is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="ctxsel-chromium-") as tmp:
        path = Path(tmp) / "page.html"
        path.write_text(page, encoding="utf-8")
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={tmp}/profile", *args, path.as_uri()],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )


def rendered(page: str) -> str:
    """The page's DOM after Chromium rendered it, with :data:`PROBE`'s attributes."""
    return _run(page.replace("</body>", PROBE + "</body>"), "--dump-dom").stdout


def screenshot(page: str, out: Path, width: int = 820, height: int = 900) -> None:
    out = out.resolve()
    _run(page, f"--window-size={width},{height}", f"--screenshot={out}")


def main(argv: list[str]) -> int:
    import ctxsel
    from ctxsel.chunking import chunk_text
    from ctxsel.datasets import BUNDLED
    from ctxsel.explainer import selection_html

    chunks = chunk_text((BUNDLED / "example.md").read_text(encoding="utf-8"))
    sel = ctxsel.select("How heavy is the meteorite in the museum?", chunks)  # the defaults, as the README shows
    screenshot(selection_html(sel), Path(argv[0]))
    print(f"wrote {argv[0]}: {sel.method} kept {sel.ids}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
