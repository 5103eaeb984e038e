"""``ctxsel eval --engine ray``: the same evaluation, with the examples spread over a Ray cluster.

The unit of work is the local engine's: ``runner.example_rows`` (score one
example once, run every method on it, read and judge when a reader is
given). Ray Data maps it over the examples with a callable class, so each
worker actor builds its scorer (the embedding model), its selectors and its
LLM clients once and keeps them for every example it gets. The driver
writes the rows to the same resumable ``results.jsonl`` in example order,
so the file, the summary and the plots match the local engine's for the same
inputs (apart from the timing columns ``select_ms`` and ``wall_s``).

Actors ask for a fraction of a CPU (0.5 by default): Ray Data also needs CPU
for its own tasks, and on a 2-core machine two 1-CPU actors starve them and
hang.

Where it runs:

- nothing set: a new local Ray cluster is started for the run (``num_cpus`` =
  this machine's cores, no dashboard) and shut down after it, even if a
  ``ray start`` cluster runs on this machine (join that one with ``address="auto"``);
- ``RayOptions(address=...)`` / ``--ray-address`` or ``$RAY_ADDRESS``: an
  existing cluster (``ray start --head`` on one machine, ``ray start
  --address=HEAD:6379`` on the others); every node needs the same Python
  environment with ctxsel installed, and the embedding cache
  (``$CTXSEL_CACHE_DIR``) is per node. ``ray start`` turns on token
  authentication: the driver then needs ``RAY_AUTH_MODE=token`` and the
  head's token (``~/.ray/auth_token`` or ``RAY_AUTH_TOKEN``).
- ``ray.init(...)`` already called in this process: that session is used and
  left running.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.ranking import Ranking
from ctxsel.types import Example

#: Environment variables handed to the workers (caches, offline mode, threads, the LLM key named below).
FORWARDED_ENV_PREFIXES = (
    "CTXSEL_",
    "HF_",
    "TRANSFORMERS_",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
)


@dataclass
class RayOptions:
    """Where and how wide ``evaluate(..., engine="ray")`` runs.

    - ``address``: a cluster to join (``"auto"``, ``"ray://HOST:10001"``,
      ``"HOST:6379"``); None: ``$RAY_ADDRESS`` if set, else a local cluster of
      ``num_cpus`` CPUs (default: all cores) started for this run.
    - ``num_actors``: worker actors (default: one per cluster CPU, capped at the
      number of examples).
    - ``cpus_per_actor``: fractional CPUs each actor asks for (0.5).
    - ``reader_factory``: builds ``(reader, judge)`` inside each worker; needed
      with a reader whose client cannot be pickled (llama.cpp); the CLI gives it.
    - ``env_vars``: extra environment variables for the workers (``CTXSEL_*``,
      ``HF_*``, ``TRANSFORMERS_*`` and thread settings are forwarded anyway).
    """

    address: str | None = None
    num_cpus: int | None = None
    num_actors: int | None = None
    cpus_per_actor: float = 0.5
    batch_size: int = 1
    reader_factory: Callable[[], tuple[Any, Any]] | None = None
    env_vars: Mapping[str, str] | None = None


@dataclass
class RayRunInfo:
    """What the last ``run_on_ray`` did (the CLI prints it, the benchmark records it)."""

    started_cluster: bool = False
    init_s: float = 0.0
    run_s: float = 0.0
    num_actors: int = 0
    cluster_cpus: float = 0.0
    address: str = ""


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise MissingExtraError(f"--engine ray needs Ray Data: {install_hint('ray')}") from e
    return ray


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
    env.update(extra or {})
    return env


def connect(options: RayOptions) -> tuple[Any, bool, float]:
    """(ray, whether we started it, seconds it took). Reuses a session already open."""
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False, 0.0
    address = options.address or os.environ.get("RAY_ADDRESS") or None
    t0 = time.perf_counter()
    runtime_env = {"env_vars": worker_env(options.env_vars)}
    if address:
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        except Exception as e:
            if _is_auth_error(e) and os.environ.get("RAY_AUTH_MODE") != "token":
                raise ConnectionError(
                    f"the Ray cluster at {address} wants an authentication token (`ray start` turns token "
                    "authentication on): run with RAY_AUTH_MODE=token and the head's token in ~/.ray/auth_token "
                    "(or RAY_AUTH_TOKEN=...)"
                ) from e
            raise
    else:
        # address="local": a new cluster of our own, never one a `ray start` left on this machine
        ray.init(
            address="local",
            num_cpus=options.num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            runtime_env=runtime_env,
            log_to_driver=True,
        )
    return ray, True, time.perf_counter() - t0


def _is_auth_error(e: BaseException | None) -> bool:
    while e is not None:
        if "InvalidAuthToken" in str(e) or type(e).__name__ == "AuthenticationError":
            return True
        e = e.__cause__ or e.__context__
    return False


class EvalWorker:
    """A Ray Data callable class: built once per actor, then called with batches of example indices."""

    def __init__(
        self,
        examples_box: list[Any],
        methods: Sequence[str],
        scorer: Ranking | Mapping[str, Ranking],
        reader_box: list[Any],
        done: Mapping[str, Sequence[str]],
        make_selector: Callable[[str, Any], Any],
        rows: Callable[..., Any],
    ) -> None:
        import ray

        self.examples: list[Example] = ray.get(examples_box[0])
        factory, reader, judge = reader_box
        if factory is not None:
            reader, judge = factory()
        self.reader, self.judge = reader, judge
        self.scorer = scorer
        self.selectors = {m: make_selector(m, reader) for m in methods}
        self.done = {k: set(v) for k, v in done.items()}
        self.rows = rows

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        idx = [int(i) for i in batch["id"]]
        out = []
        for i in idx:
            ex = self.examples[i]
            rows = list(
                self.rows(
                    ex,
                    self.scorer,
                    self.selectors,
                    self.reader,
                    self.judge,
                    skip=lambda ex_id, m: m in self.done.get(ex_id, ()),
                )
            )
            out.append(json.dumps(rows, ensure_ascii=False))
        return {"idx": np.asarray(idx, dtype=np.int64), "rows": np.asarray(out, dtype=object)}


def run_on_ray(
    todo: Sequence[Example],
    selectors: Mapping[str, Any],
    scorer: Ranking | Mapping[str, Ranking],
    log: Any,
    *,
    reader: Any = None,
    judge: Any = None,
    options: RayOptions | None = None,
    progress: bool = True,
    make_selector: Callable[[str, Any], Any],
    rows: Callable[..., Any],
) -> RayRunInfo:
    """Evaluate ``todo`` on Ray; append every row to ``log`` in example order; return what the run took.

    ``make_selector(method, reader)`` and ``rows(example, scorer, selectors, reader, judge, skip=...)``
    are the runner's (passed in, so this module does not import the runner that imports it): each
    actor builds its selectors and writes the same rows the local engine writes."""
    options = options or RayOptions()
    if options.cpus_per_actor <= 0:
        raise InputError(f"cpus_per_actor must be > 0, got {options.cpus_per_actor}")
    reader_box: list[Any] = [options.reader_factory, None, None]
    if options.reader_factory is None and (reader is not None or judge is not None):
        _check_picklable(reader, judge)
        reader_box = [None, reader, judge]
    ray, started, init_s = connect(options)
    info = RayRunInfo(started_cluster=started, init_s=init_s)
    try:
        import ray.data
        from tqdm.auto import tqdm

        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        n_actors = options.num_actors or max(1, int(cpus))  # one per core; the rest of each core is Ray Data's
        n_actors = max(1, min(n_actors, len(todo)))
        info.num_actors, info.cluster_cpus = n_actors, cpus
        info.address = str(ray.get_runtime_context().gcs_address)
        done = {ex.id: [m for m in selectors if log.done(ex.id, m)] for ex in todo}
        done = {k: v for k, v in done.items() if v}
        examples_ref = ray.put(list(todo))
        ds = ray.data.range(len(todo), override_num_blocks=len(todo)).map_batches(
            EvalWorker,
            fn_constructor_kwargs={
                "examples_box": [examples_ref],  # boxed: the actor fetches it once, itself
                "methods": list(selectors),
                "scorer": scorer,
                "reader_box": reader_box,
                "done": done,
                "make_selector": make_selector,
                "rows": rows,
            },
            batch_size=options.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=n_actors),
            num_cpus=options.cpus_per_actor,
        )
        t0 = time.perf_counter()
        pending: dict[int, list[dict[str, Any]]] = {}
        next_idx = 0
        with tqdm(total=len(todo), desc=f"eval (ray, {n_actors} actors)", unit="q", disable=not progress) as bar:
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                for i, rows_json in zip(batch["idx"], batch["rows"]):
                    pending[int(i)] = json.loads(rows_json)
                    bar.update(1)
                while next_idx in pending:  # write in example order, whatever order results arrive in
                    for row in pending.pop(next_idx):
                        log.append(row)
                    next_idx += 1
        if pending or next_idx != len(todo):
            raise RuntimeError(f"Ray returned {next_idx} of {len(todo)} examples in order; rerun to resume")
        info.run_s = time.perf_counter() - t0
    finally:
        if started:
            ray.shutdown()
    return info


def _check_picklable(*objs: Any) -> None:
    import cloudpickle

    for obj in objs:
        if obj is None:
            continue
        try:
            cloudpickle.dumps(obj)
        except Exception as e:
            raise InputError(
                f"the {type(obj).__name__} cannot be sent to Ray workers ({e}); pass "
                "RayOptions(reader_factory=...) that builds (reader, judge) inside each worker"
            ) from None
