"""``rescore``: score a finished run's answers again, without selecting or reading.

Reading is the expensive part of an evaluation; scoring is cheap and its rules
change (a stronger judge, a fixed scoring rule). ``ctxsel eval --rescore``
takes the answers already in ``results.jsonl``, scores each with
:func:`ctxsel.grading.score_answer` (the judge given, or none: SubEM and
set overlap) and appends the rescored rows, so the file stays append-only and
its latest row per (example, method) is the rescored one. Everything else in a
row (selection, tokens, timings, the answer itself) is kept as measured. The
summary, the report and ``config.json`` (its ``judge``) are rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError
from ctxsel.eval.lock import OutputLock
from ctxsel.eval.report import summarize, write_reports
from ctxsel.eval.results import ResultLog, write_atomic
from ctxsel.grading import SCORE_FIELDS, score_answer
from ctxsel.judge import LLMJudge
from ctxsel.types import Example


def rescore(
    examples: Sequence[Example],
    output_dir: str | Path,
    *,
    dataset_name: str,
    judge: LLMJudge | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Rescore the answers of the run in ``output_dir`` on ``examples`` (the run's own dataset); returns the
    new summary. Rows of examples not in ``examples`` are left as they are and not summarised."""
    from tqdm.auto import tqdm

    out = Path(output_dir)
    results, config_path = out / "results.jsonl", out / "config.json"
    if not (results.is_file() and config_path.is_file()):
        raise InputError(f"{out} holds no finished run (results.jsonl and config.json): run ctxsel eval first")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{config_path} is unreadable ({e})") from None
    if not isinstance(config, dict) or not isinstance(config.get("methods"), list):
        raise InputError(f"{config_path} is not a ctxsel eval config (no list of methods)")
    if config.get("dataset") != dataset_name:
        raise InputError(f"{out} holds results for dataset={config.get('dataset')!r}, not {dataset_name!r}")
    by_id = {e.id: e for e in examples}
    with OutputLock(out), ResultLog(results) as log:
        rows = [r for r in log.latest_rows() if r["example_id"] in by_id]
        answered = [r for r in rows if isinstance(r.get("answer"), str) and not r.get("error")]
        if not answered:
            raise InputError(f"{out} has no answers to rescore: its run had no --reader")
        for row in tqdm(answered, desc="rescore", unit="answer", disable=not progress):
            new = {k: v for k, v in row.items() if k not in SCORE_FIELDS}  # none survives from the old rule
            new.update(score_answer(by_id[row["example_id"]], row["answer"], judge, row.get("structured")))
            log.append(new)
        rows = [r for r in log.latest_rows() if r["example_id"] in by_id]
    config["judge"] = None if judge is None else judge.model_id
    write_atomic(config_path, json.dumps(config, indent=2))
    methods = [m for m in config["methods"] if any(r["method"] == m for r in rows)]
    summary = summarize(rows, methods, ci=config.get("ci", "bootstrap"), seed=int(config.get("seed") or 0))
    write_reports(out, summary, rows, config)
    return summary


__all__ = ["rescore"]
