"""ONNX Runtime backend for the dense scorer (fp32, or int8 weights).

The sentence-transformers model (a BERT-style encoder with mean pooling and
L2 normalisation, e.g. the bundled all-MiniLM-L6-v2) is exported once with
``torch.onnx.export`` into ctxsel's cache folder
(``$CTXSEL_CACHE_DIR/onnx/<model>-<fingerprint>/``; where that folder cannot
be written, an export already in it is still read, and a new one goes to this
user's temporary folder, ``ctxsel.paths.temp_files_dir``; so does an export
that meets a full disk in the cache folder, after ``ctxsel.paths``' one
warning: :func:`build_export`): the graph takes the
tokenizer's ``input_ids``, ``attention_mask`` and ``token_type_ids`` and
returns the pooled, normalised sentence vector, exactly as
sentence-transformers computes it (mean over the attention mask, then
``x / max(||x||, 1e-12)``). The export needs torch, transformers and the
``onnx`` package; afterwards only onnxruntime and ``tokenizers`` are used, so
a scorer starts without importing torch. Files are written to a temporary name
and renamed, so concurrent processes never read half a model.

``quantize=True`` quantises the exported graph's weights to int8 with
``onnxruntime.quantization.quantize_dynamic`` (activations are quantised at
run time, with one scale per tensor). Its vectors differ from fp32 by about
1e-2, so the dense scorer keys its cache entries apart (``INT8_ID``). The int8
model reads one text per run: a batch would share one activation scale, so a
text's vector would depend on the texts beside it (up to 0.03 per coordinate
on the hotpotqa-long paragraphs); alone, a text always gets the same vector,
and it is padded to nothing.

int8 is fast and faithful only where the CPU has an 8-bit dot product
(``has_int8_dot``): with VNNI, ONNX Runtime's u8 x s8 kernels accumulate in
32 bits; without it (plain AVX2) they sum pairs of products in saturating
16-bit lanes, which loses accuracy (ONNX Runtime's quantisation guide advises
``reduce_range`` there; ``dense.default_backend`` has the measurements).

Texts are tokenised once (truncated at the model's ``max_seq_length``),
sorted by length and batched (at most ``batch_size`` texts and ``MAX_BATCH_TOKENS``
padded tokens a batch), so a batch pads only to its own longest text.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.errors import InputError, MissingExtraError
from ctxsel.paths import (
    disk_full,
    find_cached,
    in_cache_dir,
    is_out_of_room,
    out_of_room,
    temp_files_dir,
    writable_cache_dir,
)

EXPORT_VERSION = 1  # bump when the exported graph or the quantisation settings change
# In the int8 cache key: its vectors differ from fp32. "-per-text": since each text is read alone (the
# vectors of the batched reads before it depended on their batch, so they are not reused).
INT8_ID = f"onnx-int8-v{EXPORT_VERSION}-per-text"
#: CPU flags of an 8-bit dot-product instruction (x86 VNNI) that ONNX Runtime's int8 kernels use.
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
OPSET = 17
MAX_THREADS = 4  # beyond this, MiniLM batches gain little on a CPU
# Padded tokens per batch: about 1,000 tokens (8 paragraphs), few enough that attention and activations stay
# in the CPU's cache (a larger batch costs more CPU per text, for fp32 and int8). Long texts therefore go in
# small batches and short ones (questions) in full ``batch_size`` ones.
MAX_BATCH_TOKENS = 1024


def require_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as e:
        raise MissingExtraError(
            "the dense scorer's ONNX backend needs onnxruntime: pip install 'ctxsel[onnx]' (or use backend='torch')"
        ) from e
    return onnxruntime


def default_threads() -> int:
    """The CPUs this process may use, at most ``MAX_THREADS`` (2 on a 2-core machine)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


@functools.cache
def _proc_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""  # not Linux


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (read once a process) or the text given; empty
    where there is no x86 ``flags`` line (not Linux, not x86)."""
    for line in (_proc_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def has_int8_dot(cpuinfo: str | None = None) -> bool:
    """Whether this CPU (or the ``/proc/cpuinfo`` text given) has an 8-bit dot product (``INT8_DOT_FLAGS``)."""
    return not INT8_DOT_FLAGS.isdisjoint(cpu_flags(cpuinfo))


def auto_int8() -> bool:
    """Whether ``backend=auto`` picks an int8 route: on a CPU with an 8-bit dot product
    (:func:`has_int8_dot`), unless the environment sets ``CTXSEL_INT8=off``. int8 kernels differ
    between CPUs, so ``off`` gives the float32 vectors, the same on every machine (the docs' outputs
    are those)."""
    return os.environ.get("CTXSEL_INT8", "").strip().lower() != "off" and has_int8_dot()


def require_int8_dot(route: str, instead: str) -> None:
    """Refuse an int8 ``route`` whose vectors are wrong on a CPU without an 8-bit dot product
    (:func:`has_int8_dot`): the :class:`~ctxsel.errors.InputError` names the missing CPU flag and the
    backend to use ``instead``. The one check every such route makes (the auto rule asks
    :func:`has_int8_dot` itself, and picks ``instead`` there)."""
    if has_int8_dot():
        return
    flags = " or ".join(sorted(INT8_DOT_FLAGS))
    raise InputError(
        f"{route} needs a CPU with an 8-bit dot product (the CPU flag {flags}), and this CPU has neither: "
        "without it ONNX Runtime's int8 kernels add the products in saturating 16-bit lanes and this "
        f"model's vectors come out wrong; use {instead}"
    )


# -- the model folder -----------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def check_model_folder(model_path: str | Path) -> dict[str, Any]:
    """What the export needs from a sentence-transformers folder; errors say what is unsupported."""
    folder = Path(model_path)
    if not folder.is_dir():
        raise InputError(
            f"the ONNX backend needs a local sentence-transformers model folder, got {str(model_path)!r}; "
            "use backend='torch' for a model name"
        )
    if not (folder / "tokenizer.json").is_file():
        raise InputError(f"{folder} has no tokenizer.json (a fast tokenizer); use backend='torch'")
    modules = _read_json(folder / "modules.json")
    kinds: list[str] = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules] if isinstance(modules, list) else []
    pooling_path = (
        next((folder / m["path"] for m in modules if str(m.get("type", "")).endswith("Pooling")), None)
        if isinstance(modules, list)
        else None
    )
    pooling: dict[str, Any] = _read_json(pooling_path / "config.json") if pooling_path else {}
    if kinds and set(kinds) - {"Transformer", "Pooling", "Normalize"}:
        raise InputError(f"{folder}: modules {kinds} are not supported by the ONNX backend; use backend='torch'")
    if (pooling and not pooling.get("pooling_mode_mean_tokens")) or any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_lasttoken")
    ):
        raise InputError(f"{folder}: only mean pooling is supported by the ONNX backend; use backend='torch'")
    st_config = _read_json(folder / "sentence_bert_config.json")
    return {
        "folder": folder,
        "max_seq_length": int(st_config.get("max_seq_length") or 512),
        "do_lower_case": bool(st_config.get("do_lower_case", False)),
    }


def _weights_file(folder: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    raise InputError(f"{folder} has no model.safetensors or pytorch_model.bin to export")


def export_name(model_path: str | Path) -> str:
    """The export's folder name: the model's name and a fingerprint of its folder, weights (size,
    mtime) and the export version, so a changed model or exporter never reuses an old export."""
    folder = Path(model_path).resolve()
    w = _weights_file(folder)
    st = w.stat()
    fp = hashlib.sha256(
        json.dumps([str(folder), w.name, st.st_size, st.st_mtime_ns, EXPORT_VERSION, OPSET]).encode()
    ).hexdigest()[:16]
    name = folder.parent.name if folder.name == "model" else folder.name  # the bundled MiniLM's folder is "model"
    return f"{name}-{fp}"


def export_dir(model_path: str | Path, quantize: bool = False) -> Path:
    """Where this model's ONNX files live: ``<cache folder>/onnx/<export_name>``. If the cache folder
    cannot be written (one warning a process): that folder all the same when it already holds the
    file wanted (``model_int8.onnx`` with ``quantize``, else ``model.onnx``), else the same name in
    this user's temporary folder."""
    return cached_export_dir(export_name(model_path), "model_int8.onnx" if quantize else "model.onnx")


def cached_export_dir(name: str, wanted: str) -> Path:
    """``<cache folder>/onnx/<name>``; where the cache folder cannot be written, that folder all the
    same when it already holds ``wanted``, else the same name in this user's temporary folder."""
    writable = writable_cache_dir("onnx")
    if writable is not None:
        return writable / name
    ready = find_cached("onnx", name)
    if ready is not None and (ready / wanted).is_file():
        return ready
    return temp_files_dir("onnx") / name


def build_export(name: str, wanted: str, make: Callable[[Path], None], about: str = "a few seconds") -> Path:
    """The folder of export ``name`` once ``make(folder)`` has written what it lacks (``wanted`` among
    it) into :func:`cached_export_dir`. A build says so on stderr, once, with how long it takes
    (``about``), and when it is done: it happens once per machine, and a first call would otherwise
    sit silent. A full disk (or quota, or read-only mount) in the cache folder
    is ``ctxsel.paths``' one warning, and the files are written to the temporary folder instead; no
    room there either is a :class:`~ctxsel.errors.DiskFull` naming both folders and the space left."""
    folder = cached_export_dir(name, wanted)
    if (folder / wanted).is_file():
        make(folder)
        return folder
    print(f"ctxsel: building {wanted} of {name} once for this machine ({about}) ...", file=sys.stderr)
    t0 = time.perf_counter()
    folder = _build_where_there_is_room(name, wanted, make, folder)
    print(f"ctxsel: built {folder / wanted} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return folder


def _build_where_there_is_room(name: str, wanted: str, make: Callable[[Path], None], folder: Path) -> Path:
    """``make(folder)``, or, when the cache folder is out of room, ``make`` in the temporary folder."""
    try:
        make(folder)
        return folder
    except Exception as e:
        if not is_out_of_room(e):
            raise
        if not in_cache_dir(folder):
            raise disk_full(folder, e, then="free some space there, or set TMPDIR to a folder with room") from e
        out_of_room(folder, e)
        first, first_error = folder, e
    folder = cached_export_dir(name, wanted)  # now the temporary folder's
    try:
        make(folder)
        return folder
    except Exception as e:
        if not is_out_of_room(e):
            raise
        raise disk_full(
            folder,
            e,
            then=f"it did not fit in the cache folder either ({first}: {first_error}); free some space, or set "
            "CTXSEL_CACHE_DIR or TMPDIR to a folder with room",
        ) from e


def atomic_target(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Export and quantisation warn a lot (tracer warnings, "consider pre-processing"): none is actionable."""
    loggers = [logging.getLogger(n) for n in ("", "onnxruntime", "onnxruntime.transformers", "transformers")]
    levels = [lg.level for lg in loggers]
    # quantize_dynamic calls logging.warning(), which would install a root handler (basicConfig) for good:
    # every library's debug lines would then reach stderr; a handler of our own for the time stops that
    guard = logging.NullHandler()
    root = logging.getLogger()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root.addHandler(guard)
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            root.removeHandler(guard)
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def export_onnx(model_path: str | Path, dest: Path) -> Path:
    """Export the encoder + mean pooling + L2 normalisation to ``dest`` (atomically).

    The encoder is traced with eager attention, then ONNX Runtime's BERT optimizer fuses each layer
    into ``Attention`` / ``SkipLayerNormalization`` / ``BiasGelu`` kernels (the SDPA trace does not
    fuse, and runs about as fast as torch). Where the fusion fails (not a BERT-like graph), the plain
    trace is kept.
    """
    try:
        import onnx  # noqa: F401 - torch.onnx.export needs it
        import torch
        from transformers import AutoModel
    except ImportError as e:
        raise MissingExtraError(
            "exporting the model to ONNX (once) needs torch, transformers and onnx: pip install 'ctxsel[embed,onnx]'"
        ) from e
    from tokenizers import Tokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    info = check_model_folder(model_path)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
    except ImportError:  # pragma: no cover
        pass
    encoder = AutoModel.from_pretrained(str(info["folder"]), attn_implementation="eager").eval()

    class MeanPoolNormalize(torch.nn.Module):
        def __init__(self, enc: Any) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.enc(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    tok = _tokenizer(Tokenizer, info)
    ids, mask, types = _pad([tok.encode(t) for t in ("a short example", "a somewhat longer example text")])
    args = tuple(torch.from_numpy(a) for a in (ids, mask, types))
    raw = atomic_target(dest.with_name(dest.stem + "-raw.onnx"))
    tmp = atomic_target(dest)
    try:
        with quiet(), torch.no_grad():
            torch.onnx.export(
                MeanPoolNormalize(encoder),
                args,
                str(raw),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["sentence_embedding"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "seq"},
                    "attention_mask": {0: "batch", 1: "seq"},
                    "token_type_ids": {0: "batch", 1: "seq"},
                    "sentence_embedding": {0: "batch"},
                },
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        cfg = encoder.config
        try:
            from onnxruntime.transformers.optimizer import optimize_model

            with quiet():
                fused = optimize_model(
                    str(raw),
                    model_type="bert",
                    num_heads=int(cfg.num_attention_heads),
                    hidden_size=int(cfg.hidden_size),
                    opt_level=0,
                )
                fused.save_model_to_file(str(tmp))
        except Exception as e:
            if is_out_of_room(e):
                raise  # no room for the fused graph is no reason to keep the unfused one
            os.replace(raw, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        raw.unlink(missing_ok=True)
    return dest


def quantize_int8(src: Path, dest: Path, **options: Any) -> Path:
    """Dynamic int8 quantisation of ``src``'s weights (per output channel) into ``dest``, atomically;
    ``options`` go to ``quantize_dynamic`` (``op_types_to_quantize``, ``nodes_to_exclude``).

    Per-channel weights keep the vectors much closer to fp32 than per-tensor ones (cosine >= 0.987
    against >= 0.90 on the hotpotqa-long paragraphs) at the same speed.
    """
    require_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = atomic_target(dest)
    try:
        with quiet():
            quantize_dynamic(
                str(src),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=True,
                extra_options={"DefaultTensorType": 1},  # 1 = FLOAT, for the fused ops' outputs
                **options,
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


#: One export at a time in a process: ``torch.onnx.export`` keeps its state in module globals, and two
#: threads exporting at once (an eval whose questions select in threads) fail each other's asserts.
_EXPORT_LOCK = threading.Lock()


def ensure_onnx_model(model_path: str | Path, quantize: bool = False) -> Path:
    """The ONNX file for ``model_path`` (fp32 or int8), exporting / quantising it first if missing
    (:func:`build_export`: to the temporary folder when the cache folder is full)."""
    wanted = "model_int8.onnx" if quantize else "model.onnx"

    def make(folder: Path) -> None:
        if (folder / wanted).is_file():
            return
        fp32 = folder / "model.onnx"
        if not fp32.is_file():
            export_onnx(model_path, fp32)
        if quantize:
            quantize_int8(fp32, folder / wanted)

    with _EXPORT_LOCK:
        return build_export(export_name(model_path), wanted, make) / wanted


def cpu_session(path: Path, num_threads: int, *, allow_spinning: bool = False, opt_level: str = "all") -> Any:
    """An ONNX Runtime CPU session: ``num_threads`` intra-op threads, one op at a time; ``opt_level``:
    ``basic``, ``extended`` or ``all`` graph optimisations."""
    ort = require_onnxruntime()
    so = ort.SessionOptions()
    so.intra_op_num_threads = num_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    so.graph_optimization_level = levels[opt_level]
    # Spinning worker threads burn CPU between ops; on a shared machine they slow everyone down.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def batches(lengths: list[int], order: list[int], batch_size: int, max_batch_tokens: int) -> Iterator[list[int]]:
    """Consecutive runs of the length-sorted ``order``: at most ``batch_size`` texts and at most
    ``max_batch_tokens`` padded tokens each (one text at least)."""
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < batch_size and (end - start + 1) * lengths[end] <= max_batch_tokens:
            end += 1
        yield order[start:end]
        start = end


# -- tokenising and batching ----------------------------------------------------------------------------------


def _tokenizer(tokenizer_cls: Any, info: dict[str, Any]) -> Any:
    tok = tokenizer_cls.from_file(str(info["folder"] / "tokenizer.json"))
    tok.no_padding()  # the bundled file pads to 128: batches are padded here, to their longest text
    tok.enable_truncation(max_length=info["max_seq_length"])  # as sentence-transformers truncates
    return tok


def _pad(encodings: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0 in BERT vocabularies
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for i, e in enumerate(encodings):
        n = len(e.ids)
        ids[i, :n] = e.ids
        mask[i, :n] = 1
        types[i, :n] = e.type_ids
    return ids, mask, types


class OnnxBackend:
    """Texts -> normalised float32 vectors with ONNX Runtime on the CPU."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        quantize: bool = False,
        num_threads: int | None = None,
        allow_spinning: bool = False,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
    ) -> None:
        require_onnxruntime()
        from tokenizers import Tokenizer

        self.name = "onnx-int8" if quantize else "onnx"
        self.one_text_per_run = quantize  # see the module docstring: per-tensor activation scales
        self.max_batch_tokens = max_batch_tokens
        info = check_model_folder(model_path)
        self.max_seq_length = int(info["max_seq_length"])
        self.path = ensure_onnx_model(model_path, quantize)
        self.tokenizer = _tokenizer(Tokenizer, info)
        self.num_threads = num_threads or default_threads()
        self.session = cpu_session(self.path, self.num_threads, allow_spinning=allow_spinning)
        self._inputs = {i.name for i in self.session.get_inputs()}

    def _batches(self, lengths: list[int], order: list[int], batch_size: int) -> Iterator[list[int]]:
        return batches(lengths, order, batch_size, self.max_batch_tokens)

    def tokenize(self, texts: Sequence[str]) -> list[Any]:
        return list(self.tokenizer.encode_batch(list(texts), add_special_tokens=True))

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        encodings = self.tokenize(texts)
        if self.one_text_per_run:
            batch_size = 1
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))  # length-sorted batches
        out: np.ndarray | None = None
        bar = None
        if show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc=f"embedding ({self.name})", unit="text")
        for idx in self._batches([len(encodings[i].ids) for i in order], order, batch_size):
            ids, mask, types = _pad([encodings[i] for i in idx])
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            vecs = self.session.run(["sentence_embedding"], {k: v for k, v in feed.items() if k in self._inputs})[0]
            if out is None:
                out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
            if bar is not None:
                bar.update(len(idx))
        if bar is not None:
            bar.close()
        assert out is not None
        return out


__all__ = [
    "INT8_ID",
    "OnnxBackend",
    "atomic_target",
    "auto_int8",
    "batches",
    "build_export",
    "cached_export_dir",
    "cpu_flags",
    "cpu_session",
    "default_threads",
    "ensure_onnx_model",
    "export_dir",
    "export_name",
    "export_onnx",
    "has_int8_dot",
    "quantize_int8",
    "quiet",
    "require_int8_dot",
    "require_onnxruntime",
]
