"""Trained artefacts shipped inside the package, each checked against its sha256 before it is read.

Standard library only, so any layer may import it. An artefact is a folder under ``ctxsel/data/``
with a model card and a ``manifest.json`` written by the command that made it
(``ctxsel train ldar|context-picker ... --bundle DIR``: :func:`write_bundle`, :func:`write_manifest`);
the artefact is bundled when that folder has a manifest listing every file its loader reads. The
manifest::

    {
      "format": "ctxsel-bundle-manifest",
      "version": 1,
      "artefact": "ldar",
      "files": {
        "config.json": {"sha256": "d355...799b", "bytes": 14461},
        "model.safetensors": {"sha256": "7603...529d", "bytes": 3539412}
      },
      "made_by": "the command that wrote the folder"
    }

``artefact`` is the registry's name (a manifest copied into another artefact's folder is refused);
``files`` maps each file's path relative to the folder (``/``-separated, no ``..``) to its
sha256 (64 lower-case hex digits, what ``sha256sum`` prints) and its size in bytes; ``made_by``
is the command that made it, for the record. The model card is not listed: it carries the same
table for people and is never read by a loader.

Every listed file is checked before it is read: a file damaged on disk, cut short by a copy or
replaced alone is refused with a :class:`~ctxsel.errors.ModelError` that names it; so are a
missing, unreadable or malformed manifest, one for another artefact, and one that leaves out a file
the loader reads. (The manifest sits beside the files, so it guards against damage and partial
replacement, not against someone who rewrites the manifest too.)
An artefact with no manifest (``bundled`` false) says why and how to make one; ``ctxsel env``
lists both kinds.

    from ctxsel import bundled
    folder = bundled.verify("ldar")      # the checked folder, or ModelError

Writing one (what ``--bundle DIR`` runs, :mod:`ctxsel.train.ldar.bundle`,
:mod:`ctxsel.train.context_picker.bundle`) goes through :func:`write_bundle`: any earlier manifest is
removed first, the files and the card are written, and the manifest last, read back as a loader
reads it; a folder whose bundling stopped half way has no manifest and is refused, not read.
Nothing here writes into the package by itself: the folder is always the caller's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ctxsel.errors import InputError, ModelError

#: the package's own folder: artefact folders and cards are relative to it
PACKAGE_ROOT = Path(__file__).resolve().parent
#: the manifest's file name, in the artefact's folder
MANIFEST = "manifest.json"
#: the manifest's ``format`` and the ``version`` this ctxsel reads and writes
MANIFEST_FORMAT = "ctxsel-bundle-manifest"
MANIFEST_VERSION = 1

_HEX64 = re.compile(r"[0-9a-f]{64}")
_lock = threading.Lock()
_seen: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: a file is hashed once


@dataclass(frozen=True)
class FileEntry:
    """One file of a manifest: its sha256 (hex) and size in bytes."""

    sha256: str
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """A read and checked ``manifest.json``."""

    artefact: str
    #: path relative to the folder -> its sha256 and size, in the manifest's order
    files: Mapping[str, FileEntry]
    made_by: str
    path: Path

    @property
    def sha256(self) -> dict[str, str]:
        return {name: e.sha256 for name, e in self.files.items()}


def manifest_json(artefact: str, files: Mapping[str, tuple[str, int]], made_by: str) -> dict[str, Any]:
    """The manifest as written: ``files`` maps each name to its (sha256, bytes)."""
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "artefact": artefact,
        "files": {name: {"sha256": h, "bytes": int(n)} for name, (h, n) in files.items()},
        "made_by": made_by,
    }


def _file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a manifest's file (None: it can)."""
    p = PurePosixPath(name)
    if not name or "\\" in name or p.is_absolute() or name.startswith("/"):
        return "is not a relative /-separated path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "leaves the folder or has an empty part"
    if name == MANIFEST:
        return "is the manifest itself"
    return None


_manifests: dict[tuple[str, int, int], Manifest] = {}  # (path, size, mtime_ns) -> the manifest read there


def read_manifest(
    folder: str | os.PathLike[str], artefact: str | None = None, required: tuple[str, ...] = ()
) -> Manifest:
    """``folder/manifest.json``, checked: for ``artefact`` (when given) and listing every name of
    ``required``; ModelError saying what is wrong otherwise. It does not hash the files (see :func:`verify`)."""
    path = Path(folder) / MANIFEST
    what = f"{path}"
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        with _lock:
            known = _manifests.get(key)
        raw = None if known is not None else path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelError(f"{what} is missing: the files beside it cannot be checked") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{what} cannot be read: {e}") from None
    if known is None:
        assert raw is not None
        known = _parse_manifest(raw, path)
        with _lock:
            _manifests[key] = known
    if artefact is not None and known.artefact != artefact:
        raise ModelError(f"{what} is the manifest of {known.artefact!r}, not of {artefact!r}")
    unlisted = [n for n in required if n not in known.files]
    if unlisted:
        raise ModelError(f"{what} does not list {', '.join(unlisted)}, which the loader reads")
    return known


def _parse_manifest(raw: str, path: Path) -> Manifest:
    def bad(why: str) -> ModelError:
        return ModelError(f"{path} is malformed: {why} (rebuild the artefact: see its model card)")

    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("format") != MANIFEST_FORMAT:
        raise bad(f"format {data.get('format')!r}, not {MANIFEST_FORMAT!r}")
    if data.get("version") != MANIFEST_VERSION:
        raise bad(f"version {data.get('version')!r}; this ctxsel reads version {MANIFEST_VERSION}")
    artefact, files, made_by = data.get("artefact"), data.get("files"), data.get("made_by", "")
    if not isinstance(artefact, str) or not artefact:
        raise bad('"artefact" is not a name')
    if not isinstance(made_by, str):
        raise bad('"made_by" is not a string')
    if not isinstance(files, dict) or not files:
        raise bad('"files" is not an object naming at least one file')
    entries: dict[str, FileEntry] = {}
    for name, entry in files.items():
        problem = _file_name_problem(name)
        if problem:
            raise bad(f"file {name!r} {problem}")
        if not isinstance(entry, dict):
            raise bad(f"{name}: not an object with sha256 and bytes")
        sha, size = entry.get("sha256"), entry.get("bytes")
        if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
            raise bad(f"{name}: sha256 {sha!r} is not 64 lower-case hex digits")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"{name}: bytes {size!r} is not a size")
        entries[name] = FileEntry(sha, size)
    return Manifest(artefact, entries, made_by, path)


@dataclass(frozen=True)
class Artefact:
    """One trained artefact: where its files are, what its loader reads, its card and how to make it.
    The files' sha256 come from the folder's manifest.json (:func:`read_manifest`)."""

    name: str
    title: str
    #: folder relative to the package root (ctxsel/), None when nothing can be shipped
    folder: str | None
    #: the files its loader reads, relative to the folder: the manifest must list each of them
    files: tuple[str, ...] = ()
    #: the model card, relative to the package root
    card: str | None = None
    #: the file whose sha256 names the artefact (in Selection meta, `ctxsel env`)
    main_file: str | None = None
    #: how to make it (one command)
    made_by: str = ""
    #: when not bundled: why, and what to use instead
    note: str = ""
    #: the most bytes its files may take (a wheel ships them)
    max_bytes: int = 10_000_000
    root: Path = PACKAGE_ROOT

    @property
    def path(self) -> Path | None:
        return None if self.folder is None else self.root / self.folder

    @property
    def manifest_path(self) -> Path | None:
        return None if self.path is None else self.path / MANIFEST

    @property
    def card_path(self) -> Path | None:
        return None if self.card is None else self.root / self.card

    @property
    def bundled(self) -> bool:
        """Whether the folder has a manifest (read and checked by :meth:`manifest`, :func:`verify`)."""
        return self.manifest_path is not None and self.manifest_path.is_file()

    def manifest(self) -> Manifest:
        """The folder's manifest, checked (for this artefact, listing every file it reads); ModelError otherwise."""
        if self.path is None:
            raise ModelError(f"the {self.title} is {self.note}")
        return read_manifest(self.path, self.name, self.files)

    @property
    def sha256(self) -> dict[str, str]:
        """file name -> sha256 (hex), from the manifest; empty when nothing is bundled."""
        return self.manifest().sha256 if self.bundled else {}

    @property
    def digest(self) -> str | None:
        """The sha256 of the main file (what `sha256sum` prints for it)."""
        return None if self.main_file is None else self.sha256.get(self.main_file)

    def describe(self) -> dict[str, Any]:
        """What `ctxsel env` prints: state, sha256, folder, card, how to make it."""
        if not self.bundled:
            return {"title": self.title, "bundled": False, "note": self.note, "made_by": self.made_by}
        assert self.path is not None and self.manifest_path is not None
        card = self.card_path
        out: dict[str, Any] = {
            "title": self.title,
            "bundled": True,
            "sha256": None,
            "main_file": self.main_file,
            "files": {},
            "folder": str(self.path),
            "manifest": str(self.manifest_path),
            "card": str(card) if card is not None else None,
            "present": False,
            "made_by": self.made_by,
        }
        try:
            m = self.manifest()
        except ModelError as e:
            return {**out, "error": str(e)}
        return {
            **out,
            "sha256": m.sha256.get(self.main_file or ""),
            "files": m.sha256,
            "present": all((self.path / name).is_file() for name in m.files),
            "made_by": m.made_by or self.made_by,
        }


ARTEFACTS: dict[str, Artefact] = {
    "ldar": Artefact(
        name="ldar",
        title="LDAR policy (summary encoder, label reward F2)",
        folder="data/ldar",
        files=("config.json", "model.safetensors"),
        card="data/ldar/MODEL_CARD.md",
        main_file="model.safetensors",
        made_by="make ldar-policy",
        note="not bundled in this build: make one with `make ldar-policy`, or pass ldar[policy=PATH]",
        max_bytes=5_000_000,
    ),
    "abstain": Artefact(
        name="abstain",
        title="abstain stage calibrations (logistic model per scorer)",
        folder="data/abstain",
        files=("abstain.json",),
        card="data/abstain/MODEL_CARD.md",
        main_file="abstain.json",
        made_by="python -m experiments.abstention",
        note="not bundled in this build: make it with `python -m experiments.abstention`",
        max_bytes=100_000,
    ),
    "ldar-score-maps": Artefact(
        name="ldar-score-maps",
        title="LDAR score maps (other scorers' scores onto the policy's scale)",
        folder="data/ldar_score_maps",
        files=("score_maps.json",),
        card="data/ldar_score_maps/MODEL_CARD.md",
        main_file="score_maps.json",
        made_by="python -m experiments.ldar_score_maps",
        note="not bundled in this build: make it with `python -m experiments.ldar_score_maps`",
        max_bytes=200_000,
    ),
    "context-picker": Artefact(
        name="context-picker",
        title="Context-Picker LoRA adapter",
        folder="data/context_picker",  # bundled once a manifest.json is written there
        files=("picker.json", "adapter/adapter_config.json", "adapter/adapter_model.safetensors"),
        card="data/context_picker/MODEL_CARD.md",
        main_file="adapter/adapter_model.safetensors",
        made_by="ctxsel train context-picker ... --bundle DIR on a GPU "
        "(or python -m experiments.context_picker_grpo bundle --run RUN --into DIR)",
        note="not bundled: training it needs a GPU; train one with `ctxsel train context-picker` and pass adapter=PATH",
        max_bytes=10_000_000,
    ),
}


def get(name: str) -> Artefact:
    try:
        return ARTEFACTS[name]
    except KeyError:
        raise ModelError(f"no bundled artefact {name!r}; known: {', '.join(sorted(ARTEFACTS))}") from None


def file_sha256(path: Path) -> str:
    """The file's sha256 (hex), remembered while its size and mtime stay the same."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _seen:
            return _seen[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with _lock:
        _seen[key] = digest
    return digest


_REBUILD = "reinstall ctxsel, or rebuild it: see its model card"


def verify_files(folder: Path, sha256: Mapping[str, str], what: str, sizes: Mapping[str, int] | None = None) -> Path:
    """Check every file of ``sha256`` (and of ``sizes``, where given) in ``folder``; the folder, or
    ModelError naming the file."""
    for name, expected in sha256.items():
        path = folder / name
        if not path.is_file():
            raise ModelError(f"{what}: {path} is missing ({_REBUILD})")
        if sizes is not None and name in sizes and path.stat().st_size != sizes[name]:
            raise ModelError(
                f"{what}: {path} is {path.stat().st_size:,} bytes, its manifest says {sizes[name]:,} "
                f"(the file is damaged, cut short or was replaced; {_REBUILD})"
            )
        found = file_sha256(path)
        if found != expected:
            raise ModelError(
                f"{what}: sha256 mismatch for {path}: expected {expected}, found {found} "
                f"(the file is damaged or was replaced; {_REBUILD})"
            )
    return folder


def verify(name: str) -> Path:
    """The bundled artefact's folder once its manifest is sound and every file it lists matches its
    sha256; ModelError otherwise (naming the manifest or the file)."""
    art = get(name)
    if art.path is None:
        raise ModelError(f"the {art.title} is {art.note}")
    if not art.bundled:
        if any((art.path / f).exists() for f in art.files):  # files, but nothing to check them against
            raise ModelError(
                f"bundled {art.title}: {art.manifest_path} is missing, so the files beside it cannot be "
                f"checked ({_REBUILD})"
            )
        raise ModelError(f"the {art.title} is {art.note}")
    try:
        m = art.manifest()
    except ModelError as e:
        raise ModelError(f"bundled {art.title}: {e}") from None
    sizes = {n: e.bytes for n, e in m.files.items()}
    return verify_files(art.path, m.sha256, f"bundled {art.title}", sizes)


def read_json(name: str, filename: str) -> tuple[Any, str]:
    """One JSON file of a bundled artefact, read once the artefact is verified (:func:`verify`), with
    its path for messages; ModelError when it cannot be read or parsed."""
    path = verify(name) / filename
    try:
        return json.loads(path.read_text(encoding="utf-8")), str(path)
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"{path} cannot be read: {e}") from None


# -- writing a bundle ---------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def files_table(folder: Path, sums: Mapping[str, str]) -> list[str]:
    """A model card's "## Files" section: each file's bytes and sha256, as its manifest lists them."""
    rows = [f"| {n} | {(folder / n).stat().st_size:,} | `{h}` |" for n, h in sums.items()]
    return ["## Files", "", "| file | bytes | sha256 |", "| :--- | ---: | :--- |", *rows]


def write_manifest(
    folder: str | os.PathLike[str], artefact: str, made_by: str, files: Sequence[str] | None = None
) -> dict[str, Any]:
    """Write ``folder/manifest.json`` for ``files`` (default: every file the registry's ``artefact``
    loads) with their sha256 and sizes; the manifest as written. It is read back as a loader reads it,
    so a manifest that :func:`read_manifest` would refuse is never left behind."""
    folder = Path(folder)
    known = ARTEFACTS.get(artefact)
    names = list(files if files is not None else (known.files if known else ()))
    if not names:
        raise InputError(f"a manifest for {artefact!r} needs at least one file")
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise InputError(f"{folder}: cannot write a manifest for {artefact!r}: {', '.join(missing)} missing")
    sums = sha256_of_folder(folder, names)
    data = manifest_json(artefact, {n: (sums[n], (folder / n).stat().st_size) for n in names}, made_by)
    _write_atomic(folder / MANIFEST, json.dumps(data, indent=1) + "\n")
    read_manifest(folder, artefact, known.files if known else ())
    return data


def verify_folder(folder: str | os.PathLike[str], artefact: str) -> dict[str, str]:
    """Check a folder as the loader does (its manifest, then each file's size and sha256), wherever it
    is; the sha256 table, or ModelError naming what is wrong."""
    folder = Path(folder)
    m = read_manifest(folder, artefact, get(artefact).files)
    sizes = {n: e.bytes for n, e in m.files.items()}
    verify_files(folder, m.sha256, f"the {artefact} bundle in {folder}", sizes)
    return m.sha256


def check_destination(dest: str | os.PathLike[str], source: str | os.PathLike[str]) -> None:
    """InputError when ``dest`` is the trained folder ``source`` or inside it (bundling would overwrite it)."""
    d, s = Path(dest).resolve(), Path(source).resolve()
    if d == s or s in d.parents:
        raise InputError(f"cannot bundle {source} into {dest}: give a folder outside the trained one")


#: (the folder written, its files' sha256) -> MODEL_CARD.md's text
CardWriter = Callable[[Path, Mapping[str, str]], str]
CARD = "MODEL_CARD.md"


def write_bundle(
    dest: str | os.PathLike[str],
    artefact: str,
    made_by: str,
    install: Callable[[Path], None],
    card: CardWriter,
    source: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """Make ``dest`` a bundled ``artefact``: ``install(dest)`` writes the files its loader reads
    (from the trained folder ``source``, which ``dest`` may not be nor lie in), then their size is
    checked against the registry's ``max_bytes``, ``card(dest, sha256)`` is written as MODEL_CARD.md
    and manifest.json last; the folder is then checked as the loader checks it. The files' sha256."""
    art, dest = get(artefact), Path(dest)
    if source is not None:
        check_destination(dest, source)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).unlink(missing_ok=True)  # not bundled until the new manifest is written
    install(dest)
    missing = [n for n in art.files if not (dest / n).is_file()]
    if missing:
        raise InputError(f"{dest}: {', '.join(missing)} missing after installing the {art.title}")
    total = sum((dest / n).stat().st_size for n in art.files)
    if total > art.max_bytes:
        raise InputError(
            f"the {art.title}'s files are {total:,} bytes, over the {art.max_bytes:,} a bundled artefact may take"
        )
    sums = sha256_of_folder(dest, art.files)
    _write_atomic(dest / CARD, card(dest, sums))
    write_manifest(dest, artefact, made_by, art.files)
    return verify_folder(dest, artefact)


def describe_all() -> dict[str, dict[str, Any]]:
    return {name: art.describe() for name, art in ARTEFACTS.items()}


def sha256_of_folder(folder: str | os.PathLike[str], names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The sha256 of ``names`` in ``folder`` (what a manifest lists)."""
    return {name: file_sha256(Path(folder) / name) for name in names}


__all__ = [
    "ARTEFACTS",
    "MANIFEST",
    "Artefact",
    "CardWriter",
    "FileEntry",
    "Manifest",
    "check_destination",
    "describe_all",
    "file_sha256",
    "files_table",
    "get",
    "manifest_json",
    "read_manifest",
    "verify",
    "verify_files",
    "verify_folder",
    "write_bundle",
    "write_manifest",
]
