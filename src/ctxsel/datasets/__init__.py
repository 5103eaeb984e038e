"""Dataset loaders: a name (``hotpotqa-long``, ``example``, the generated ``articles[seed=0,...]``,
see :mod:`.articles`), a JSONL path, or a
multiple-choice set: ``novelqa:DIR`` (or a folder with ``Books/`` and
``Data/``) and ``marathon:FILE`` (see :mod:`.multiple_choice`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxsel.errors import InputError
from ctxsel.types import Example

BUNDLED = Path(__file__).resolve().parent.parent / "data"
#: the bundled example documents by name, which ``--document example:NAME`` and :func:`example_path` read
#: from any folder: the handbook of a fictional observatory (28 paragraphs under Markdown headings)
EXAMPLES = {"handbook": "example.md"}
EXAMPLE_PREFIX = "example:"


def example_path(name: str = "handbook") -> Path:
    """The file of a bundled example document (:data:`EXAMPLES`), from wherever ctxsel is installed."""
    if name not in EXAMPLES:
        raise InputError(f"no bundled example {name!r}; choose {', '.join(EXAMPLES)}")
    return BUNDLED / EXAMPLES[name]


def load_dataset(name_or_path: str | Path, limit: int | None = None, **options: Any) -> list[Example]:
    name = str(name_or_path)
    if name == "hotpotqa-long":
        from ctxsel.datasets.hotpotqa import load_hotpotqa_long

        return load_hotpotqa_long(options.get("hotpotqa_path"), limit=limit)
    if name == "articles" or name.startswith(("articles[", "articles@")):
        from ctxsel.datasets.articles import load_articles
        from ctxsel.specs import parse_options, split_spec

        _, value, body = split_spec(name, "dataset")
        if value is not None:
            raise InputError(f"dataset {name!r}: options go in brackets, e.g. articles[seed=1,sets=2]")
        return load_articles(parse_options(body, f"dataset {name!r}"), limit=limit)
    if name == "example":
        name = str(BUNDLED / "example.jsonl")
    kind, _, rest = name.partition(":")
    if kind in ("novelqa", "marathon") and rest:
        from ctxsel.datasets import multiple_choice as mc

        return (mc.load_novelqa if kind == "novelqa" else mc.load_marathon)(rest, limit=limit)
    path = Path(name)
    if path.is_dir() and (path / "Books").is_dir() and (path / "Data").is_dir():
        from ctxsel.datasets.multiple_choice import load_novelqa

        return load_novelqa(path, limit=limit)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset {name!r} is neither a known name (hotpotqa-long, example, articles, novelqa:DIR, "
            "marathon:FILE) nor a file"
        )
    from ctxsel.datasets.jsonl import load_jsonl

    return load_jsonl(path, chunking=options.get("chunking", "paragraphs"), limit=limit)


__all__ = ["BUNDLED", "EXAMPLES", "example_path", "load_dataset"]
