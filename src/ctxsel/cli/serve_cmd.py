"""Serve ctxsel over HTTP: POST /select, POST /explain, POST /answer, GET|HEAD /health, GET /metrics, /openapi.json.

    CTXSEL_SERVE_TOKEN=s3cret ctxsel serve --port 8000 [--reader local|URL]

Logs one JSON line per request on stderr. The token comes from an
environment variable (never the command line, where `ps` shows it).
"""

from __future__ import annotations

import argparse
import os

from ctxsel.cli.common import add_llm_arguments, make_llm, non_negative_int

NAME = "serve"
HELP = "run the HTTP service (POST /select, /answer)"


def port(text: str) -> int:
    """An argparse type: a TCP port, 0..65535 (0: any free one)."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be at most 65535, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ctxsel.cli.scorer_args import scorer_spec
    from ctxsel.scoring.registry import available_scorers

    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    p.add_argument(
        "--port", type=port, default=8000, help="port (0: any free one; the 'listening' log line says which)"
    )
    p.add_argument(
        "--token-env",
        default="CTXSEL_SERVE_TOKEN",
        help="environment variable holding the bearer token; unset or empty: no token required",
    )
    p.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024, help="413 above this (default 32 MiB)")
    p.add_argument(
        "--max-chunks",
        type=int,
        default=10_000,
        help="413 for a request with more chunks than this, counted after chunking a document (default 10,000)",
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=4_000_000,
        help="413 for a request with more characters of question and chunk text (default 4,000,000)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help=f"seconds per request before 504; the request's work is stopped (default {SELECT_DEADLINE_S:g}; "
        f"{LOCAL_READER_DEADLINE_S:g} with --reader local, whose answers on CPU take minutes on a long context)",
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=4,
        help="/select and /answer requests in flight at once, per worker; more wait in the queue (default 4)",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=16,
        help="requests that may wait for a slot, per worker; one more gets 503 with Retry-After "
        "(default 16; 0: no queue)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=5.0,
        help="seconds a request may wait in the queue before 503 with Retry-After (default 5)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=10.0,
        help="seconds a request's whole body may take to arrive after its headers, else 408; the body is "
        "read before the request takes a slot (default 10)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=64 * 1024,
        help="431 for a request whose target and headers are larger than this (default 64 KiB)",
    )
    p.add_argument(
        "--max-headers", type=int, default=100, help="431 for a request with more headers than this (default 100)"
    )
    p.add_argument(
        "--timeout-keep-alive",
        type=non_negative_int,
        default=5,
        help="seconds an idle keep-alive connection stays open between requests (default 5); a client "
        "that keeps idle connections in a pool should drop them sooner than this",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes sharing the port, each with its own scorer, limits and memory (default 1)",
    )
    p.add_argument(
        "--scorer",
        default=None,
        type=scorer_spec,
        help="scores requests that bring neither scores nor embeddings (default: cascade, or dense with --model): "
        f"{', '.join(available_scorers())}, with options as cascade[head=100]",
    )
    p.add_argument("--model", default=None, help="embedding model for --scorer dense (default: bundled MiniLM)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for embedding")
    p.add_argument(
        "--ldar-policy", default=None, help="LDAR checkpoint for method 'ldar' (default: the bundled policy)"
    )
    p.add_argument(
        "--http",
        default="auto",
        choices=["auto", "httptools", "h11"],
        help="uvicorn's HTTP parser (default auto: httptools, in C, when installed; else h11, pure Python)",
    )
    p.add_argument(
        "--loop",
        default="auto",
        choices=["auto", "uvloop", "asyncio"],
        help="uvicorn's event loop (default auto: uvloop when installed; else asyncio)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written to stderr (default info: one line per request)",
    )
    add_llm_arguments(p)


#: The deadline of a request by default, and with a local reader, which reads a few hundred prompt
#: tokens a second on a CPU (a 7k-token context and its answer: about a minute on two cores).
SELECT_DEADLINE_S = 30.0
LOCAL_READER_DEADLINE_S = 600.0


def default_deadline(reader: str | None) -> float:
    """The request deadline when ``--deadline`` is not given: longer for an in-process local reader."""
    local = reader is not None and (reader == "local" or reader.startswith("local:"))
    return LOCAL_READER_DEADLINE_S if local else SELECT_DEADLINE_S


def run(args: argparse.Namespace) -> int:
    from ctxsel.service import ServiceSettings, run_server

    token = os.environ.get(args.token_env) or None
    reader = make_llm(args) if args.reader else None
    settings = ServiceSettings(
        token=token,
        max_body_bytes=args.max_body_bytes,
        max_chunks=args.max_chunks,
        max_chars=args.max_chars,
        deadline_s=default_deadline(args.reader) if args.deadline is None else args.deadline,
        max_concurrency=args.max_concurrency,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout,
        body_timeout_s=args.body_timeout,
        max_header_bytes=args.max_header_bytes,
        max_headers=args.max_headers,
        scorer=args.scorer,
        model=args.model,
        threads=args.threads,
        reader=reader,
        reader_name=getattr(reader, "model_id", None),
        ldar_policy=args.ldar_policy,
    )
    run_server(
        settings,
        args.host,
        args.port,
        log_level=args.log_level,
        timeout_keep_alive=args.timeout_keep_alive,
        http=args.http,
        loop=args.loop,
        workers=args.workers,
    )
    return 0
