"""Argument helpers shared by subcommands: argument types, input files, scorer and LLM flags."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxsel.chunking import DEFAULT_MAX_CHUNK_TOKENS, HEADINGS, chunk_text
from ctxsel.cli.config_file import one_line
from ctxsel.errors import InputError
from ctxsel.inputs import as_int, as_scores, check_argv, chunk_fields, scores_count_error, utf8_fault
from ctxsel.query import Query
from ctxsel.specs import spec_value
from ctxsel.types import Chunk, check_unique_ids

DEFAULT_MAX_BYTES = 20_000_000
CHUNKINGS = ("paragraphs", "sentences", "tokens", "semantic")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (``--limit -3`` is a usage error), read as in a spec (1e3, 5k)."""

    @one_line
    def parse(text: str) -> int:
        try:
            value = as_int("value", spec_value(text.strip()))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def add_split_arguments(p: argparse.ArgumentParser) -> None:
    """``--split train|test`` with the fraction and seed of the fixed split ``ctxsel train`` uses."""
    p.add_argument(
        "--split",
        choices=["train", "test"],
        default=None,
        help="only one part of the fixed train/test split `ctxsel train` uses",
    )
    p.add_argument("--train-fraction", type=float, default=0.8, help="with --split (default 0.8)")
    p.add_argument("--split-seed", type=int, default=0, help="with --split (default 0)")


def shard(text: str) -> tuple[int, int]:
    """An argparse type: ``I/N``, the I-th of N parts (1 <= I <= N)."""
    i, _, n = text.strip().partition("/")
    try:
        part, parts = int(i), int(n)  # no "/" leaves n empty: a ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 1/2, got {text!r}") from None
    if not 1 <= part <= parts:
        raise argparse.ArgumentTypeError(f"expected I/N with 1 <= I <= N, e.g. 1/2, got {text!r}")
    return part, parts


def load_examples(args: argparse.Namespace) -> list[Any]:
    """``--dataset``, cut to ``--split`` and then to the first ``--limit`` (the split is made over the whole
    dataset, so a question is on the same side whatever the limit)."""
    from ctxsel.datasets import load_dataset

    examples = load_dataset(args.dataset, limit=None if args.split else args.limit, hotpotqa_path=args.hotpotqa)
    if args.split:
        from ctxsel.datasets.splits import split_examples

        examples = split_examples(examples, args.split, args.train_fraction, args.split_seed)[: args.limit]
    return examples


def add_question_arguments(p: argparse.ArgumentParser) -> None:
    """``--question TEXT`` or ``--question-file PATH`` (one is required)."""
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--question", help="the question to select (and answer) for")
    g.add_argument(
        "--question-file",
        metavar="PATH",
        help="read the question from this UTF-8 file (for a question too long for the command line; "
        "'-' reads standard input); surrounding whitespace is dropped",
    )


def question_from(args: argparse.Namespace) -> str:
    """The question given by --question or --question-file, checked (non-empty)."""
    if args.question_file is not None:
        if args.question_file == "-" and getattr(args, "document", None) == "-":
            raise InputError("--document - and --question-file - both read standard input; give one of them a file")
        text = read_text_file(args.question_file, getattr(args, "max_bytes", DEFAULT_MAX_BYTES), "--question-file")
        question = text.strip()
        if not question:
            raise InputError(
                f"--question-file {args.question_file}: the file is empty (or only whitespace); "
                "write the question in it"
            )
        try:
            return Query(question, []).question  # the question's rules, before the document is read
        except ValueError as e:
            raise InputError(f"--question-file {args.question_file}: {e}") from None
    check_argv(args.question, "--question", "write the question to a UTF-8 file and pass --question-file")
    try:
        return Query(args.question, []).question
    except ValueError as e:
        raise InputError(f"--question: {e}") from None


def add_document_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--document",
        required=True,
        metavar="PATH",
        help="a UTF-8 text file (chunked, see --chunking), a .jsonl of {id, text} chunks, '-': a text on "
        "standard input, or example:handbook, the bundled example",
    )


def add_choice_argument(p: argparse.ArgumentParser) -> None:
    """``--choice TEXT`` (repeated), the word the API and HTTP use; ``--option`` is its older alias."""
    p.add_argument(
        "--choice",
        "--option",
        action="append",
        dest="choices",
        default=None,
        metavar="TEXT",
        help="an answer option of a multiple-choice question, in letter order (repeat per option: A, B, ...; "
        "--option is an alias)",
    )


def add_chunking_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chunking",
        default="paragraphs",
        choices=CHUNKINGS,
        help="how a text --document is split: paragraphs (blank lines; default), sentences, tokens "
        "(600-token windows) or semantic (sentences grouped by embedding similarity)",
    )
    p.add_argument(
        "--headings",
        default="attach",
        choices=HEADINGS,
        help="Markdown headings in a text --document: attach (default: each heading joins the chunk of text "
        "after it) or separate (a heading paragraph is a chunk of its own)",
    )
    p.add_argument(
        "--max-chunk-tokens",
        type=positive_int,
        default=DEFAULT_MAX_CHUNK_TOKENS,
        metavar="N",
        help=f"split paragraphs, sentences and segments longer than N cl100k tokens at sentence, "
        f"then word boundaries (default {DEFAULT_MAX_CHUNK_TOKENS:,})",
    )
    p.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"refuse a --document larger than N bytes (default {DEFAULT_MAX_BYTES:,}); a guard against "
        "embedding a huge file by mistake",
    )


def add_scores_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scores",
        metavar="FILE",
        default=None,
        help="precomputed relevance scores, one per chunk in document order, instead of a scorer: a JSON "
        "list of numbers, or one number per line (blank lines skipped)",
    )


def read_scores(path: str, n_chunks: int) -> list[float]:
    """Scores from ``--scores FILE``: a JSON list, or one float per line; exactly one per chunk."""
    text = read_text_file(path, DEFAULT_MAX_BYTES, "--scores").strip()
    values: list[Any]
    if text.startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(
                f"--scores {path}: not a valid JSON list ({e.msg} at line {e.lineno}); "
                "write a JSON list of numbers or one number per line"
            ) from None
    else:
        values = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:  # a whole number stays an int, as in a JSON list: one too large for a float is refused, not inf
                values.append(int(line) if line.strip().lstrip("+-").isdigit() else float(line))
            except ValueError:
                raise InputError(
                    f"--scores {path}:{i}: {line.strip()[:40]!r} is not a number; write one number "
                    "per line (or a JSON list)"
                ) from None
    if not isinstance(values, list):
        raise InputError(f"--scores {path}: write a JSON list of numbers or one number per line")
    try:  # the rule every surface applies; NaN or infinity is the method's nan_policy's to decide
        out: list[float] = as_scores(values).tolist()
    except InputError as e:
        raise InputError(f"--scores {path}: {e}") from None
    if len(out) != n_chunks:
        raise scores_count_error(len(out), n_chunks, f"--scores {path}", " (check --chunking and --max-chunk-tokens)")
    return out


#: Bytes that never occur in text: a file holding them is binary (a PDF, an image, an archive).
_BINARY_BYTES = frozenset(range(0, 9)) | frozenset(range(14, 32)) - {27}


def read_text_file(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES, flag: str = "--document") -> str:
    """A UTF-8 text file, or standard input for ``-`` (a BOM is dropped); a directory, a binary file or
    another encoding is a usage error that says what to pass instead."""
    if str(path) == "-":
        import sys

        data = sys.stdin.buffer.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise InputError(
                f"{flag} - (standard input) is above the {max_bytes:,}-byte limit (--max-bytes); "
                "split it, or raise --max-bytes if you mean it"
            )
        return _decode(data, f"{flag} - (standard input)", "input.txt")
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {p} is a directory; pass one text file (e.g. {p}/report.md), or a .jsonl of chunks")
    if not p.exists():
        raise FileNotFoundError(f"{flag}: no such file: {p}")
    if not p.is_file():
        raise InputError(f"{flag} {p} is not a regular file; pass a text file")
    size = p.stat().st_size
    if size > max_bytes:
        raise InputError(
            f"{flag} {p} is {size:,} bytes, above the {max_bytes:,}-byte limit (--max-bytes); "
            "split it, or raise --max-bytes if you mean it (embedding it will take long)"
        )
    return _decode(p.read_bytes(), f"{flag} {p}", p.name)


def _decode(data: bytes, what: str, name: str) -> str:
    """``data`` as UTF-8 text (minus a leading BOM); ``what`` names the input in the errors, ``name``
    is the file name their iconv example uses."""
    stem, dot, suffix = name.rpartition(".")
    converted = f"{stem}.utf8.{suffix}" if dot else f"{name}.utf8"
    head = data[:8192]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(
            f"{what} is not valid UTF-8: it starts with a UTF-16 byte order mark; convert it, e.g. "
            f"iconv -f utf-16 -t utf-8 {name} > {converted}"
        )
    if head and (b"\0" in head or sum(b in _BINARY_BYTES for b in head) > len(head) // 100):
        raise InputError(
            f"{what} looks like a binary file (control bytes such as NUL), not text; ctxsel reads UTF-8 text "
            "or .jsonl: extract the text first (e.g. pdftotext file.pdf file.txt)"
        )
    try:
        return data.decode("utf-8-sig")  # utf-8, minus a leading byte order mark
    except UnicodeDecodeError as e:
        raise InputError(
            f"{what} is not valid UTF-8 ({utf8_fault(e)}); convert it to UTF-8 from its "
            f"encoding, e.g. iconv -f cp1252 -t utf-8 {name} > {converted} (for Windows or Latin-1 "
            "text)"
        ) from None


def load_document_chunks(
    path: str,
    chunking: str,
    max_bytes: int,
    max_chunk_tokens: int | None = DEFAULT_MAX_CHUNK_TOKENS,
    headings: str = "attach",
) -> list[Chunk]:
    """A text document (``-``: standard input; ``example:NAME``: a bundled example, e.g.
    ``example:handbook``), or a .jsonl of {"id", "text"} chunks."""
    from ctxsel.datasets import EXAMPLE_PREFIX, example_path

    if path.startswith(EXAMPLE_PREFIX):
        path = str(example_path(path.removeprefix(EXAMPLE_PREFIX)))
    text = read_text_file(path, max_bytes)
    if path.endswith(".jsonl"):
        rows: list[dict[str, Any]] = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{i}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise InputError(f"{path}:{i}: expected an object with 'text' (a string) and 'id'")
            n = len(rows)  # the one check of a chunk object (ctxsel.inputs), as Python and HTTP apply it
            rows.append(chunk_fields(obj, n, default_id=str(n), extra=True, where=f"{path}:{i}: "))
        chunks: list[Chunk] = [Chunk(**f) for f in rows]  # every line's shape and id, then the texts: Python's order
        check_unique_ids(chunks)
    else:
        chunks = chunk_text(
            text,
            chunking,  # type: ignore[arg-type]
            max_chunk_tokens=max_chunk_tokens,
            headings=headings,  # type: ignore[arg-type]
        )
    if not chunks:
        raise InputError(f"--document {path} has no text to select from (it is empty or only whitespace)")
    return chunks


DEVICE_HELP = (
    "with 'local': the bundled model under transformers on this device (bf16 on cuda, fp32 on cpu), many "
    "prompts per generate call, instead of llama.cpp (needs the picker extra)"
)
BATCH_HELP = "with --device: prompts per generate call (default 64 on cuda, 8 on cpu)"


def add_llm_arguments(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str = "--reader", required: bool = False
) -> None:
    """``--reader local|URL`` and its settings (``--judge`` reuses the same shape)."""
    name = flag.lstrip("-")
    p.add_argument(
        flag,
        required=required,
        default=None,
        help="'local' (the default bundled model via llama.cpp, offline), 'local:NAME' (a bundled model: "
        "qwen-1.5b, qwen-0.5b, gemma-270m), 'local:PATH.gguf', or the base URL of an "
        "OpenAI-compatible server (vLLM, llama.cpp, Ollama, a hosted API)",
    )
    p.add_argument(
        f"{flag}-model",
        default=None,
        help="model name the server serves; with 'local', a bundled model's name or a GGUF file",
    )
    p.add_argument(
        f"{flag}-mode",
        default="chat",
        choices=["chat", "completions"],
        help="HTTP endpoint: chat (messages) or completions (raw prompt, for base models)",
    )
    p.add_argument(f"{flag}-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument(f"{flag}-timeout", type=float, default=120.0, help="seconds per HTTP attempt")
    if name == "reader":
        p.add_argument(
            "--reader-window",
            type=positive_int,
            default=None,
            metavar="N",
            help="an HTTP reader's context window in tokens (prompt + answer), e.g. vLLM's --max-model-len: "
            "a selection that does not fit is cut to its best-ranked chunks (counted with cl100k, "
            "keeping 10%% + 64 tokens free). With 'local' the window is --n-ctx",
        )
        p.add_argument(
            "--n-ctx",
            type=positive_int,
            default=None,
            help="local model window in its tokens (default: what the model was trained for, 32k)",
        )
        p.add_argument("--device", choices=["cpu", "cuda"], default=None, help=DEVICE_HELP)
        p.add_argument("--reader-batch", type=positive_int, default=None, metavar="N", help=BATCH_HELP)
        p.add_argument(
            "--llm-threads",
            type=positive_int,
            default=None,
            help="llama.cpp threads (default: the usable cores; use 1 where other busy processes share them)",
        )
        p.add_argument(
            "--llm-cache",
            default=None,
            help="SQLite response cache (default $CTXSEL_CACHE_DIR/llm_responses.sqlite); 'off' disables it",
        )


def make_llm(args: argparse.Namespace, flag: str = "reader") -> Any:
    """The client named by ``--reader``/``--judge``, wrapped in the response cache unless it is off."""
    import os

    from ctxsel.llm.cache import CachedClient, ResponseCache

    where = getattr(args, flag)
    model = getattr(args, f"{flag}_model")
    if where == "local" or (where or "").startswith("local:"):
        from ctxsel.llm.local import LocalLlamaClient

        if getattr(args, f"{flag}_window", None) is not None:
            raise InputError(f"--{flag}-window is for HTTP readers; a local model's window is --n-ctx")
        named = where.partition(":")[2] or model
        client: Any
        if flag == "reader" and getattr(args, "device", None):  # the bundled model under transformers, batched
            from ctxsel.llm.hf_reader import batching_reader

            client = batching_reader(named, args.device, getattr(args, "n_ctx", None), args.reader_batch)
        else:
            client = LocalLlamaClient(
                named, n_ctx=getattr(args, "n_ctx", None), n_threads=getattr(args, "llm_threads", None)
            )
    elif getattr(args, "device", None) and flag == "reader":
        raise InputError("--device is for --reader local (the bundled model under transformers)")
    elif where and where.startswith(("http://", "https://")):
        from ctxsel.llm.openai_compat import OpenAICompatClient

        if not model:
            raise InputError(f"--{flag}-model is required with an HTTP {flag}: the model name the server serves")
        client = OpenAICompatClient(
            where,
            model,
            api_key=os.environ.get(getattr(args, f"{flag}_api_key_env")) or "",
            mode=getattr(args, f"{flag}_mode"),
            timeout=getattr(args, f"{flag}_timeout"),
            context_window=getattr(args, f"{flag}_window", None),
        )
    else:
        raise InputError(
            f"--{flag} must be 'local', 'local:NAME', 'local:PATH.gguf' or an http(s):// base URL, got {where!r}"
        )
    cache = getattr(args, "llm_cache", None)
    if cache == "off":
        return client
    return CachedClient(client, ResponseCache(cache) if cache else ResponseCache())


def make_judge(args: argparse.Namespace) -> Any:
    """The ``--judge`` LLM judge, or None without one."""
    from ctxsel.judge import LLMJudge

    return LLMJudge(make_llm(args, "judge")) if getattr(args, "judge", None) else None


def auto_template(example: Any, answer_format: str = "free") -> str:
    """The reader's prompt for ``--template auto``: the one its answer kind is graded by."""
    from ctxsel.grading import answer_kind

    kind = answer_kind(example)
    if kind == "choice":
        return "multiple-choice"
    if kind == "list":
        return "holobench-json" if answer_format == "structured" else "holobench-qa"
    return "factoid-qa"


def make_reader_and_judge(args: argparse.Namespace, template: str) -> tuple[Any, Any]:
    """(reader, judge) from the --reader/--judge flags: the one place a run builds its LLM clients
    (eval, rescore, LDAR's LLM reward); module level so Ray workers can call it."""
    from ctxsel.reader import Reader

    return Reader(make_llm(args), template), make_judge(args)
