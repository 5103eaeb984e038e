#!/usr/bin/env bash
# CI: the install a user gets. Builds the wheel once, installs it into three clean virtual environments
# outside the checkout (no extras; [bm25,serve]; [all] with torch==2.13.0 first) and runs
# .ci/wheel_smoke.py in each from an empty folder, so nothing is read from the checkout. Versions are
# requirements.lock's, as a constraints file; pip options are the Makefile's. Each venv is removed
# once its check passes; the line per venv says how long it took and how big it was.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
PIP=(--quiet --disable-pip-version-check)
# the portable llama-cpp-python wheel that make setup built (see the Makefile); absent, pip builds one
[ -n "${LLAMA_WHEELS:-}" ] && [ -d "$LLAMA_WHEELS" ] && PIP+=(--find-links "$LLAMA_WHEELS")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ctxsel-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

# the wheel, from a copy of what it packages: no build/ left in the checkout, and none stale read from it
mkdir "$WORK/tree"
tar -C "$REPO" --exclude=__pycache__ --exclude='*.egg-info' -cf - pyproject.toml README.md src | tar -C "$WORK/tree" -xf -
"$PYTHON" -m pip wheel "${PIP[@]}" --no-deps -w "$WORK/dist" "$WORK/tree"
WHEEL=$(echo "$WORK"/dist/ctxsel-*.whl)
# pip takes no extras in a constraints file (ray[data] -> ray); torch stays the CPU build
sed -E 's/\[[^]]*\]//' "$REPO/requirements.lock" >"$WORK/constraints.txt"
echo "torch==2.13.0" >>"$WORK/constraints.txt"
echo "wheel smoke: built $(basename "$WHEEL") in $((SECONDS - start)) s"

smoke() { # KIND EXTRAS [PACKAGES INSTALLED FIRST...]
    local kind=$1 extras=$2 t0=$SECONDS venv="$WORK/venv-$1" run="$WORK/run-$1"
    shift 2
    "$PYTHON" -m venv "$venv"
    if [ $# -gt 0 ]; then "$venv/bin/python" -m pip install "${PIP[@]}" -c "$WORK/constraints.txt" "$@"; fi
    "$venv/bin/python" -m pip install "${PIP[@]}" -c "$WORK/constraints.txt" "$WHEEL$extras"
    local installed=$((SECONDS - t0)) size
    size=$(du -sm "$venv" | cut -f1)
    mkdir "$run"
    (cd "$run" && env -u PYTHONPATH CTXSEL_CACHE_DIR="$run/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        OMP_NUM_THREADS=1 "$venv/bin/python" -I "$REPO/.ci/wheel_smoke.py" "$kind")
    echo "wheel smoke [$kind]: install $installed s ($size MB), checks $((SECONDS - t0 - installed)) s"
    rm -rf "$venv" "$run"
}

kinds=("${@:-none bm25-serve all}") # arguments: only these installs (e.g. `bash .ci/wheel_smoke.sh all`)
for kind in ${kinds[*]}; do
    case $kind in
    none) smoke none "" ;;
    bm25-serve) smoke bm25-serve "[bm25,serve]" ;;
    # last: the largest (llama-cpp-python comes from LLAMA_WHEELS, where make setup left it)
    all) smoke all "[all]" torch==2.13.0 ;;
    *) echo "wheel smoke: unknown install $kind (none, bm25-serve, all)" >&2 && exit 2 ;;
    esac
done
echo "wheel smoke: ${kinds[*]} passed in $((SECONDS - start)) s"
