"""Request and response bodies of the HTTP service (pydantic models, so the
OpenAPI schema at /openapi.json describes exactly what is accepted)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict before 3.12

from ctxsel.errors import InputError, InputTypeError
from ctxsel.inputs import (
    MAX_CHUNK_TOKENS,
    MAX_ID_CHARS,
    MAX_QUESTION_CHARS,
    MAX_SPEC_CHARS,
    as_scores,
    check_chunk_shapes,
    check_score_items,
    check_text,
)
from ctxsel.query import Query
from ctxsel.specs import check_spec_length
from ctxsel.types import Chunk

JSONScalar = str | int | float | bool | None


# A TypedDict, not a model: a request carries up to thousands of chunks, and validating them into plain
# dicts is far cheaper than building a model instance each (docs/guide/service.md has the figures).
class ChunkIn(TypedDict):
    """One chunk with its own id (ids must be unique in a request)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    text: str
    doc_id: NotRequired[Annotated[str, Field(max_length=MAX_ID_CHARS, description='its document (default: "doc")')]]
    position: NotRequired[
        Annotated[int | None, Field(description="order in its document (default: its index in the list)")]
    ]
    n_tokens: NotRequired[
        Annotated[
            int | None,
            Field(ge=0, le=MAX_CHUNK_TOKENS, description="cl100k token count (default: counted by the server)"),
        ]
    ]
    meta: NotRequired[dict[str, Any]]


class SelectRequest(BaseModel):
    """A question over chunks (or a document the server chunks), and how to select.

    Give exactly one of ``chunks`` and ``document``. Relevance comes from, in
    order: ``scores`` (one per chunk, higher is more relevant), ``embeddings``
    with ``query_embedding`` (cosine similarity, computed by the server after
    L2-normalising both sides), or the server's own scorer (``--scorer``).

    Limits, the same in Python and on the command line (``ctxsel.inputs``): a question of at most
    100,000 characters, a chunk id or doc_id of at most 1,024, a spec (``method``, ``expand``,
    ``rerank``, each stage) of at most 1,000, a chunk's ``n_tokens`` at most 1,000,000,000 (more
    than any model reads; it keeps every token sum exact). A field over its limit, like any field
    the rules refuse, is 422 ``invalid_body`` in ctxsel's words; 413 is only for the body's bytes
    (``--max-body-bytes``) and the request's size (``--max-chunks``, ``--max-chars``). ``chunks``
    is a JSON array: an object (ids to texts) is refused, as a dict is in Python.
    """

    model_config = ConfigDict(extra="forbid")

    question: str = Field(max_length=MAX_QUESTION_CHARS)
    chunks: list[str | ChunkIn] | None = Field(
        None, description="strings (ids '0', '1', ...) or {id, text, doc_id?, position?, n_tokens?, meta?} objects"
    )
    document: str | None = Field(None, description="a text the server splits with `chunking`")
    chunking: Literal["paragraphs", "sentences", "tokens"] = "paragraphs"
    headings: Literal["attach", "separate"] = Field(
        "attach",
        description="Markdown headings in `document`: attach (each joins the chunk of text after it) or separate "
        "(a heading paragraph is a chunk of its own)",
    )
    method: str = Field(
        "adaptive-k", max_length=MAX_SPEC_CHARS, description="a method spec: adaptive-k, top-k@5, autocut@2, ..."
    )
    options: dict[str, JSONScalar] = Field(
        default_factory=dict, description="selector options: min_k, max_tokens, buffer, nan_policy, ..."
    )
    scores: list[float] | None = Field(None, description="precomputed relevance, one per chunk")
    embeddings: list[list[float]] | None = Field(
        None, description="precomputed chunk embeddings, one row per chunk (needs query_embedding)"
    )
    query_embedding: list[float] | None = Field(None, description="the question's embedding, same dimension")
    expand: str | None = Field(
        None,
        max_length=MAX_SPEC_CHARS,
        description="re-rank before the cut: hop, links or hop+links (ctxsel.ranking); "
        "meta.expansion says what came in",
    )
    rerank: str | None = Field(
        None,
        max_length=MAX_SPEC_CHARS,
        description="a second stage, SCORER@M: the scorer (a bundled model only) re-scores the first ranking's top M "
        "before the cut (ctxsel.ranking.rerank); meta.rerank says what it moved up",
    )
    stages: list[Annotated[str, Field(max_length=MAX_SPEC_CHARS)]] | None = Field(
        None,
        max_length=32,
        description='stages after the cut, in order (ctxsel.stages): e.g. ["reorder"] for lost-in-the-middle order',
    )
    choices: list[str] | None = Field(
        None,
        max_length=26,
        description="a multiple-choice question's answer options, in letter order (SAGE reads them)",
    )
    with_text: bool = Field(True, description="return the selected chunks' text")

    @field_validator("question", mode="before")
    @classmethod
    def _question_is_unicode(cls, v: Any) -> Any:
        """A lone surrogate (a JSON "\\ud800" escape) in the Python API's words, before pydantic refuses it
        in its own; the question's other rules are the Query's."""
        if isinstance(v, str):
            check_text(v, "question")
        return v

    @field_validator("chunks", mode="before")
    @classmethod
    def _chunk_objects(cls, v: Any) -> Any:
        """Each chunk's shape in the Python API's words (an integer id is read as its decimal string, as in
        Python and JSONL; a wrong field is one line, not pydantic's union noise). The rest of the rules (the
        texts, unique ids) are the Query's, checked after the question, as in Python."""
        return check_chunk_shapes(v) if isinstance(v, list) else v

    @field_validator("method", mode="before")
    @classmethod
    def _method_spec(cls, v: Any) -> Any:
        """A method that is no string, or a spec over the length limit, in the Python API's words."""
        if not isinstance(v, str):
            raise InputTypeError(f"method must be a spec string such as 'top-k@5', got {_json_kind(v)}")
        check_spec_length(v, "method spec")
        return v

    @field_validator("expand", "rerank", mode="before")
    @classmethod
    def _ranking_spec(cls, v: Any, info: ValidationInfo) -> Any:
        """``expand`` and ``rerank``: a spec string (or null), within the length limit, in the Python API's words."""
        if v is not None and not isinstance(v, str):
            what = "'hop' or 'hop+links'" if info.field_name == "expand" else "'dense[model=nomic-v1.5]@50'"
            raise InputTypeError(f"{info.field_name} must be a spec string such as {what}, got {_json_kind(v)}")
        check_spec_length(v, f"{info.field_name} spec")
        return v

    @field_validator("stages", mode="before")
    @classmethod
    def _stage_specs(cls, v: Any) -> Any:
        """Each stage a spec string within the length limit, in the Python API's words."""
        if isinstance(v, list):
            for item in v:
                if not isinstance(item, str):
                    raise InputTypeError(
                        f"a stage must be a spec string such as 'reorder' or a Stage, got {_json_kind(item)}"
                    )
                check_spec_length(item, "stage spec")
        return v

    @field_validator("options", mode="before")
    @classmethod
    def _option_values(cls, v: Any) -> Any:
        """An object of option names to single values; each value's own rule is its declaration's,
        checked when the method is built (:func:`ctxsel.options.build_options`), as in Python."""
        if not isinstance(v, dict):
            raise InputTypeError(
                f'options must be an object of option names to values, e.g. {{"min_k": 2}}, got {_json_kind(v)}'
            )
        for key, value in v.items():
            if isinstance(value, (list, dict)):
                raise InputTypeError(
                    f"options.{key} must be one value (a number, a string, true, false or null), "
                    f"got {_json_kind(value)}"
                )
        return v

    _query: Query | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _one_door(cls, data: Any, handler: ModelWrapValidatorHandler[SelectRequest]) -> SelectRequest:
        """The request's question, chunks and scores go through the Query, the one door every surface
        shares, before any field is read: Python's rules, order and words ("0.1" and true are not scores;
        non-finite ones are the method's nan_policy's, as in Python). The Query is kept (:attr:`query`),
        so the service does not check or build the pool again."""
        query = None
        if isinstance(data, dict) and "question" in data:  # a question of any type: the Query words its type error
            chunks, scores, choices = data.get("chunks"), data.get("scores"), data.get("choices")
            choices = choices if isinstance(choices, list) else None
            if chunks is not None:  # a list, or the Query's words for what it is instead (a dict, a str)
                query = Query(data["question"], chunks, scores, choices=choices)
            else:  # a document is chunked later: its question and the scores' items are checked now
                Query(data["question"], [])
                if isinstance(scores, list):
                    check_score_items(scores)
                elif scores is not None:
                    as_scores(scores)
        model = handler(data)
        if model.chunks is not None:
            model._query = query
        return model

    @property
    def query(self) -> Query | None:
        """The request's Query as the door checked it (None for a document, which is chunked first)."""
        return self._query

    @property
    def pool(self) -> Sequence[Chunk] | None:
        """The request's chunks as the Query checked them (None for a document)."""
        return None if self._query is None else self._query.chunks

    @model_validator(mode="after")
    def _one_source(self) -> SelectRequest:
        if (self.chunks is None) == (self.document is None):
            raise InputError("give exactly one of 'chunks' (a list) and 'document' (a text)")
        if self.scores is not None and self.embeddings is not None:
            raise InputError("give 'scores' or 'embeddings', not both")
        if (self.embeddings is None) != (self.query_embedding is None):
            raise InputError("'embeddings' and 'query_embedding' go together")
        return self


_JSON_KINDS = {list: "an array", dict: "an object", str: "a string", bool: "true or false", type(None): "null"}


def _json_kind(v: Any) -> str:
    """What a JSON value is, as a message names it: ``an array``, ``a number``."""
    return _JSON_KINDS.get(type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)


class AnswerRequest(SelectRequest):
    """A selection, then the server's reader answers from it."""

    template: Literal["factoid-qa", "holobench-qa"] = "factoid-qa"
    max_answer_tokens: int | None = Field(None, ge=1, le=4096)


class ChunkOut(BaseModel):
    id: str
    text: str | None = None
    score: float | None
    rank: int
    n_tokens: int


class UsageOut(BaseModel):
    calls: int
    tokens_in: int
    tokens_out: int
    tokens_reused: int = Field(
        0, description="prompt tokens served by a cache of an earlier call's prefix (not evaluated)"
    )


class SelectionOut(BaseModel):
    """The Selection (``ctxsel.Selection.to_dict``)."""

    method: str
    k: int
    n_tokens: int
    n_candidates: int
    explanation: str
    config: dict[str, Any]
    ids: list[str] = Field(description="chosen chunk ids, most relevant first")
    reading_order: list[str] = Field(description="the same ids in document order")
    abstained: bool = Field(
        False, description="true when the abstain stage judged nothing relevant: the selection is empty on purpose"
    )
    abstain_reason: str | None = Field(None, description="why it abstained (null when it did not)")
    chunks: list[ChunkOut]
    trace: list[dict[str, Any]]
    usage: UsageOut
    meta: dict[str, Any]


class AnswerOut(BaseModel):
    answer: str
    raw: str
    template: str
    seconds: float
    usage: UsageOut = Field(description="every LLM call behind the answer: the selector's and the reader's")
    selection: SelectionOut
    meta: dict[str, Any]


class HealthOut(BaseModel):
    """``ok`` once the scorer is loaded and warm; ``starting`` while it loads;
    ``failed`` if it could not load (``message`` says why)."""

    status: Literal["ok", "starting", "failed"]
    version: str
    reader: str | None
    scorer: str
    in_flight: int
    max_concurrency: int
    queued: int = Field(0, description="requests waiting for a slot (this worker's)")
    max_queue: int = 0
    message: str | None = None


class ErrorOut(BaseModel):
    """Every error: a code word, a sentence saying what to fix, the request id."""

    error: str
    message: str
    status: int
    request_id: str | None
    detail: list[dict[str, Any]] | None = Field(None, description="validation errors (422 only)")


class OptionOut(BaseModel):
    """One declared option (``ctxsel.options``)."""

    name: str
    value: str = Field(description="what a value must be, e.g. 'an integer >= 0'")
    default: JSONScalar
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = Field(None, description="an exclusive upper bound")
    doc: str = ""
    server_flag: str | None = Field(None, description="set by this server flag; a request cannot set it")


class EntryOut(BaseModel):
    summary: str
    options: list[OptionOut]


class CatalogOut(BaseModel):
    """GET /methods: the methods and stages, with their options."""

    methods: dict[str, EntryOut]
    stages: dict[str, EntryOut]


def catalog() -> dict[str, Any]:
    """The methods and stages with their declared options, JSON-ready."""
    from ctxsel.options import declared
    from ctxsel.selectors import available_methods, get_selector_class
    from ctxsel.stages import available_stages, stage_class

    def options(cls: Any) -> list[dict[str, Any]]:
        out = []
        for info in declared(cls).values():
            default = info.default if isinstance(info.default, (str, int, float, bool, type(None))) else None
            out.append(
                {
                    "name": info.name,
                    "value": info.describe(),
                    "default": default,
                    "minimum": info.minimum,
                    "maximum": info.maximum,
                    "below": info.below,
                    "doc": info.doc,
                    "server_flag": info.server_flag,
                }
            )
        return out

    return {
        "methods": {
            name: {"summary": m.summary, "options": options(get_selector_class(name).Options)}
            for name, m in sorted(available_methods().items())
        },
        "stages": {
            name: {"summary": st.summary, "options": options(stage_class(name))}
            for name, st in sorted(available_stages().items())
        },
    }
