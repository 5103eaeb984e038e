"""Installed size of ctxsel's base install and of each extra, from the files of this environment.

For each extra, the distributions it pulls are followed through their requirements (markers
evaluated for this interpreter, a dependency's own extras followed too); its size is the sum of
the installed files (each distribution's RECORD) of those not in the base install. Extras share
packages, so the sizes do not add up. Run it in a full environment (``make setup``): a
requirement that is not installed is listed, not guessed.

    python -m benchmarks.install_size

Writes benchmarks/results/install_size.{md,json}.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
from functools import cache
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmarks import _common as C

MB = 1_000_000


@cache
def dist_size(name: str) -> int:
    """Bytes of one installed distribution's files."""
    files = metadata.distribution(name).files or []
    paths = (Path(f.locate()) for f in files)
    return sum(p.stat().st_size for p in paths if p.is_file())


def closure(name: str, extras: frozenset[str], missing: set[str]) -> set[str]:
    """Canonical names of ``name`` with ``extras`` and everything they require, ``name`` included."""
    seen: set[tuple[str, str]] = set()
    out: set[str] = set()
    todo = [(canonicalize_name(name), extra) for extra in {"", *extras}]
    while todo:
        dist_name, extra = todo.pop()
        if (dist_name, extra) in seen:
            continue
        seen.add((dist_name, extra))
        try:
            requires = metadata.distribution(dist_name).requires or []
        except metadata.PackageNotFoundError:
            missing.add(dist_name)
            continue
        out.add(dist_name)
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            dep = canonicalize_name(req.name)
            todo += [(dep, e) for e in {"", *req.extras}]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    args = p.parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads))
    missing: set[str] = set()
    base = closure("ctxsel", frozenset(), missing) - {"ctxsel"}
    extras: dict[str, dict[str, Any]] = {}
    for extra in metadata.distribution("ctxsel").metadata.get_all("Provides-Extra") or []:
        pulled = closure("ctxsel", frozenset({extra}), missing) - base - {"ctxsel"}
        extras[extra] = {"mb": sum(map(dist_size, pulled)) / MB, "distributions": sorted(pulled)}
    data: dict[str, Any] = {
        "info": info,
        "base_mb": sum(map(dist_size, base)) / MB,
        "base": sorted(base),
        "extras": extras,
        "missing": sorted(missing),
    }
    rows = [f"| `{name}` | {e['mb']:,.0f} | {len(e['distributions'])} |" for name, e in extras.items()]
    md = C.header_md("ctxsel: installed size of each extra", info) + (
        f"\nBase install (ctxsel's own requirements): {data['base_mb']:,.0f} MB, {len(base)} distributions.\n\n"
        "| extra | MB on top of the base | distributions |\n|---|---:|---:|\n" + "\n".join(rows) + "\n"
        f"\nNot installed here, so not counted: {', '.join(sorted(missing)) or 'none'}.\n"
    )
    C.write_report("install_size", C.RESULTS_DIR, md, data)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
