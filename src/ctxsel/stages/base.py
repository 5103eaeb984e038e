"""The Stage contract: one step after a method's cut, ``Selection -> Selection``.

A stage filters, reshapes, reorders or prunes what a method kept (lost-in-the-middle
order, duplicate removal, neighbour windows, sentence pruning). It runs after the cut
on every surface, in the order given, and each one reads the same checked
:class:`~ctxsel.query.Query` the method read, plus the scores it ranked by.

A stage's options are the fields of a frozen dataclass: the spec parser, the value
checks and the option listing all read them from there, so an option is declared
once.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ctxsel.options import Options, declared
from ctxsel.query import Query
from ctxsel.types import Selection

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking


@dataclasses.dataclass(frozen=True)
class Stage(Options, ABC):
    """What every stage is: ``apply(selection, query, scores) -> Selection``.

    Subclasses are frozen dataclasses whose fields are the stage's options, declared with
    :func:`ctxsel.options.option` (their checks: :mod:`ctxsel.options`), registered with
    :func:`ctxsel.stages.register_stage`, which names them.
    """

    #: The name the stage is registered under, set by the registration.
    name: ClassVar[str] = ""
    #: True for a stage that reads the ranking chain (its scorer's vectors, or the scorer itself
    #: to score sentences): it is then called with ``ranking=``, the chain the method ranked by.
    needs_ranking: ClassVar[bool] = False

    @abstractmethod
    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        """The selection after this stage. ``scores`` are what the method ranked by (one per
        chunk of ``query``), or None when it read none; ``ranking`` is the chain behind them,
        given to a stage that declares ``needs_ranking``."""

    def config(self) -> dict[str, Any]:
        """The options that change the result."""
        return self.as_config()

    def spec(self) -> str:
        """The stage as a spec that builds it again: ``NAME`` or ``NAME[key=value,...]``."""
        from ctxsel.specs import quote_value

        given = {k: v for k, v in self.config().items() if v != _default(type(self), k)}
        if not given:
            return self.name
        body = ",".join(f"{k}={quote_value(v) if isinstance(v, str) else _spec_text(v)}" for k, v in given.items())
        return f"{self.name}[{body}]"


def _default(cls: type[Options], key: str) -> Any:
    default = declared(cls)[key].default
    return default if default is not dataclasses.MISSING else object()


def _spec_text(v: Any) -> str:
    return "true" if v is True else "false" if v is False else "none" if v is None else str(v)


__all__ = ["Stage"]
