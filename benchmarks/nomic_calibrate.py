"""Calibrate the int8 nomic route's smoothing: each MLP down projection's per-channel input range.

Runs the float32 ONNX export one text at a time over hotpotqa-long TRAIN-split paragraphs (titles
in a training question's record and in no test question's), skipping the first ``--check`` of them,
which are kept for the fidelity check (cosine to f16) and never calibrated on. Writes the largest
|value| of each channel, per block, to ``--into FILE``; the package ships it as
ctxsel/data/``SMOOTH_AMAX_FILE`` (pass that path to replace it), and the int8 recipe's name carries
the file's hash, so new statistics never reuse vectors made with old ones.

    PYTHONPATH=src python -m benchmarks.nomic_calibrate --into src/ctxsel/data/nomic-v1.5-smooth-amax.npy \
        [--n 128] [--check 200]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

from benchmarks import _common as C


def train_paragraphs() -> list[str]:
    """hotpotqa-long's pool paragraphs that only training questions' records hold, in pool order,
    each with nomic's document prefix."""
    from ctxsel.datasets.hotpotqa import find_hotpotqa_file, load_hotpotqa_long
    from ctxsel.datasets.splits import split_ids
    from ctxsel.scoring.gguf_embedders import get_embedder

    examples = load_hotpotqa_long()
    src = find_hotpotqa_file()
    if src.suffix == ".gz":
        with gzip.open(src) as f:
            raw = f.read()
    else:
        raw = src.read_bytes()
    items = json.loads(raw)
    train, test = split_ids([e.id for e in examples])
    at = {e.id: i for i, e in enumerate(examples)}
    held_out = {t for i in test for t in items[at[i]]["context"]["title"]}
    mine = {t for i in train for t in items[at[i]]["context"]["title"]} - held_out
    nomic = get_embedder("nomic-v1.5")
    assert nomic is not None
    return [nomic.document_prefix + c.text for c in examples[0].chunks if c.id in mine]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="calibration paragraphs")
    ap.add_argument("--check", type=int, default=200, help="first train paragraphs left out (the check set)")
    ap.add_argument(
        "--into",
        type=Path,
        required=True,
        help="the .npy file to write (the package's: src/ctxsel/data/nomic-v1.5-smooth-amax.npy, given by hand)",
    )
    C.add_common_args(ap)
    args = ap.parse_args(argv)
    C.setup_threads(args.threads)
    import numpy as np
    import onnx

    from ctxsel.scoring import nomic_onnx as no

    texts = train_paragraphs()[args.check : args.check + args.n]
    backend = no.NomicOnnxBackend("nomic-v1.5", quantize=False, num_threads=args.threads)
    amax = no.down_input_absmax(onnx.load(str(backend.path)), [backend.tokenize(t) for t in texts])
    dest = args.into
    with dest.open("wb") as f:  # np.save would add .npy to another name
        np.save(f, amax.astype(np.float32), allow_pickle=False)
    recipe = f"{no.INT8_RECIPE}-{hashlib.sha256(dest.read_bytes()).hexdigest()[:8]}"
    print(f"wrote {dest}: {amax.shape} from {len(texts)} train paragraphs; recipe {recipe}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
