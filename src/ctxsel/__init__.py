"""ctxsel: decide how much of a long context a language model should read.

    >>> import ctxsel
    >>> sel = ctxsel.select("Who wrote it?", ["...", "..."], method="adaptive-k", scores=[0.9, 0.1])
    >>> sel.ids, sel.explanation

Importing ctxsel loads numpy only; models load when a feature needs them.
"""

from __future__ import annotations

from ctxsel._version import __version__
from ctxsel.api import aselect, select, select_many
from ctxsel.client import Client
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.ranking import Ranking
from ctxsel.selectors import available_methods, get_selector, register
from ctxsel.stages import Stage, available_stages, register_stage
from ctxsel.types import Chunk, Example, LLMUsage, Selection

#: Add a method from outside the package: ``ctxsel.register_method("my-cut", MyCut, main_param="k")``.
register_method = register

__all__ = [
    "Chunk",
    "Client",
    "Example",
    "LLMUsage",
    "Pipeline",
    "Query",
    "Ranking",
    "Selection",
    "Stage",
    "__version__",
    "aselect",
    "available_methods",
    "available_stages",
    "get_selector",
    "register_method",
    "register_stage",
    "select",
    "select_many",
]
