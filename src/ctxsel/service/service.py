"""The service's domain object: the settings, the scorer and its warm-up, the concurrency limiter,
and the selection work run under each request's deadline (its errors mapped to HTTP answers)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import numpy as np
from fastapi import Request

from ctxsel.chunking import chunk_text
from ctxsel.errors import (
    Cancelled,
    CtxselError,
    InputError,
    LLMError,
    MissingExtraError,
    RequestTooLarge,
    ServiceError,
)
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.ranking import Ranking
from ctxsel.ranking.rerank import build_second, check_server_rerank, parse_rerank
from ctxsel.scoring.base import cosine_scores
from ctxsel.selectors import ScoreCutSelector, check_options, get_selector, get_selector_class, parse_spec
from ctxsel.service.cancel import CancellableLLM, CancelToken, score_in_batches
from ctxsel.service.limiter import ConcurrencyLimiter, Hold
from ctxsel.service.memory import trim_heap
from ctxsel.service.metrics import Metrics
from ctxsel.service.middleware import log, request_id
from ctxsel.service.models import SelectRequest
from ctxsel.service.settings import ServiceSettings
from ctxsel.types import Chunk, ChunkLike, Selection

T = TypeVar("T")

_SERVER_ONLY_OPTIONS = {
    "llm": "LLM-routed methods use the server's reader (--reader)",
    "policy": "the LDAR policy is the server's (--ldar-policy); a request cannot name a file",
    "adapter": "a request cannot name a file on the server",
    "embed": "the server embeds with its own scorer",
}


#: below this a request frees too little for malloc_trim to pay for itself (a 1,000-chunk body is 0.4 MB)
_TRIM_AFTER_BYTES = 2 * 1024 * 1024
#: a score-only cut over at most this many chunks runs on the event loop (see Service.runs_inline)
_INLINE_MAX_CHUNKS = 1_000


def reader_failure(e: LLMError, rid: str | None) -> str:
    """What a client is told when the server's reader failed: the kind of failure, its HTTP status and
    the reader's own words, never where the reader is (its URL, host or port stay in the server's log)."""
    said = e.body
    for where in {e.url, urlsplit(e.url).netloc} - {""}:
        said = said.replace(where, "<reader>")
    said = _URL.sub("<reader>", said)
    status = f" (HTTP {e.status_code})" if e.status_code is not None else ""
    quoted = f": {said}" if said else ""
    return (
        f"the reader is unavailable: {type(e).what}{status}{quoted}; the server log has the details (request id {rid})"
    )


#: a URL in an error text (scheme://...)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")


class Service:
    """Holds the settings, the scorer (warmed at start-up, or built on first
    use), its readiness and the concurrency limiter."""

    def __init__(self, settings: ServiceSettings, scorer: Any = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.limiter = ConcurrencyLimiter(
            settings.max_concurrency, settings.max_queue, settings.queue_timeout_s, on_change=self.metrics.slots
        )
        self._scorer = scorer
        self._scorer_lock = threading.Lock()  # one model, one SQLite cache: score one request at a time
        self._seconds: dict[str, Any] = {}  # the rerank scorers requests named, by scorer spec
        #: "ok", or "starting" while the scorer loads (start_warm_up), or "failed" if it could not load
        self.status: Literal["ok", "starting", "failed"] = "ok"
        self.status_message: str | None = None
        self._warm_up_thread: threading.Thread | None = None
        #: the dense scorer keeps every text's vector in memory; past this many it forgets them (about
        #: 1.5 KB of vector plus the text each): a server's memory must not grow with every new document
        self.max_rows_in_memory = 50_000
        #: called (from the warm-up thread) if the scorer fails to load; ``ctxsel serve`` stops the server
        self.on_warm_up_failure: Callable[[], None] | None = None

    # -- building blocks ------------------------------------------------------

    def scorer(self) -> Any:
        if self._scorer is None:
            from ctxsel.scoring import get_scorer, parse_scorer_spec
            from ctxsel.scoring.registry import base_scorer

            s = self.settings
            name, given = parse_scorer_spec(s.scorer_spec)
            opts: dict[str, Any] = (
                {"model": s.model, "num_threads": s.threads} if base_scorer(name) in ("dense", "hybrid") else {}
            )
            if base_scorer(name) == "cascade":  # --threads goes to both parts; --model names a dense one
                opts = {"num_threads": s.threads}
            opts = {k: v for k, v in opts.items() if k not in given}
            self._scorer = get_scorer(s.scorer_spec, **opts)
        return self._scorer

    def check_size(self, question: str, texts: Sequence[str], what: str) -> None:
        """413 for a request over ``max_chunks`` or ``max_chars`` (question plus chunk text)."""
        s = self.settings
        if len(texts) > s.max_chunks:
            raise RequestTooLarge(
                "too_many_chunks",
                f"the request has {len(texts):,} {what}; this server takes at most {s.max_chunks:,} per request "
                "(its --max-chunks, ServiceSettings.max_chunks): send fewer chunks, or split the request",
            )
        n_chars = len(question) + sum(map(len, texts))
        if n_chars > s.max_chars:
            raise RequestTooLarge(
                "too_much_text",
                f"the request has {n_chars:,} characters of question and chunk text; this server takes at most "
                f"{s.max_chars:,} per request (its --max-chars, ServiceSettings.max_chars): send fewer or "
                "shorter chunks",
            )

    def chunks(self, req: SelectRequest) -> Sequence[ChunkLike]:
        if req.document is not None:
            self.check_size(req.question, [req.document], "characters")  # the text limit, before chunking it
            chunks = chunk_text(req.document, req.chunking, headings=req.headings)
            if not chunks:
                raise InputError("the document has no text to select from")
            self.check_size(req.question, [c.text for c in chunks], f"chunks (from the document, by {req.chunking})")
            return chunks
        items = req.chunks or []
        plain = set(map(type, items)) <= {str}  # texts, the common case: no list to build
        texts = cast("list[str]", items) if plain else [i if isinstance(i, str) else i["text"] for i in items]
        self.check_size(req.question, texts, "chunks")
        return req.pool if req.pool is not None else items  # checked by the request's Query

    def selector(self, req: SelectRequest, token: CancelToken) -> Any:
        name, spec_options = parse_spec(req.method)
        options = dict(req.options)
        for key in sorted(_SERVER_ONLY_OPTIONS.keys() & (set(spec_options) | set(options))):
            raise InputError(f"'{key}' is not an option a request can set: {_SERVER_ONLY_OPTIONS[key]}")
        cls = get_selector_class(name)  # imports the method's module
        # a request option replaces the spec's, as a keyword does in Python. The values are checked by the
        # method's declaration, the one check every surface runs (get_selector runs it again, to build), and
        # before the reader is asked for, as Python checks them before it needs the LLM; an option that
        # changes the whole process is refused
        check_options(name, {**spec_options, **options}, server=True)
        if cls.needs_llm and self.settings.reader is None:
            raise InputError(
                f"method {name!r} calls an LLM and this server has no reader: start the server with "
                "`ctxsel serve --reader local` (the bundled model) or `--reader URL --reader-model NAME` "
                "(an OpenAI-compatible server), or use a method that needs none (adaptive-k, top-k, ...)"
            )
        reader = self.settings.reader
        llm = None if reader is None else CancellableLLM(reader, token, self.metrics.llm_reply)
        # no --ldar-policy: the method's own default (ldar: the bundled, sha256-checked policy)
        resources = {"policy": self.settings.ldar_policy} if self.settings.ldar_policy else None
        return get_selector(req.method, llm=llm, resources=resources, **options)

    def given_scores(self, req: SelectRequest, n: int) -> np.ndarray | None:
        """The request's own relevance: ``scores``, or cosine similarity of its ``embeddings``;
        None when it brings neither (the server's scorer then scores, if the method needs it)."""
        if req.scores is not None:
            return np.asarray(req.scores, dtype=np.float64)  # their count: the Query's check
        if req.embeddings is not None:
            if len(req.embeddings) != n:
                raise InputError(f"got {len(req.embeddings)} embeddings for {n} chunks; they must match")
            assert req.query_embedding is not None  # the request model checks they come together
            return cosine_scores(req.query_embedding, req.embeddings)
        return None

    def ranking(self, req: SelectRequest, token: CancelToken) -> Ranking:
        """The request's chain: the server's scorer, then the request's rerank and expansion. A rerank's
        scorer is built once per spec and kept; it may name a bundled model only, never a path."""
        rerank = parse_rerank(req.rerank or None)
        second = None
        if rerank is not None:
            check_server_rerank(rerank)
            with self._scorer_lock:
                second = self._seconds.get(rerank.scorer)
                if second is None:
                    second = self._seconds[rerank.scorer] = build_second(rerank)
        return Ranking(_ServerScorer(self, token), rerank=rerank, expand=req.expand or None, second=second)

    def select(self, req: SelectRequest, token: CancelToken) -> Selection:
        # the Python API's order (ctxsel.select): the inputs (one Query), then the method and its options
        chunks = self.chunks(req)  # the size limits (413) first
        query = req.query  # the request's own, checked where the body was read
        if query is None or req.embeddings is not None:  # chunked here, or scored by the request's vectors
            query = Query(req.question, chunks, self.given_scores(req, len(chunks)), choices=req.choices)
        pipeline = Pipeline(self.selector(req, token), self.ranking(req, token), stages=req.stages)
        scored = pipeline.rank(query)
        token.check()
        return pipeline.run(query, scored)

    @staticmethod
    def runs_inline(req: SelectRequest) -> bool:
        """Whether ``req`` is small, bounded work that runs on the event loop rather than in a worker
        thread: its own scores for at most 1,000 chunks, no expansion, and a cut that reads scores only
        (adaptive-k, top-k, threshold, autocut: :attr:`ScoreCutSelector.cut_reads_tokens` False) with no
        ``max_tokens``. Such a cut is a sort and a scan, cheaper than the hop to a worker thread and
        back, which would be a large share of a small request's CPU (``benchmarks/serve_load.py``). Its
        worst case is a cut that keeps all 1,000 chunks, whose token counts are then read (tokenising
        1,000 new paragraphs, the slowest work that runs inline: docs/guide/service.md has its time).
        Anything that scores, calls an LLM, chunks a document or counts every chunk goes to a worker
        under the deadline."""
        if (
            req.scores is None
            or req.document is not None
            or req.expand
            or req.rerank
            or len(req.scores) > _INLINE_MAX_CHUNKS
        ):
            return False
        try:
            name, spec_options = parse_spec(req.method)
            cls = get_selector_class(name)
        except CtxselError:
            return False  # the worker raises it, in the usual words
        budget = "max_tokens" in spec_options or "max_tokens" in req.options
        return issubclass(cls, ScoreCutSelector) and not cls.cut_reads_tokens and not budget

    # -- running work under the deadline ----------------------------------------

    async def run(self, request: Request, fn: Callable[[CancelToken], T], *, inline: bool = False) -> T:
        """``fn(token)`` in a worker thread (``inline``: on the event loop, for :meth:`runs_inline`
        work); 504 at the deadline, mapped errors.

        At the deadline the token is set (the work stops at its next check)
        and the client gets 504 at once. The worker's hold on the request's
        concurrency slot is dropped when the worker ends, or
        ``release_grace_s`` after the deadline if it has not ended by then
        (a step that cannot be interrupted: one LLM call, one scoring batch).
        """
        slot = request.scope.get("state", {}).get("slot")
        hold = slot.hold() if slot is not None else None
        token = CancelToken()
        declared = request.headers.get("content-length", "")
        large = not declared.isdigit() or int(declared) > _TRIM_AFTER_BYTES

        def work() -> T:
            try:
                return fn(token)
            finally:
                if large:
                    trim_heap()
                if hold is not None:
                    hold.release()

        try:
            if inline:
                return work()
            with anyio.fail_after(self.settings.deadline_s):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except TimeoutError:
            token.cancel()
            if hold is not None:
                rid = request_id(request.scope)
                asyncio.get_running_loop().call_later(self.settings.release_grace_s, self._release_late, hold, rid)
            raise ServiceError(
                504,
                "deadline_exceeded",
                f"the request took longer than the server's {self.settings.deadline_s:g}-second deadline; its "
                "work was stopped. The server's operator sets the deadline (ctxsel serve --deadline SECONDS: a "
                "local reader on a CPU needs minutes for a long context); or send fewer chunks, precomputed "
                "scores, or a cheaper method",
            ) from None
        except Cancelled:  # cancelled without a timeout here: cannot happen, but never a 500
            raise ServiceError(504, "deadline_exceeded", "the request's work was stopped at its deadline") from None
        except RequestTooLarge as e:
            raise ServiceError(413, e.error, str(e)) from None
        except LLMError as e:  # the whole error (its URL too) in the server's log; the client gets no address
            rid = request_id(request.scope)
            log.warning("reader failed", extra={"fields": {"request_id": rid, "error": str(e)}})
            raise ServiceError(502, "llm_error", reader_failure(e, rid)) from None
        except MissingExtraError as e:  # the server lacks an extra: its operator's to fix, not the client's
            log.error(
                "missing dependency", extra={"fields": {"request_id": request_id(request.scope), "error": str(e)}}
            )
            raise ServiceError(500, "server_misconfigured", str(e)) from None
        except CtxselError as e:
            raise ServiceError(422, "invalid_input", str(e) or type(e).__name__) from None
        except Exception:  # a bug: 500 with the request id, the traceback in the server's log
            rid = request_id(request.scope)
            log.exception("unhandled error", extra={"fields": {"request_id": rid}})
            raise ServiceError(
                500, "internal_error", f"internal error; the server log has the details (request id {rid})"
            ) from None

    @staticmethod
    def _release_late(hold: Hold, rid: str | None) -> None:
        if hold.release():
            log.warning(
                "work past its deadline is still running; its concurrency slot is freed",
                extra={"fields": {"request_id": rid}},
            )

    # -- start-up -----------------------------------------------------------------

    def start_warm_up(self) -> None:
        """Build the scorer now (a bad --model fails here, at start-up) and load
        and warm it in a background thread; until it is done, /health says
        "starting" and /select and /answer answer 503 with Retry-After."""
        scorer = self.scorer()
        self.status, self.status_message = "starting", "loading and warming the scorer"
        self._warm_up_thread = threading.Thread(
            target=self._warm_up, args=(scorer,), name="ctxsel-warm-up", daemon=True
        )
        self._warm_up_thread.start()

    def wait_for_warm_up(self, timeout: float = 60.0) -> None:
        """Wait for a warm-up still under way (at shutdown: a model half-loaded in a daemon thread
        can abort the interpreter on exit)."""
        if self._warm_up_thread is not None:
            self._warm_up_thread.join(timeout)

    def _warm_up(self, scorer: Any) -> None:
        t0 = time.perf_counter()
        try:
            with self._scorer_lock:
                # a scorer that loads a model lazily (dense) loads it on a cache miss only: encode once directly
                encode = getattr(getattr(scorer, "model", None), "encode", None)
                if callable(encode):
                    encode(["ctxsel loads and warms its model at start-up."])
                scorer.score("Which scorer is this?", [Chunk(id="warm-up", text="ctxsel warms its scorer.")])
        except Exception as e:
            self.status, self.status_message = "failed", f"the scorer failed to load: {type(e).__name__}: {e}"
            log.error(
                "scorer failed to load",
                exc_info=log.isEnabledFor(logging.DEBUG),
                extra={"fields": {"scorer": self.settings.scorer, "error": self.status_message}},
            )
            if self.on_warm_up_failure is not None:
                self.on_warm_up_failure()
            return
        self.status, self.status_message = "ok", None
        log.info(
            "ready", extra={"fields": {"scorer": self.settings.scorer, "warm_up_s": round(time.perf_counter() - t0, 2)}}
        )

    def refusal(self) -> tuple[str, str] | None:
        """(error code, message) while the server cannot take work, else None."""
        if self.status == "starting":
            return "starting", "the server is still loading its scorer; retry shortly (GET /health says when)"
        if self.status == "failed":
            return "scorer_failed", f"{self.status_message}; see the server log, fix it and restart the server"
        return None


class _ServerScorer:
    """The server's scorer as a request's pipeline sees it: one request at a time (one model,
    one SQLite cache), a batch at a time under the request's deadline, and memory that stops
    growing with new texts (the vectors stay in the SQLite cache)."""

    def __init__(self, service: Service, token: CancelToken) -> None:
        self.service, self.token = service, token
        self.name = f"server:{service.settings.scorer}"

    def score_detailed(self, question: str, chunks: Sequence[Chunk]) -> tuple[np.ndarray, dict[str, Any]]:
        service = self.service
        self.token.acquire(service._scorer_lock)  # gives up at the deadline instead of queueing past it
        scorer = service.scorer()
        before = getattr(scorer, "rows_in_memory", None)
        try:
            out = score_in_batches(scorer, question, chunks, self.token)
            if before is not None:  # the dense scorer: new rows are texts it had to look up
                new = max(0, int(scorer.rows_in_memory) - int(before))
                service.metrics.embedded(max(0, len(chunks) - new), new)
            return out
        finally:
            if getattr(scorer, "rows_in_memory", 0) > service.max_rows_in_memory:
                scorer.clear_memory()
            service._scorer_lock.release()

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        return self.score_detailed(question, chunks)[0]

    @property
    def cache(self) -> Any:
        """The server scorer's vector cache, or None when it has no vectors (a stage then says so)."""
        scorer = self.service.scorer()
        return getattr(scorer, "cache", None) if callable(getattr(scorer, "embed", None)) else None

    @property
    def document_prefix(self) -> str:
        return str(getattr(self.service.scorer(), "document_prefix", ""))

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """The chunks' vectors, for the stages that compare chunks (``dedup``, ``mmr``): from the cache
        the scoring filled, under the same lock and deadline as scoring."""
        service = self.service
        self.token.acquire(service._scorer_lock)
        try:
            return np.asarray(service.scorer().embed(texts, prefix))
        finally:
            service._scorer_lock.release()


__all__ = ["Service"]
