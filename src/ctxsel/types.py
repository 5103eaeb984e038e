"""The data model every stage shares: Chunk, Example, Selection, LLMUsage, and the typed
records methods attach to a Selection (RoutedAnswer; MethodDetails, the base of each method's
own record, which lives beside the method).

Chunks are immutable and always carry a token count, so selectors can honour
token budgets without re-tokenising. Selections are plain data that serialise
to JSON (``to_dict``) and say in one line why the cut fell where it did.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar, overload

import numpy as np

from ctxsel.errors import InputError, InputTypeError
from ctxsel.inputs import (
    MAX_CHUNK_TOKENS,
    MAX_ID_CHARS,
    as_int,
    as_token_count,
    bad_chunk_item,
    check_chunk_sequence,
    check_id_text,
    check_ids,
    check_text,
    check_texts,
    check_unique_chunk_ids,
    chunk_fields,
    plain_chunk_shape,
)
from ctxsel.tokens import count_tokens, count_tokens_batch


@dataclass(frozen=True, slots=True)
class Chunk:
    """One unit of context.

    ``position`` is the order inside ``doc_id``; reading order and neighbour
    relations (SAGE) depend on it. ``n_tokens`` is counted with the project's
    tokenizer (cl100k) when not given.
    """

    id: str
    text: str
    doc_id: str = "doc"
    position: int = 0
    n_tokens: int = -1
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InputError(f"Chunk id must be a non-empty string, got {self.id!r}")
        if len(self.id) > MAX_ID_CHARS or not self.id.isascii():
            check_id_text(self.id, "Chunk id")
        if isinstance(self.doc_id, str) and (len(self.doc_id) > MAX_ID_CHARS or not self.doc_id.isascii()):
            check_id_text(self.doc_id, f"Chunk {self.id!r}: doc_id")
        if not isinstance(self.text, str):
            raise InputTypeError(f"Chunk {self.id!r}: text must be str, got {type(self.text).__name__}")
        if not self.text.isascii():  # ASCII, the common case, has no lone surrogate
            check_text(self.text, f"chunk {self.id!r}")
        n = self.n_tokens
        if type(n) is not int:  # 5.0 is 5, 2.5 or True is an error (the whole-number rule)
            n = as_int(f"Chunk {self.id!r}: n_tokens", n)
            object.__setattr__(self, "n_tokens", n)
        if n < 0:  # -1, the default: counted
            object.__setattr__(self, "n_tokens", count_tokens(self.text))
        elif n > MAX_CHUNK_TOKENS:
            as_token_count(f"Chunk {self.id!r}: n_tokens", n)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["meta"]:
            d.pop("meta")
        return d


@dataclass(slots=True)
class Example:
    """A question over a context, with optional labels for evaluation."""

    id: str
    question: str
    chunks: list[Chunk]
    gold_ids: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    #: a multiple-choice question's answer options, in letter order (A, B, ...)
    choices: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LLMUsage:
    """LLM cost of one selection or answer: calls and tokens in/out.

    ``tokens_reused`` counts the prompt tokens (of ``tokens_in``) that the
    backend took from a cache of an earlier call's shared prefix instead of
    evaluating them (llama.cpp's KV cache, a server's ``cached_tokens``);
    ``tokens_in - tokens_reused`` is the prompt work actually done.
    """

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reused: int = 0

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(
            self.calls + other.calls,
            self.tokens_in + other.tokens_in,
            self.tokens_out + other.tokens_out,
            self.tokens_reused + other.tokens_reused,
        )

    @property
    def tokens_processed(self) -> int:
        """Prompt tokens the model evaluated (not taken from a prefix cache)."""
        return self.tokens_in - self.tokens_reused


@dataclass(frozen=True, slots=True)
class RoutedAnswer:
    """An answer a selector gave while selecting: SAGE answers as it explores, Self-Route's reader
    answers on the route it chose. A Reader returns it without another LLM call.

    ``route`` is how it was reached (Self-Route: ``rag``, ``long-context``, ``none``; SAGE:
    ``explore``, ``counting``, ``empty``); ``tokens_in`` the prompt tokens of the call that answered.
    """

    text: str
    raw: str
    route: str
    tokens_in: int = 0
    seconds: float = 0.0
    template: str = ""

    def to_meta(self) -> dict[str, Any]:
        """The keys ``Selection.to_dict()["meta"]`` has carried since before this type existed."""
        return {
            "answer": self.text,
            "raw_answer": self.raw,
            "route": self.route,
            "answer_tokens_in": self.tokens_in,
            "seconds": self.seconds,
            "template": self.template,
        }


def meta_key(key: str | None = None, *, omit_none: bool = True, in_row: bool = False) -> dict[str, Any]:
    """A details field's metadata: its key in ``Selection.to_dict()["meta"]`` (default: its name),
    whether a None is left out, and whether ``ctxsel eval`` copies it into the example's result row
    (when it is set: see :meth:`MethodDetails.row_fields`)."""
    return {"key": key, "omit_none": omit_none, "in_row": in_row}


@dataclass(frozen=True, slots=True)
class MethodDetails:
    """What one method says about its decision beyond the ids, as a typed record.

    Each method's record lives beside the method (LDAR's band in ``ctxsel.selectors.ldar.band``,
    Context-Picker's replies in ``ctxsel.selectors.context_picker.picker``...); readers that know
    the method check the kind with ``isinstance`` or :meth:`Selection.details_as`, so renaming a
    field is a type error, not a silent ``meta.get`` that returns None. Every other reader (the
    eval's rows, the CLI's and the service's JSON) goes through :meth:`to_meta` and
    :meth:`row_fields`, the same for every method. ``to_meta`` writes the fields under the keys
    ``Selection.to_dict()["meta"]`` carried before these records existed, so JSON readers see the
    same shape.
    """

    def to_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.metadata.get("key") or f.name] = value
        return out

    def row_fields(self) -> dict[str, Any]:
        """The fields ``ctxsel eval`` keeps in an example's result row (those marked ``in_row``
        with :func:`meta_key`), under their meta keys, when they are set (not None or empty)."""
        meta = self.to_meta()
        keys = [f.metadata.get("key") or f.name for f in fields(self) if f.metadata.get("in_row")]
        return {k: meta[k] for k in keys if meta.get(k)}

    def kept_band(self) -> tuple[int, int] | None:
        """The descending ranks (1-based, inclusive) of a band the method kept that need not start
        at the top (LDAR's), for the eval's similarity plot; None for a method that keeps a prefix."""
        return None


D = TypeVar("D", bound=MethodDetails)


@dataclass(frozen=True, slots=True)
class SelectionView:
    """What a selection was made from, for pictures of it (:mod:`ctxsel.explainer`): the question, the
    whole pool and the scores the method read (None for a score-free method). References, not copies;
    never part of :meth:`Selection.to_dict`."""

    question: str
    chunks: Sequence[Chunk]
    scores: np.ndarray | None


@dataclass(slots=True)
class Selection:
    """What a selector chose, and why.

    ``ids`` are in rank order (most relevant first); ``reading_order`` is the
    order a reader should see: the same set sorted by (doc_id, position), unless a stage set
    another (``reading``, e.g. lost-in-the-middle's).
    ``scores[i]`` is the score of ``ids[i]`` (None for score-free methods).
    ``answer`` is set by methods that answer while selecting (SAGE, Self-Route); ``details`` by
    methods with more to say than ids and an explanation (LDAR's band, Context-Picker's
    rationale, SAGE's verdicts). ``meta`` holds the notes any stage may add, whatever the
    method: ``truncated`` (the scorer's window), ``cut`` (the reader's window), ``expansion``,
    ``failures`` and per-example ``metrics`` for the eval. ``abstained`` is set, with
    ``abstain_reason``, by the ``abstain`` stage when nothing in the pool looks relevant: the
    selection is then empty on purpose.
    """

    ids: list[str]
    scores: list[float | None]
    chunks: list[Chunk]
    method: str
    config: dict[str, Any]
    explanation: str
    n_candidates: int
    trace: list[dict[str, Any]] = field(default_factory=list)
    usage: LLMUsage = field(default_factory=LLMUsage)
    meta: dict[str, Any] = field(default_factory=dict)
    answer: RoutedAnswer | None = None
    details: MethodDetails | None = None
    #: the reading order a stage set (ids of this selection); None: document order
    reading: list[str] | None = None
    #: True when a stage (``abstain``) judged that nothing in the pool is relevant: the selection is empty
    abstained: bool = False
    #: why it abstained (None when it did not)
    abstain_reason: str | None = None
    #: the question, pool and scores it was made from (set by a Pipeline; None when rebuilt or made by hand)
    view: SelectionView | None = field(default=None, repr=False, compare=False)

    def details_as(self, kind: type[D]) -> D:
        """``details`` as the record ``kind``; a TypeError names what it is instead."""
        if not isinstance(self.details, kind):
            raise TypeError(f"{self.method} selection has {type(self.details).__name__} details, not {kind.__name__}")
        return self.details

    @property
    def k(self) -> int:
        return len(self.ids)

    @property
    def n_tokens(self) -> int:
        return sum(c.n_tokens for c in self.chunks)

    @property
    def reading_order(self) -> list[str]:
        return [c.id for c in self.read_chunks()]

    def read_chunks(self) -> list[Chunk]:
        """The selected chunks in reading order."""
        if self.reading is not None:
            by_id = {c.id: c for c in self.chunks}
            return [by_id[i] for i in self.reading if i in by_id]
        return sorted(self.chunks, key=lambda c: (c.doc_id, c.position))

    def _repr_html_(self) -> str:
        """Jupyter's view: the page :func:`ctxsel.explainer.selection_html` renders."""
        from ctxsel.explainer import selection_html

        return selection_html(self)

    def text(self, separator: str = "\n\n") -> str:
        """The selected chunks' text in reading order, ready for a prompt."""
        return separator.join(c.text for c in self.read_chunks())

    def to_dict(self, with_text: bool = True) -> dict[str, Any]:
        return {
            "method": self.method,
            "k": self.k,
            "n_tokens": self.n_tokens,
            "n_candidates": self.n_candidates,
            "explanation": self.explanation,
            "config": self.config,
            "ids": self.ids,
            "reading_order": self.reading_order,
            "abstained": self.abstained,
            "abstain_reason": self.abstain_reason,
            "chunks": [
                {
                    "id": c.id,
                    **({"text": c.text} if with_text else {}),
                    "score": s,
                    "rank": r,
                    "n_tokens": c.n_tokens,
                }
                for r, (c, s) in enumerate(zip(self.chunks, self.scores), start=1)
            ],
            "trace": self.trace,
            "usage": asdict(self.usage),
            "meta": {
                **self.meta,
                **(self.details.to_meta() if self.details is not None else {}),
                **(self.answer.to_meta() if self.answer is not None else {}),
            },
        }


_JSON_LEAVES = frozenset({str, int, bool, type(None)})


def jsonable(x: Any) -> Any:
    """``x`` with numpy scalars and arrays (selector meta holds them) as Python values and non-finite
    floats as None, so every surface (HTTP, ``ctxsel select --json``) writes the same valid JSON."""
    if type(x) in _JSON_LEAVES:  # most of a Selection's values: returned at once
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


#: What the Python API takes as one chunk: a text, a Chunk, or an ``{"id", "text", ...}`` mapping (HTTP's shape).
ChunkLike = Chunk | str | Mapping[str, Any]


#: a new chunk's (id, text, doc_id, position, n_tokens or -1, meta) as :func:`as_chunks` collects them
_Fields = tuple[str, str, str, int, int, dict[str, Any] | None]


def as_chunks(items: Iterable[ChunkLike], doc_id: str = "doc") -> Sequence[Chunk]:
    """Accept strings, Chunks or ``{"id", "text", ...}`` mappings (the shape HTTP and JSONL take, checked
    by :func:`ctxsel.inputs.chunk_fields`); strings get ids "0", "1", ... in order.

    Ids must be unique: two chunks with one id would make recall and the
    reading order ambiguous, so that is an error, not a silent merge.
    Duplicate *texts* under different ids are fine. One str (or bytes) in
    place of the sequence is a TypeError, never one chunk per character.
    The checks run in HTTP's order: every item's shape, then every text, then
    the ids. This is the service's hot path (a request brings up to thousands
    of chunks), so the new Chunks are built from the checked fields without
    ``Chunk.__post_init__`` repeating the checks, and the texts without a
    count are counted in one batch.
    """
    if type(items) is TextChunks:  # built here: checked, ids unique
        return items
    check_chunk_sequence(items)
    listed: list[Any] = items if isinstance(items, list) else list(items)
    kinds = set(map(type, listed))
    if kinds == {Chunk}:  # Chunks already (a pipeline passing its own): ids only
        check_unique_ids(listed)
        return list(listed)
    if kinds == {str}:  # texts, the common case: ids "0", "1", ... are unique
        check_texts(listed)
        return TextChunks(listed.copy() if listed is items else listed, doc_id=doc_id)  # the caller's list may change
    shapes = set(map(plain_chunk_shape, listed)) if kinds == {dict} else set()
    if len(shapes) == 1 and "" not in shapes:
        # {"id", "text"} objects, every one with or every one without "n_tokens": HTTP's common case
        ids, texts = [d["id"] for d in listed], [d["text"] for d in listed]
        check_ids(ids)
        check_texts(texts, ids)
        check_unique_chunk_ids(ids)
        counts = [d["n_tokens"] for d in listed] if shapes == {"counted"} else None
        return TextChunks(texts, counts, doc_id=doc_id, ids=ids)
    given: list[Chunk | _Fields] = []
    for i, item in enumerate(listed):
        if type(item) is str:
            given.append((str(i), item, doc_id, i, -1, None))
        elif isinstance(item, Chunk):
            given.append(item)
        elif isinstance(item, Mapping):
            f = chunk_fields(item, i)
            given.append(
                (f["id"], f["text"], f.get("doc_id", doc_id), f["position"], f.get("n_tokens", -1), f.get("meta"))
            )
        elif isinstance(item, str):  # a str subclass
            given.append((str(i), str(item), doc_id, i, -1, None))
        else:
            raise bad_chunk_item(item, i)
    new = [f for f in given if not isinstance(f, Chunk)]
    check_texts([f[1] for f in new], [f[0] for f in new])
    new_counts = iter(count_tokens_batch([f[1] for f in new if f[4] < 0]))
    out = [
        f if isinstance(f, Chunk) else _checked_chunk(*f[:4], f[4] if f[4] >= 0 else next(new_counts), f[5] or {})
        for f in given
    ]
    check_unique_ids(out)
    return out


class TextChunks(Sequence[Chunk]):
    """A columnar pool: checked texts (ids "0", "1", ..., or the ids given; positions in order, one
    ``doc_id``), each Chunk built, and its tokens counted, when it is first read.

    What :func:`as_chunks` returns for a list of texts, or of ``{"id", "text"}`` objects. A ranking method that
    cuts by score alone (adaptive-k, top-k, autocut, a threshold, with no
    ``max_tokens``) builds and counts only the k chunks it keeps, so a request
    of 1,000 new texts counts ten of them instead of all (tokenising is the
    costly part) and builds ten Chunk objects, not a thousand (building them
    all would cost more than the cut: docs/guide/service.md). :attr:`n_tokens` counts every text, in
    one batch, the first time it is read. It is an immutable sequence that
    compares equal to the list of its Chunks.
    """

    __slots__ = ("_built", "_counts", "doc_id", "ids", "texts")

    def __init__(
        self, texts: list[str], n_tokens: list[int] | None = None, doc_id: str = "doc", ids: list[str] | None = None
    ) -> None:
        # the texts (and ids) checked by the caller (check_texts, unique ids); their counts if the caller has them
        self.texts, self._counts, self.doc_id, self.ids = texts, n_tokens, doc_id, ids
        self._built: list[Chunk | None] = [None] * len(texts)

    @property
    def n_tokens(self) -> list[int]:
        """Every text's cl100k count (counted in one batch on first use)."""
        if self._counts is None:
            self._counts = count_tokens_batch(self.texts)
        return self._counts

    @property
    def counted(self) -> bool:
        """Whether every text has been counted (reading :attr:`n_tokens` counts them)."""
        return self._counts is not None

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, i: int) -> Chunk: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.texts)))]
        c = self._built[i]  # IndexError as a list's
        if c is None:
            j, counts = i % len(self.texts), self._counts
            n = counts[j] if counts is not None else count_tokens(self.texts[j])
            cid = str(j) if self.ids is None else self.ids[j]
            c = self._built[j] = _checked_chunk(cid, self.texts[j], self.doc_id, j, n, {})
        return c

    def __iter__(self) -> Iterator[Chunk]:
        return map(self.__getitem__, range(len(self.texts)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, TextChunks)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking like the list it stands for

    def __repr__(self) -> str:
        return f"TextChunks({list(self)!r})"


def token_counts(chunks: Sequence[Chunk], read: bool = True) -> np.ndarray:
    """The chunks' ``n_tokens`` as an int64 array (without building a :class:`TextChunks`' Chunks).
    ``read=False`` (the caller will not read them): zeros for texts not yet counted, so that only
    the chunks the caller keeps are ever counted."""
    if type(chunks) is TextChunks:
        if not read and not chunks.counted:
            return np.zeros(len(chunks), dtype=np.int64)
        return np.array(chunks.n_tokens, dtype=np.int64)
    return np.fromiter(map(attrgetter("n_tokens"), chunks), dtype=np.int64, count=len(chunks))


# each slot's own setter: it bypasses the frozen class's __setattr__, as dataclasses' generated __init__ does
_set_id, _set_text, _set_doc_id, _set_position, _set_n_tokens, _set_meta = (
    getattr(Chunk, name).__set__ for name in ("id", "text", "doc_id", "position", "n_tokens", "meta")
)


def _checked_chunk(cid: str, text: str, doc_id: str, position: int, n_tokens: int, meta: dict[str, Any]) -> Chunk:
    """A Chunk from fields :func:`as_chunks` has checked (:func:`ctxsel.inputs.chunk_fields`, the text,
    the count), its slots set directly: ``__post_init__`` would check them all again."""
    c = object.__new__(Chunk)
    _set_id(c, cid)
    _set_text(c, text)
    _set_doc_id(c, doc_id)
    _set_position(c, position)
    _set_n_tokens(c, n_tokens)
    _set_meta(c, meta)
    return c


def check_unique_ids(chunks: Sequence[Chunk]) -> None:
    check_unique_chunk_ids(list(map(_chunk_id, chunks)))


_chunk_id = attrgetter("id")
