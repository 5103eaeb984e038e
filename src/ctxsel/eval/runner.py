"""``evaluate``: every method on every example, one result line each.

Scores are computed once per example and shared by all score-based
methods. With a ``reader``, each selection is also read by the LLM and the
answer scored (SubEM, or the LLM judge / set overlap for aggregation data);
the row then carries the answer, its score, LLM calls, tokens in and out and
wall time. A resumed run skips finished (example, method) rows, and a cached
reader (``CachedClient``) serves any call finished before a kill. Results go
to ``results.jsonl`` as they are made (resumable, see
results.py); ``summary.json`` / ``summary.md`` and the plots are rewritten
atomically at the end from all lines, so a resumed run reports the same as
an uninterrupted one.

One example's failure is that row's error, never the end of the run: any
exception from one (example, method) -- an LLM error, a selector's
ValueError, an oracle without gold ids -- is caught, and the row is written
with ``error`` (``"Type: message"``) and ``error_stage`` (``score``, ``select`` or
``read``) and whatever was measured before the failure (a selection's
recall when only the reading failed); the summary counts such rows as
``errors`` and averages every metric over the rows that have it. On resume
an errored row is retried by default (``retry_errors=True``: the usual
causes -- a server down, a timeout -- are transient, and a cached reader
repeats no finished call); its new row replaces the old one in the
summary, while results.jsonl keeps both lines (append-only). Pass
``retry_errors=False`` (``ctxsel eval --no-retry-errors``) to keep errored
rows as they are. KeyboardInterrupt and other non-``Exception`` exits still
end the run, and the resume picks up from there.

Reference rows: ``closed-book`` reads no context and ``oracle`` exactly the
gold chunks (the runner passes ``Example.gold_ids`` to selectors with
``takes_gold_ids``). With a reader that knows its window, a selection that
does not fit is cut (``ctxsel.reader.fit_to_window``); the row says so in
``cut`` (1/0), ``tokens_cut`` and ``cut_detail``.
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsel import metrics
from ctxsel._version import __version__
from ctxsel.errors import InputError
from ctxsel.eval.lock import OutputLock
from ctxsel.eval.reading import error_fields, read_group, read_many, read_one, selects_in_threads, warn
from ctxsel.eval.report import plot_similarity_curve, safe_filename, summarize, summarize_ci, write_reports
from ctxsel.eval.results import ResultLog, write_atomic
from ctxsel.judge import LLMJudge
from ctxsel.llm.prompts import MULTIPLE_CHOICE
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.ranking import Ranking, as_ranking
from ctxsel.ranking.chain import scores_id
from ctxsel.reader import Reader
from ctxsel.scoring import Scorer, get_scorer
from ctxsel.selectors import get_selector, get_selector_class, parse_spec
from ctxsel.stages import Stage, parse_stages
from ctxsel.types import Example, Selection

if TYPE_CHECKING:
    from ctxsel.eval.ray_engine import RayOptions, RayRunInfo

logger = logging.getLogger(__name__)

#: Where the examples run: this process, or a Ray cluster (``ctxsel eval --engine ray``).
ENGINES: tuple[str, ...] = ("local", "ray")

# The comparison set: Adaptive-k's three strategies, autocut N=1,
# fixed top-k and fixed-n tokens, and full context.
DEFAULT_METHODS: tuple[str, ...] = (
    "adaptive-k@largest_gap",
    "adaptive-k@moving_avg",
    "adaptive-k@2diff_spike",
    "autocut@1",
    "top-k@1",
    "top-k@5",
    "top-k@10",
    "top-k@25",
    "top-k@50",
    "top-n-tokens@1k",
    "top-n-tokens@5k",
    "top-n-tokens@10k",
    "top-n-tokens@25k",
    "top-n-tokens@50k",
    "full",
)


def evaluate(
    examples: Sequence[Example],
    methods: Sequence[str] = DEFAULT_METHODS,
    *,
    output_dir: str | Path,
    scorer: Ranking | Scorer | str | None = None,
    rankings: Mapping[str, Ranking | Scorer] | None = None,
    dataset_name: str = "",
    overwrite: bool = False,
    progress: bool = True,
    plot_example: str | None = None,
    seed: int = 0,
    reader: Reader | None = None,
    judge: LLMJudge | None = None,
    engine: str = "local",
    ray_options: RayOptions | None = None,
    retry_errors: bool = True,
    on_ray_run: Callable[[RayRunInfo], None] | None = None,
    resources: Mapping[str, Any] | None = None,
    ci: str = "bootstrap",
    compare: str | None = None,
    read_batch: int | None = None,
    stages: Sequence[str | Stage] | None = None,
) -> dict[str, Any]:
    """Run ``methods`` over ``examples``; return the per-method summary.

    Methods that need an LLM (``self-route``, ``sage``) use the reader's
    client and so need a ``reader``. Multiple-choice examples are read with
    their options after the question, and SAGE gets them too.
    ``engine="ray"`` runs the examples on Ray Data
    (``ctxsel.eval.ray_engine``; ``ray_options`` says where and how wide)
    and writes the same results, row for row, as the default ``"local"``.
    ``retry_errors``: on resume, run again the rows that ended in an error
    (default), or keep them. ``on_ray_run`` is called with the Ray engine's
    :class:`~ctxsel.eval.ray_engine.RayRunInfo` (actors, CPUs, seconds) when it ran.
    ``ci``: each mean's 95% interval (``"bootstrap"``, the default) or none; ``compare``: a row label
    that every other row is compared with, paired, in summary.json's ``comparisons``
    (``ctxsel.eval.stats``). ``resources`` go to every method that takes an option of that name and whose spec does not
    set it (``{"policy": PATH}``: one LDAR policy for every ``ldar`` row, as ``--policy``).
    ``read_batch``: questions whose selections are read in one batch (None: a group of them when the
    reader's client generates many prompts at once, ``ctxsel.eval.reading``; else one at a time).

    ``scorer`` is a scorer, a scorer spec (None: the default scorer) or a whole :class:`~ctxsel.ranking.Ranking` chain
    (with a rerank or an expansion). ``rankings`` compares chains side by side: label -> Ranking
    (or a Scorer, a chain of one); every method then runs under every ranking, in rows labelled ``"METHOD on LABEL"``,
    and ``scorer`` is unused. Rows of an expanded ranking carry ``expansion``
    (which chosen chunks came in by expansion, and from where). ``stages`` run after every method's
    cut, in order (``["reorder"]``: lost-in-the-middle order, which the reader then reads); the
    config records them.
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose {' or '.join(ENGINES)}")
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"the output {out} is a file, not a folder: pass a folder for the results (--output)")
    out.mkdir(parents=True, exist_ok=True)
    make_selector = functools.partial(_make_selector, resources=dict(resources or {}))
    stage_list = parse_stages(stages)  # a bad stage fails here, before any work
    rows_of = functools.partial(example_rows, stages=stage_list)
    with OutputLock(out):  # one run per folder: a second fails at once, naming this one's pid
        results_path = out / "results.jsonl"
        if results_path.is_dir():
            raise InputError(f"{results_path} is a folder, not a results file: move it away or pass another --output")
        if overwrite and results_path.exists():
            results_path.unlink()
        if rankings:
            chains = {label: as_ranking(r) for label, r in rankings.items()}
            by_method: dict[str, Ranking] = {}
            selectors = {}
            for label, ranking in chains.items():
                for m in methods:
                    selectors[f"{m} on {label}"] = make_selector(m, reader)
                    by_method[f"{m} on {label}"] = ranking
            methods = list(selectors)
            sc: Any = by_method
            scorer_id: Any = {label: scores_id(r) for label, r in chains.items()}
            first_ranking = next(iter(chains.values()))
        else:
            sc = first_ranking = as_ranking(get_scorer(scorer) if scorer is None or isinstance(scorer, str) else scorer)
            selectors = {m: make_selector(m, reader) for m in methods}  # fail fast on bad specs
            scorer_id = scores_id(sc)
        if compare is not None and compare not in selectors:
            raise InputError(
                f"--compare {compare!r} is not one of this run's rows: {', '.join(selectors)} "
                "(add it to --methods, or --compare none for no comparisons)"
            )
        config = {
            "dataset": dataset_name,
            "n_examples": len(examples),
            "methods": list(methods),
            "method_configs": {m: s.config() for m, s in selectors.items()},
            **({"stages": [st.spec() for st in stage_list]} if stage_list else {}),
            "scorer": scorer_id,
            "seed": seed,
            "ci": summarize_ci(ci),
            "compare": compare,
            "engine": engine,
            "reader": None
            if reader is None
            else {
                "model": reader.client.model_id,
                "template": reader.template.key,
                "max_answer_tokens": reader.max_answer_tokens,
                **_window_config(reader),
            },
            # free text (the paper's template) or structured (a JSON answer by answer kind); the template says it too
            "answer_format": None if reader is None else ("structured" if reader.structured else "free"),
            "judge": None if judge is None else judge.model_id,
            "ctxsel_version": __version__,
            "python": platform.python_version(),
        }
        _check_config(out / "config.json", config, resuming=results_path.exists())
        write_atomic(out / "config.json", json.dumps(config, indent=2))

        from tqdm.auto import tqdm

        with ResultLog(results_path, retry_errors=retry_errors) as log:
            todo = [e for e in examples if not all(log.done(e.id, m) for m in methods)]
            if engine == "ray" and todo:
                from ctxsel.eval.ray_engine import run_on_ray

                info = run_on_ray(
                    todo,
                    selectors,
                    sc,
                    log,
                    reader=reader,
                    judge=judge,
                    options=ray_options,
                    progress=progress,
                    make_selector=make_selector,
                    rows=rows_of,
                )
                if on_ray_run is not None:
                    on_ray_run(info)
            elif reader is not None and (group := read_group(reader, read_batch)) > 1:
                bar = tqdm(total=len(todo), desc="eval", unit="q", disable=not progress)
                for i in range(0, len(todo), group):  # a batching reader reads a group's selections at once
                    batch = todo[i : i + group]
                    for row in group_rows(batch, sc, selectors, reader, judge, skip=log.done, stages=stage_list):
                        log.append(row)
                    bar.update(len(todo[i : i + group]))
                bar.close()
            else:
                for ex in tqdm(todo, desc="eval", unit="q", disable=not progress):
                    for row in rows_of(ex, sc, selectors, reader, judge, skip=log.done):
                        log.append(row)
            ids = {e.id for e in examples}
            rows = [r for r in log.latest_rows() if r["method"] in selectors and r["example_id"] in ids]

        summary = summarize(rows, list(methods), ci=ci, seed=seed)
        write_reports(out, summary, rows, config)
        if examples:
            ex = next((e for e in examples if e.id == plot_example), examples[0])
            try:
                query = Query(ex.question, ex.chunks)
                scores = np.asarray(first_ranking.rank(query).scores, dtype=np.float64)
            except Exception as e:  # that example's rows already record it; the plot is skipped, not the run
                logger.warning("no similarity plot: example %s cannot be scored (%s: %s)", ex.id, type(e).__name__, e)
            else:
                plot_similarity_curve(out / "plots" / f"similarity_{safe_filename(ex.id)}.png", ex, scores, selectors)
        return summary


class _Scored:
    """One ranking's scores for one example: its Query, the chain's Scored, and the true k."""

    def __init__(self, ex: Example, ranking: Ranking) -> None:
        self.query = Query(ex.question, ex.chunks, choices=ex.choices, gold_ids=ex.gold_ids)
        self.scored = ranking.rank(self.query)
        scores = np.asarray(self.scored.scores, dtype=np.float64)
        ranked = [ex.chunks[i].id for i in np.argsort(-scores, kind="stable")]
        self.true_k = metrics.true_k(ranked, ex.gold_ids)


def example_rows(
    ex: Example,
    sc: Ranking | Mapping[str, Ranking],
    selectors: Mapping[str, Any],
    reader: Reader | None = None,
    judge: LLMJudge | None = None,
    skip: Callable[[str, str], bool] = lambda ex_id, m: False,
    stages: Sequence[Stage] = (),
) -> Iterator[dict[str, Any]]:
    """One example's result rows, one per method (minus those ``skip`` says are done):
    the unit of work both engines share, so they write the same rows. ``sc`` is one
    ranking chain, or one per method label (``evaluate(rankings=...)``); each distinct
    chain ranks the example once."""
    for row, sel, latency in _selected(ex, sc, selectors, skip, stages):
        if reader is not None and sel is not None:
            row.update(read_one(ex, row["method"], sel, reader, judge, latency))
        yield row


def group_rows(
    group: Sequence[Example],
    sc: Ranking | Mapping[str, Ranking],
    selectors: Mapping[str, Any],
    reader: Reader,
    judge: LLMJudge | None = None,
    skip: Callable[[str, str], bool] = lambda ex_id, m: False,
    stages: Sequence[Stage] = (),
) -> list[dict[str, Any]]:
    """:func:`example_rows` for a group of examples whose selections are all read in one batch
    (:func:`ctxsel.eval.reading.read_many`): the same rows, in the same order."""
    rows: list[dict[str, Any]] = []
    reads: list[tuple[Example, dict[str, Any], Selection, float]] = []
    if selects_in_threads(reader):  # the methods' own LLM calls, one thread a question, meet in batches
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(group) or 1, thread_name_prefix="ctxsel-select") as pool:
            per_example = list(pool.map(lambda ex: list(_selected(ex, sc, selectors, skip, stages)), group))
    else:
        per_example = [list(_selected(ex, sc, selectors, skip, stages)) for ex in group]
    for ex, selected in zip(group, per_example, strict=True):
        for row, sel, latency in selected:
            rows.append(row)
            if sel is not None:
                reads.append((ex, row, sel, latency))
    read_many(reads, reader, judge)
    return rows


def _selected(
    ex: Example,
    sc: Ranking | Mapping[str, Ranking],
    selectors: Mapping[str, Any],
    skip: Callable[[str, str], bool],
    stages: Sequence[Stage] = (),
) -> Iterator[tuple[dict[str, Any], Selection | None, float]]:
    """(row, selection or None when it failed, select seconds) per method: the rows before reading."""
    full_tokens = sum(c.n_tokens for c in ex.chunks)
    scored: dict[int, _Scored | BaseException] = {}
    for m, selector in selectors.items():
        if skip(ex.id, m):
            continue
        method_ranking = sc[m] if isinstance(sc, Mapping) else sc
        t0 = time.perf_counter()
        if id(method_ranking) not in scored:
            try:
                scored[id(method_ranking)] = _Scored(ex, method_ranking)
            except Exception as e:  # the example cannot be scored: every row of this ranking says so
                scored[id(method_ranking)] = e
        got = scored[id(method_ranking)]
        if isinstance(got, BaseException):
            yield _error_row(ex, m, "score", got, full_tokens, None, time.perf_counter() - t0), None, 0.0
            continue
        true_k = got.true_k
        t0 = time.perf_counter()
        try:  # the example's shared scores: the pipeline scores nothing again (a score-free method reads none)
            ranking = method_ranking if selector.needs_scores else None
            sel = Pipeline(selector, ranking, stages=stages).run(got.query, got.scored)
        except Exception as e:  # one example's failure is its row's error, not the run's end
            yield _error_row(ex, m, "select", e, full_tokens, true_k, time.perf_counter() - t0), None, 0.0
            continue
        latency = time.perf_counter() - t0
        yield _row(ex, m, sel, true_k, full_tokens, latency), sel, latency


def _error_row(
    ex: Example, method: str, stage: str, e: BaseException, full_tokens: int, true_k: int | None, latency: float
) -> dict[str, Any]:
    """The row of an (example, method) whose scoring or selection failed: no metrics, the error."""
    warn(ex, method, stage, e)
    return {
        "example_id": ex.id,
        "method": method,
        "full_tokens": full_tokens,
        "true_k": true_k,
        "gold_ids": ex.gold_ids,
        "select_ms": round(latency * 1000, 3),
        **error_fields(stage, e),
    }


def _window_config(reader: Reader) -> dict[str, Any]:
    w = reader.window
    return {} if w is None else {"window": w.size, "window_margin": w.margin, "window_tokenizer": w.tokenizer}


def _make_selector(method: str, reader: Reader | None, resources: dict[str, Any]) -> Any:
    if reader is None and get_selector_class(parse_spec(method)[0]).needs_llm:
        raise InputError(f"method {method!r} needs an LLM: pass a reader (ctxsel eval --reader ...)")
    if reader is not None and reader.template.name != MULTIPLE_CHOICE.name:
        # a method that answers itself (Self-Route, SAGE) answers as the reader would: a HoloBench list gets the
        # aggregation template and its 384 tokens, not a 32-token factoid (options are read by the methods' own prompts)
        resources = {
            # a structured reader's routed answers stay free text: their own prompts ask for no JSON
            "answer_template": "holobench-qa" if reader.structured else reader.template.name,
            "max_answer_tokens": reader.max_answer_tokens,
            **resources,
        }
    return get_selector(method, llm=None if reader is None else reader.client, resources=resources)


def _row(
    ex: Example, method: str, sel: Selection, true_k: int | None, full_tokens: int, latency: float
) -> dict[str, Any]:
    k = sel.k
    # a sentence-level method (SAGE) finds a gold paragraph when it keeps any of its sentences
    found = list(dict.fromkeys(c.meta.get("parent", c.id) for c in sel.chunks))
    return {
        "example_id": ex.id,
        "method": method,
        "k": k,
        "n_tokens": sel.n_tokens,
        "full_tokens": full_tokens,
        "reduction": metrics.token_reduction(sel.n_tokens, full_tokens),
        "recall": metrics.context_recall(found, ex.gold_ids),
        "precision": metrics.context_precision(found, ex.gold_ids),
        "true_k": true_k,
        "diff_k": metrics.diff_k(k, true_k),
        "diff_k_authors": metrics.diff_k(k, None if true_k is None else true_k - 1),
        "ids": sel.ids,
        "gold_ids": ex.gold_ids,
        "explanation": sel.explanation,
        "select_ms": round(latency * 1000, 3),
        # what an exploring method did (SAGE's rounds, Self-Route's route) and what failed
        **({"trace": sel.trace} if sel.trace else {}),
        **({"failures": sel.meta["failures"]} if sel.meta.get("failures") else {}),
        # an LLM selector's own per-example numbers (Context-Picker: invalid_share, fallback)
        **({"extra_metrics": dict(sel.meta["metrics"])} if sel.meta.get("metrics") else {}),
        # what the method's record keeps in a row (Context-Picker: its rationale)
        **(sel.details.row_fields() if sel.details is not None else {}),
        **({"expansion": sel.meta["expansion"]} if sel.meta.get("expansion") else {}),
        **({"rerank": sel.meta["rerank"]} if sel.meta.get("rerank") else {}),
    }


def _check_config(path: Path, new: dict[str, Any], resuming: bool) -> None:
    if not (resuming and path.exists()):
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(old, dict):
            raise InputError(f"a JSON {type(old).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(
            f"{path} is unreadable ({e}), so the results beside it cannot be checked against this run; "
            "pass --overwrite to start again, or use another --output"
        ) from None
    for key in ("dataset", "scorer", "reader"):
        if old.get(key) != new.get(key):
            raise InputError(
                f"{path.parent} holds results for {key}={old.get(key)!r}, not {new.get(key)!r}; "
                "use another --output or pass --overwrite"
            )
    for m in set(old.get("method_configs", {})) & set(new["method_configs"]):
        if old["method_configs"][m] != new["method_configs"][m]:
            raise InputError(f"method {m!r} changed its config since the results in {path.parent}; pass --overwrite")
