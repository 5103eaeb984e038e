"""The scorer flags shared by select, answer and eval: --scorer, --expand, --rerank and the dense model's
flags, checked when parsed (one line, no usage dump), and the scorer and ranking chain they name."""

from __future__ import annotations

import argparse

from ctxsel.cli.common import positive_int
from ctxsel.cli.config_file import one_line
from ctxsel.ranking import Ranking
from ctxsel.scoring.base import Scorer


def add_scorer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scorer",
        default=None,
        type=scorer_spec,
        help="how chunks are scored: cascade (the default: hybrid over the pool, accurate over its top 5,000 "
        "tokens: cascade[head=N|head_tokens=T,fast=hybrid,accurate=accurate]; dense where its parts are not "
        "installed), dense, bm25, keywords, or hybrid (dense + BM25; options as "
        "hybrid[dense=1,bm25=0.25,fusion=minmax|rrf]); presets: fast (= dense, the bundled MiniLM) and "
        "accurate (= dense[model=nomic-v1.5]: higher recall, far slower; see ctxsel env). --model, --backend "
        "or --long-chunks without --scorer mean dense",
    )
    p.add_argument(
        "--expand",
        default=None,
        metavar="SPEC",
        type=expansion_spec,
        help="re-rank before the cut: hop (second-hop re-scoring), links (mention links), or hop+links, "
        "with options as hop[m=1,weight=0.7] and links[m=1,boost=0.3] (default: off)",
    )
    p.add_argument(
        "--rerank",
        default=None,
        metavar="SCORER@M",
        type=rerank_spec,
        help="a second stage before --expand and the cut: SCORER re-scores the first stage's top M chunks, e.g. "
        "'dense[model=nomic-v1.5]@50' (see ctxsel.ranking.rerank; default: off)",
    )
    p.add_argument("--model", default=None, help="embedding model path or name (default: bundled all-MiniLM-L6-v2)")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads for embedding (default: torch's choice; ONNX: the usable cores, at most 4)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="how the dense scorer runs the model: auto (default), torch, onnx or onnx-int8 for MiniLM and "
        "sentence-transformers models; auto, onnx-int8, onnx, llama-f16 or llama-q8_0 for GGUF embedders (nomic-v1.5); "
        "checked against the model when the scorer is built. auto: for the bundled MiniLM with "
        "onnxruntime installed, ONNX Runtime int8 on a CPU with VNNI and fp32 elsewhere; else torch",
    )
    p.add_argument(
        "--long-chunks",
        default="truncate",
        choices=["truncate", "max_window"],
        help="a chunk longer than the dense model's window (256 tokens for MiniLM): truncate (read its "
        "start only, default; a warning counts them) or max_window (score overlapping windows and "
        "keep the best: slower)",
    )


@one_line
def scorer_spec(value: str) -> str:
    """``--scorer``: a known scorer name, with or without ``[options]`` (checked when parsed)."""
    from ctxsel.scoring import available_scorers, parse_scorer_spec

    try:
        name, _ = parse_scorer_spec(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if name not in available_scorers():
        raise argparse.ArgumentTypeError(f"unknown scorer {name!r}; choose {', '.join(available_scorers())}")
    return value


@one_line
def expansion_spec(value: str, rerank: bool = False) -> str:
    """``--expand``: an expansion spec, or with ``rerank`` ``--rerank``'s ``SCORER@M`` (checked when parsed)."""
    from ctxsel.ranking import parse_expansion
    from ctxsel.ranking.rerank import parse_rerank

    try:
        (parse_rerank if rerank else parse_expansion)(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


@one_line
def rerank_spec(value: str) -> str:
    """``--rerank``: ``SCORER@M`` (checked when parsed)."""
    return expansion_spec(value, rerank=True)


def make_scorer(args: argparse.Namespace, progress: bool = True, spec: str | None = None) -> Scorer:
    """The scorer the flags name (``spec`` overrides ``--scorer``). The dense flags (--model, --threads,
    --backend, --long-chunks) go to a dense scorer and a hybrid's dense part."""
    from ctxsel.scoring import get_scorer, parse_scorer_spec
    from ctxsel.scoring.registry import base_scorer

    spec = spec or args.scorer or cli_default_scorer(args)
    name, options = parse_scorer_spec(spec)
    if base_scorer(name) in ("dense", "hybrid"):  # a preset's own options win over flags left at None
        dense_flags = {
            "model": args.model,
            "num_threads": args.threads,
            "show_progress": progress,
            "backend": getattr(args, "backend", "auto"),
            "long_chunks": getattr(args, "long_chunks", "truncate"),
        }
        options = {**{k: v for k, v in dense_flags.items() if k not in options}, **options}
    elif base_scorer(name) == "cascade":  # --threads and progress go to both of its parts
        flags = {"num_threads": args.threads, "show_progress": progress}
        options = {**{k: v for k, v in flags.items() if k not in options}, **options}
    return get_scorer(name, **options)


def cli_default_scorer(args: argparse.Namespace) -> str:
    """The scorer when ``--scorer`` is left out: ``dense`` when a dense flag (--model, --backend,
    --long-chunks) names what the dense model does, else the default scorer."""
    from ctxsel.scoring import default_scorer

    dense_flags = (
        args.model is not None
        or getattr(args, "backend", "auto") != "auto"
        or getattr(args, "long_chunks", "truncate") != "truncate"
    )
    return "dense" if dense_flags else default_scorer()


def make_ranking(
    args: argparse.Namespace,
    progress: bool = True,
    *,
    given_scores: bool = False,
    scorer: Scorer | None = None,
    second: Scorer | None = None,
) -> Ranking:
    """The chain the flags name: ``scorer`` (by default :func:`make_scorer`'s), then ``--rerank`` (its scorer
    gets --threads; ``second``: one already built, shared), then ``--expand``. With ``given_scores`` (--scores)
    the flags' scorer is built only where the chain scores again (a second hop: ``--expand hop``)."""
    from ctxsel.ranking.rerank import build_second, parse_rerank

    rerank = parse_rerank(getattr(args, "rerank", None) or None)
    expand = getattr(args, "expand", None) or None
    if rerank is not None and second is None:
        second = build_second(rerank, num_threads=args.threads, show_progress=progress)
    if scorer is None and (not given_scores or expand is not None):
        scorer = make_scorer(args, progress)
    return Ranking(scorer, rerank=rerank, expand=expand, second=second)


def add_stage_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stage",
        action="append",
        default=None,
        metavar="SPEC",
        type=stage_spec,
        help="a stage after the cut, e.g. reorder (lost-in-the-middle order); repeat for more, run in order "
        "(see ctxsel.stages; ctxsel env lists them)",
    )


@one_line
def stage_spec(value: str) -> str:
    """``--stage``: a registered stage with its options (checked when parsed)."""
    from ctxsel.stages import get_stage

    try:
        get_stage(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value
