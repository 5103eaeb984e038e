"""The Selector contract, and the rules every score-based selector shares.

Every method is a :class:`Selector`: the public ``select(question, chunks, scores=None,
*, choices=None, gold_ids=None) -> Selection`` builds one :class:`~ctxsel.query.Query`
(the only place inputs are checked) and calls the method's ``_select(query, scores)``,
plus a few class-level facts callers read before calling it (``needs_scores``,
``needs_llm``, ``takes_gold_ids``). An LLM or policy method (SAGE, Context-Picker,
Self-Route) implements ``_select`` directly; it never checks its inputs again.

A score-based method subclasses :class:`ScoreCutSelector` and only decides
*how many* of the ranked chunks to keep (``_cut``); ranking, score validation,
``min_k``, the hard ``max_tokens`` budget and building the Selection happen
here once (in :class:`RankingSelector`; a method that keeps something other
than a prefix of the ranking, as LDAR's band, overrides ``decide`` there), so
every method obeys the same conventions:

- ranking: score descending, ties broken by original position (stable);
- NaN / +-inf scores: ``nan_policy="raise"`` (default) raises an InputError
  naming the offending positions; ``nan_policy="last"`` means *ranked last*:
  non-finite scores go after every finite one (in position order) and take
  no part in a cut that reads the score curve (they never form "the largest
  gap", a jump or a threshold), so adaptive-k, autocut and threshold keep
  them only through ``min_k``; a cut that is a count of the ranking
  (top-k's k, top-n-tokens' budget, ``min_k``) reaches them when it goes
  past the finite ones (top-k@3 with one NaN of 3 keeps all 3, the NaN third);
- ``min_k`` (default 1) raises k to at least min(min_k, N) (the explanation
  names the min_k asked for, and the cap when it is above N);
- ``max_tokens`` is a hard budget: the kept prefix of the ranking is cut to
  the longest one that fits. It wins over ``min_k``: if the best chunk alone
  exceeds the budget the selection is empty and the explanation says so.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, final

import numpy as np

from ctxsel.errors import InputError
from ctxsel.inputs import nonfinite_scores_error
from ctxsel.options import CommonOptions, build_options, declared, positional
from ctxsel.options import Options as OptionsBase
from ctxsel.query import Query
from ctxsel.selectors._fastcut import SMALL_N, RankView, fit_count, running_tokens
from ctxsel.types import ChunkLike, MethodDetails, Selection

NanPolicy = Literal["raise", "last"]


@dataclass(frozen=True, slots=True)
class Cut:
    """A selector's cut: keep the top ``k`` of the ranking, why, and any typed details."""

    k: int
    explanation: str
    details: MethodDetails | None = None


@dataclass(frozen=True)
class MethodInfo:
    """A registered method: its name, its class (or ``"module:Class"``, imported when first used),
    the option ``NAME@VALUE`` sets, and one line on what it does."""

    name: str
    target: str | type[Selector]
    main_param: str | None
    summary: str


#: The registered methods by name, filled by :func:`ctxsel.selectors.register`. A method's name is
#: written there and only there: the registration gives the class its :attr:`Selector.name`.
_REGISTRY: dict[str, MethodInfo] = {}


def import_path(cls: type) -> str:
    """``"module:Class"``: how a method registered by import path names its class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def name_method(cls: type[Selector], name: str) -> None:
    """Give ``cls`` the name it is registered under; a class that names itself otherwise, or that
    another registration already named, is an error (one class, one name)."""
    own = cls.__dict__.get("name")
    if own is not None and own != name:
        raise InputError(
            f"{cls.__qualname__} is named {own!r} and cannot be registered as {name!r} too: "
            "a method's name is its registration's (drop the class's name attribute)"
        )
    cls.name = name


class Selector(ABC):
    """What every method is: ``select(question, chunks, scores=None, *, choices=None) -> Selection``,
    implemented as ``_select(query, scores)``.

    An ABC rather than a ``typing.Protocol`` so the class-level facts below have
    defaults a new method need not repeat, and a registry can check with
    ``issubclass`` that what it is given is a method at all.
    """

    #: The name the method is registered under (``ctxsel.selectors.register``), set by the
    #: registration: a class registered by import path gets it when its module is imported.
    name: ClassVar[str]
    #: False for methods that read no similarity scores (callers then skip scoring).
    needs_scores: ClassVar[bool] = True
    #: True for methods that call an LLM while selecting (they take ``llm=``).
    needs_llm: ClassVar[bool] = False
    #: True for reference methods whose select() takes ``gold_ids=`` (the oracle);
    #: the eval runner passes ``Example.gold_ids`` to these and to no other.
    takes_gold_ids: ClassVar[bool] = False

    #: the method's options, a frozen dataclass (:mod:`ctxsel.options`): declared once, checked the same
    #: way on every surface, read as attributes (``self.k``)
    Options: ClassVar[type[OptionsBase]] = OptionsBase
    #: keyword arguments that are not options but things the method is handed (an LLM client, a policy)
    resources: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **given: Any) -> None:
        owner = getattr(type(self), "name", type(self).__name__)
        given = {**positional(self.Options, CommonOptions, args), **given}
        self.options = build_options(self.Options, given, owner=owner, extra=self.resources)

    def __getattr__(self, name: str) -> Any:
        """An option, read from :attr:`options` (``self.k`` for ``top-k``'s ``k``)."""
        options = self.__dict__.get("options")
        if options is not None and any(i.attr == name for i in declared(type(options)).values()):
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "select" in cls.__dict__:
            raise TypeError(
                f"{cls.__qualname__} overrides select(); implement _select(self, query, scores) instead: "
                "select() builds the checked Query (ctxsel.query.Query) and calls it"
            )
        path = import_path(cls)
        for info in _REGISTRY.values():
            if info.target == path:
                name_method(cls, info.name)

    @final
    def select(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        scores: Sequence[float] | np.ndarray | None = None,
        *,
        choices: Sequence[str] | None = None,
        gold_ids: Sequence[str] | None = None,
    ) -> Selection:
        """The chunks to read for ``question``. ``choices`` are a multiple-choice question's
        answer options, for methods that read them (SAGE); ``gold_ids`` the gold chunks, for
        reference methods that take them (the oracle); the others ignore both."""
        query = Query(question, chunks, scores, choices=choices, gold_ids=gold_ids)
        return self._select(query, query.scores)

    @abstractmethod
    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        """The method itself, on a checked ``query``. ``scores`` are what it ranks by (one per
        chunk, or None when nothing was scored): the query's own, or a ranking chain's."""

    def for_scores(self, scores_id: str) -> Selector:
        """The selector to cut the scores a chain computed for this method (named by
        :func:`ctxsel.ranking.chain.scores_id`): itself by default. A method trained on one scorer's
        scores returns a copy that reads another's through a map where it has one, and warns where not."""
        return self

    def config(self) -> dict[str, Any]:
        """The parameters that change the result (recorded in every Selection): the options (none for a
        method whose constructor of its own never called ``Selector.__init__``)."""
        options = self.__dict__.get("options")
        return {} if options is None else options.as_config()

    def common_config(self) -> dict[str, Any]:
        """The common options (``min_k``, ``max_tokens``, ``nan_policy``), for a method that records its own
        options in a ``config()`` of its own."""
        common = declared(CommonOptions)
        return {k: v for k, v in Selector.config(self).items() if k in common}


class RankingSelector(Selector):
    """A method that keeps part of the ranking by score: it provides :meth:`decide`."""

    Options: ClassVar[type[OptionsBase]] = CommonOptions

    @abstractmethod
    def decide(self, scores: np.ndarray, n_tokens: np.ndarray) -> Decision:
        """The ranking and how many of it to keep, from arrays only."""

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        chunk_list = query.chunks
        n = len(chunk_list)
        if scores is None:
            if self.needs_scores and n > 0:
                raise InputError(
                    f"method {self.name!r} needs scores: pass scores=... or use "
                    "ctxsel.select(..., scorer=...) to compute them"
                )
            arr = np.zeros(n, dtype=np.float64)
        else:
            arr = scores
        tokens = query.token_counts(read=self.reads_token_counts())
        d = self.decide(arr, tokens)
        top = d.top
        return Selection(
            ids=[chunk_list[i].id for i in top],
            scores=[_as_float(arr[i]) for i in top] if scores is not None else [None] * d.k,
            chunks=[chunk_list[i] for i in top],
            method=self.name,
            config=self.config(),
            explanation=d.explanation,
            n_candidates=n,
            details=d.details,
        )

    def reads_token_counts(self) -> bool:
        """Whether :meth:`decide` reads its ``n_tokens`` (a budget does; see
        :attr:`ScoreCutSelector.cut_reads_tokens`). When it does not, texts are counted only if kept."""
        return True

    def _apply_limits(self, k: int, explanation: str, sorted_tokens: np.ndarray, n: int) -> tuple[int, str]:
        k = max(0, min(int(k), n))
        floor = min(self.min_k, n)
        if k < floor:  # a min_k above N is capped at N, and the explanation says so
            capped = f" (capped at all {n} chunks)" if self.min_k > n else ""
            explanation += f"; raised to min_k={self.min_k}{capped}"
            k = floor
        return self._fit_budget(k, explanation, sorted_tokens)

    def _fit_budget(self, k: int, explanation: str, sorted_tokens: np.ndarray) -> tuple[int, str]:
        """The longest prefix of the top ``k`` that fits ``max_tokens`` (the hard budget)."""
        if self.max_tokens is not None and k > 0:
            fit = fit_count(running_tokens(sorted_tokens[:k]), self.max_tokens)
            if fit < k:
                explanation += f"; cut to {fit} by max_tokens={self.max_tokens}"
                k = fit
        return k, explanation


class ScoreCutSelector(RankingSelector):
    """A method that keeps the top ``k`` of the ranking: it provides :meth:`_cut` (and may
    provide a faster :meth:`_fast_cut`); one file and one registration line make a method."""

    #: True for a method whose cut counts positions of the ranking (top-k, top-n-tokens) instead of
    #: reading the score curve: under nan_policy="last" its ``_cut`` also gets the non-finite tail
    #: (scores NaN or infinite, ranked last), so "ranked last" still means "kept when k allows".
    counts_positions: ClassVar[bool] = False

    #: False for a method whose cut reads scores only (adaptive-k, top-k, ...): without ``max_tokens``
    #: its decision never reads the token counts (tests/selectors/test_token_counts.py checks it).
    cut_reads_tokens: ClassVar[bool] = True

    def reads_token_counts(self) -> bool:
        return self.cut_reads_tokens or self.max_tokens is not None

    # -- what subclasses provide ------------------------------------------------

    @abstractmethod
    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        """Decide k from finite scores sorted descending (len >= 1; with ``counts_positions``, the
        non-finite ones follow) and the token counts of the chunks in the same order."""

    # -- the shared pipeline ----------------------------------------------------

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        """The cut from a :class:`RankView` (at least one finite score). The default
        ranks everything and calls :meth:`_cut`; the built-in methods override it
        with paths that never sort all N scores."""
        ranked = view.order()[: view.n_finite]
        return self._cut(view.scores[ranked], n_tokens[ranked])

    def decide(self, scores: np.ndarray, n_tokens: np.ndarray) -> Decision:
        """Rank and cut using arrays only: the whole method, minus Chunk objects.

        Only the kept prefix of the ranking is computed; ``Decision.order``
        (the full ranking) is built when first read.
        """
        n = len(scores)
        if n == 0:
            order, _ = rank(scores, self.nan_policy)
            return Decision(order, 0, "empty context: nothing to select")
        if n <= SMALL_N:  # the full stable argsort is as cheap as anything at this size
            order, n_finite = rank(scores, self.nan_policy)
            sorted_tokens = n_tokens[order]
            m = n if self.counts_positions else n_finite
            if m == 0:
                cut = Cut(0, "no finite scores: nothing ranked")
            else:
                cut = self._cut(scores[order[:m]], sorted_tokens[:m])
            k, explanation = self._apply_limits(cut.k, cut.explanation, sorted_tokens, n)
            return Decision(order, k, explanation, cut.details)
        view = RankView(scores, self.nan_policy)
        if view.n_finite == 0 and not self.counts_positions:
            cut = Cut(0, "no finite scores: nothing ranked")
        else:
            cut = self._fast_cut(view, n_tokens)
        # the prefix _apply_limits reads: the cut, raised to min_k
        top = view.top(max(0, min(int(cut.k), n), min(self.min_k, n)))
        k, explanation = self._apply_limits(cut.k, cut.explanation, n_tokens[top], n)
        return Decision(view, k, explanation, cut.details, top=top[:k])


class Decision:
    """Ranking (indices into the input) and how many of it to keep.

    ``order`` is the full ranking; ``top`` its first ``k`` entries. A decision
    made from a :class:`RankView` computes ``order`` only when it is read,
    so a cut costs O(N) plus a sort of what it keeps.
    """

    __slots__ = ("_order", "_top", "_view", "details", "explanation", "k")

    def __init__(
        self,
        order: np.ndarray | RankView,
        k: int,
        explanation: str,
        details: MethodDetails | None = None,
        *,
        top: np.ndarray | None = None,
    ) -> None:
        if isinstance(order, RankView):
            self._view: RankView | None = order
            self._order: np.ndarray | None = None
        else:
            self._view, self._order = None, order
        self.k = k
        self.explanation = explanation
        self.details = details
        self._top = top

    @property
    def order(self) -> np.ndarray:
        if self._order is None:
            assert self._view is not None
            self._order = self._view.order()
        return self._order

    @property
    def top(self) -> np.ndarray:
        """The kept indices, best first (``order[:k]``)."""
        if self._top is None:
            self._top = self.order[: self.k]
        return self._top

    def __repr__(self) -> str:
        top = self.top.tolist()
        return f"Decision(k={self.k}, top={top!r}, explanation={self.explanation!r}, details={self.details!r})"


def rank(scores: np.ndarray, nan_policy: NanPolicy = "raise") -> tuple[np.ndarray, int]:
    """Indices by score descending, ties by position; and how many are finite.

    Non-finite scores either raise or go last (in position order).
    """
    finite = np.isfinite(scores)
    n_finite = int(finite.sum())
    if n_finite < len(scores) and nan_policy == "raise":
        raise nonfinite_scores_error(finite)
    # stable sort on -score keeps original order among ties
    key = np.where(finite, -scores, np.inf)
    order = np.argsort(key, kind="stable")
    return order, n_finite


def _as_float(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
