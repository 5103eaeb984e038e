"""The bundled trained artefacts: the LDAR policy in ctxsel/data/ldar, checked against the sha256 in its
manifest.json on load, used by ``ldar`` with no options on every surface; the Context-Picker adapter listed
as not bundled; ``ctxsel train ldar --bundle DIR`` writing such a folder."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ctxsel import bundled  # noqa: E402
from ctxsel.cli.main import main  # noqa: E402
from ctxsel.errors import CtxselError, ModelError  # noqa: E402
from ctxsel.selectors import get_selector  # noqa: E402
from ctxsel.selectors.ldar.band import LDARBand  # noqa: E402
from ctxsel.selectors.ldar.selector import LDAR  # noqa: E402
from ctxsel.train.context_picker.bundle import bundle_context_picker  # noqa: E402
from ctxsel.train.ldar.bundle import bundle_ldar  # noqa: E402
from ctxsel.types import Chunk  # noqa: E402
from tests.support.paths import REPO  # noqa: E402

LDAR_ART = bundled.get("ldar")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def chunks(n: int) -> list[Chunk]:
    return [Chunk(id=f"s{i:03d}", text=f"sentence {i}", n_tokens=20) for i in range(n)]


def holo_scores(n: int, relevant: int, seed: int = 0) -> np.ndarray:
    """HoloBench-like cosines: ``relevant`` sentences about the question score higher than the rest."""
    rng = np.random.default_rng(seed)
    s = rng.normal(0.15, 0.05, n)
    s[:relevant] = rng.normal(0.45, 0.05, relevant)
    return s


def corrupted_copy(tmp_path: Path, name: str | None) -> Path:
    """A copy of the package's data/ldar with one byte of ``name`` flipped (None: intact); the copy's root."""
    assert LDAR_ART.path is not None
    dest = tmp_path / "data" / "ldar"
    shutil.copytree(LDAR_ART.path, dest)
    if name is None:
        return tmp_path
    data = bytearray((dest / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (dest / name).write_bytes(bytes(data))
    return tmp_path


def use_root(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """The registry's ldar read from ``root``/data/ldar instead of the package's."""
    monkeypatch.setitem(bundled.ARTEFACTS, "ldar", dataclasses.replace(LDAR_ART, root=root))


def edit_manifest(root: Path, change: Any) -> None:
    path = root / "data" / "ldar" / "manifest.json"
    data = json.loads(path.read_text())
    path.write_text(change(data) if callable(change) else change)


def test_the_registry_lists_the_policy_and_the_adapter_not_bundled() -> None:
    assert LDAR_ART.bundled and LDAR_ART.folder == "data/ldar"
    assert set(LDAR_ART.sha256) == {"config.json", "model.safetensors"} == set(LDAR_ART.files)
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in LDAR_ART.sha256.values())
    assert LDAR_ART.card_path is not None and LDAR_ART.card_path.is_file()
    card = LDAR_ART.card_path.read_text(encoding="utf-8")
    assert all(h in card for h in LDAR_ART.sha256.values())  # the card carries the table the loader checks
    assert "Apache-2.0" in card and "CC BY-SA 4.0" in card and "make ldar-policy" in card
    assert bundled.verify("ldar") == LDAR_ART.path
    total = sum((LDAR_ART.path / n).stat().st_size for n in LDAR_ART.sha256)
    assert total <= 5_000_000
    picker = bundled.get("context-picker")
    assert not picker.bundled and picker.folder == "data/context_picker" and not picker.sha256
    assert picker.manifest_path is not None and not picker.manifest_path.exists()
    assert picker.describe()["bundled"] is False and "not bundled" in picker.describe()["note"]
    with pytest.raises(ModelError, match="not bundled"):
        bundled.verify("context-picker")
    with pytest.raises(ModelError, match="no bundled artefact 'nope'"):
        bundled.get("nope")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_corrupted_bundled_policy_is_refused(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = corrupted_copy(tmp_path, name)
    monkeypatch.setitem(bundled.ARTEFACTS, "ldar", dataclasses.replace(LDAR_ART, root=root))
    expected = LDAR_ART.sha256[name]
    found = bundled.file_sha256(root / "data" / "ldar" / name)
    assert found != expected
    for call in (lambda: bundled.verify("ldar"), LDAR, lambda: get_selector("ldar")):
        with pytest.raises(ModelError) as e:
            call()
        msg = str(e.value)
        assert "sha256 mismatch" in msg and name in msg and expected in msg and found in msg
    # the CLI says it in one line and exits 2
    doc = bundled.PACKAGE_ROOT / "data" / "example.md"
    rc = main(["select", "--question", "q?", "--document", str(doc), "--scorer", "keywords", "--method", "ldar"])
    err = capsys.readouterr().err
    assert rc == 2 and "sha256 mismatch" in err and "Traceback" not in err


def test_a_missing_bundled_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = corrupted_copy(tmp_path, None)
    monkeypatch.setitem(bundled.ARTEFACTS, "ldar", dataclasses.replace(LDAR_ART, root=root))
    assert LDAR().policy_name == f"bundled ldar policy sha256:{(LDAR_ART.digest or '')[:12]}"  # the intact copy loads
    (root / "data" / "ldar" / "model.safetensors").unlink()
    monkeypatch.setitem(bundled.ARTEFACTS, "ldar", dataclasses.replace(LDAR_ART, root=root))
    with pytest.raises(CtxselError, match=r"model\.safetensors is missing"):
        LDAR()


def test_the_shipped_manifest_is_what_sha256sum_says() -> None:
    """data/ldar/manifest.json: the registry's files, each with the sha256 and size it has on disk."""
    assert LDAR_ART.path is not None and LDAR_ART.manifest_path == LDAR_ART.path / "manifest.json"
    raw = json.loads(LDAR_ART.manifest_path.read_text(encoding="utf-8"))
    assert raw["format"] == "ctxsel-bundle-manifest" and raw["version"] == 1 and raw["artefact"] == "ldar"
    assert raw["made_by"] == "make ldar-policy"
    assert list(raw["files"]) == list(LDAR_ART.files)
    for name, entry in raw["files"].items():
        data = (LDAR_ART.path / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}, name
    m = bundled.read_manifest(LDAR_ART.path, "ldar", LDAR_ART.files)
    assert m.sha256 == LDAR_ART.sha256 and m.made_by == "make ldar-policy"
    assert LDAR_ART.digest == "7603317102c0ce179de76a23629d964e809254663d11812a6b4c8728d5a5529d"
    # the wheel ships it: package-data takes every file of data/ldar
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"data/ldar/*"' in pyproject and '"data/context_picker/*"' in pyproject


def test_a_missing_manifest_is_refused_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = corrupted_copy(tmp_path, None)
    (root / "data" / "ldar" / "manifest.json").unlink()
    use_root(monkeypatch, root)
    assert not bundled.get("ldar").bundled and bundled.get("ldar").sha256 == {}
    for call in (lambda: bundled.verify("ldar"), LDAR):
        with pytest.raises(ModelError, match=r"manifest\.json is missing, so the files beside it cannot be checked"):
            call()
    for name in LDAR_ART.files:  # no files either: simply not bundled
        (root / "data" / "ldar" / name).unlink()
    with pytest.raises(ModelError, match="not bundled in this build"):
        bundled.verify("ldar")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("{not json", "malformed: not JSON"),
        ("[]", "malformed: not a JSON object"),
        (lambda d: json.dumps({**d, "format": "x"}), "malformed: format 'x'"),
        (lambda d: json.dumps({**d, "version": 2}), "malformed: version 2"),
        (lambda d: json.dumps({**d, "artefact": "context-picker"}), "manifest of 'context-picker', not of 'ldar'"),
        (lambda d: json.dumps({**d, "files": {}}), 'malformed: "files" is not an object'),
        (
            lambda d: json.dumps({**d, "files": {"config.json": d["files"]["config.json"]}}),
            "does not list model.safetensors, which the loader reads",
        ),
        (
            lambda d: json.dumps({**d, "files": {**d["files"], "../x": d["files"]["config.json"]}}),
            "file '../x' leaves the folder",
        ),
        (
            lambda d: json.dumps({**d, "files": {**d["files"], "config.json": {"sha256": "AB" * 32, "bytes": 1}}}),
            "config.json: sha256 'ABAB",
        ),
        (
            lambda d: json.dumps({**d, "files": {**d["files"], "config.json": {"sha256": "a" * 64}}}),
            "config.json: bytes None is not a size",
        ),
    ],
    ids=["not-json", "list", "format", "version", "artefact", "no-files", "unlisted", "dotdot", "hex", "bytes"],
)
def test_a_malformed_manifest_is_a_clear_error(
    change: Any, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = corrupted_copy(tmp_path, None)
    edit_manifest(root, change)
    use_root(monkeypatch, root)
    for call in (lambda: bundled.verify("ldar"), LDAR, lambda: get_selector("ldar")):
        with pytest.raises(ModelError) as e:
            call()
        assert "manifest.json" in str(e.value) and message in str(e.value)
    assert main(["env"]) == 0  # env still lists it, and says why it cannot be used
    out = capsys.readouterr().out
    assert "UNUSABLE" in out and message in out


def test_a_file_the_manifest_names_must_exist_and_have_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = corrupted_copy(tmp_path, None)
    use_root(monkeypatch, root)
    extra = {"sha256": "0" * 64, "bytes": 3}
    edit_manifest(root, lambda d: json.dumps({**d, "files": {**d["files"], "extra/notes.txt": extra}}))
    with pytest.raises(ModelError, match=r"extra/notes\.txt is missing"):
        bundled.verify("ldar")
    edit_manifest(
        root, lambda d: json.dumps({**d, "files": {k: v for k, v in d["files"].items() if k != "extra/notes.txt"}})
    )
    assert bundled.verify("ldar") == root / "data" / "ldar"
    weights = root / "data" / "ldar" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # cut short
    with pytest.raises(ModelError, match=r"model\.safetensors is 3,539,402 bytes, its manifest says 3,539,412"):
        LDAR()


def test_a_bundle_written_into_a_folder_has_the_right_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bundle_ldar: the files, a card and manifest.json with their sha256; the folder loads as the package's."""
    assert LDAR_ART.path is not None
    dest = tmp_path / "data" / "ldar"
    (dest).mkdir(parents=True)
    (dest / "manifest.json").write_text("stale")  # an earlier bundle's: replaced
    sums = bundle_ldar(LDAR_ART.path, dest, made_by="ctxsel train ldar --bundle here")
    assert sorted(p.name for p in dest.iterdir()) == [
        "MODEL_CARD.md",
        "config.json",
        "manifest.json",
        "model.safetensors",
    ]
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["artefact"] == "ldar" and manifest["made_by"] == "ctxsel train ldar --bundle here"
    for name in LDAR_ART.files:
        data = (dest / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        assert sums[name] == LDAR_ART.sha256[name]
    card = (dest / "MODEL_CARD.md").read_text()
    assert all(f"`{h}`" in card for h in sums.values()) and "ctxsel train ldar --bundle here" in card
    use_root(monkeypatch, tmp_path)
    assert bundled.verify("ldar") == dest
    assert LDAR().policy_name == f"bundled ldar policy sha256:{sums['model.safetensors'][:12]}"
    # a manifest by hand, for some of the files (write_manifest reads it back as the loader does)
    written = bundled.write_manifest(dest, "ldar", "by hand")
    assert written["files"] == manifest["files"] and written["made_by"] == "by hand"
    with pytest.raises(ModelError, match="does not list model.safetensors"):
        bundled.write_manifest(dest, "ldar", "by hand", files=["config.json"])
    with pytest.raises(CtxselError, match="give a folder outside the trained one"):
        bundle_ldar(dest, dest / "again", made_by="x")


def test_a_refused_bundle_leaves_no_manifest(tmp_path: Path) -> None:
    """An adapter that cannot ship (its base is no bundled model) is refused before anything is written."""
    stage = tmp_path / "run" / "stage2"
    (stage / "adapter").mkdir(parents=True)
    (stage / "picker.json").write_text(json.dumps({"base": "/models/my-llama", "stage": 2}))
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "manifest.json").write_text("{}")  # an earlier bundle's: no longer true once rebundling starts
    with pytest.raises(CtxselError, match="must be on a bundled model"):
        bundle_context_picker(stage, dest, made_by="x")
    assert not (dest / "manifest.json").exists()


def train_argv(out: Path, *more: str) -> list[str]:
    return ["train", "ldar", "--dataset", "example", "--scorer", "keywords", "--output", str(out)] + [
        "--steps", "2", "--batch-size", "2", "--no-progress", "--threads", "1", *more
    ]  # fmt: skip


def test_ctxsel_train_ldar_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ctxsel train ldar ... --bundle DIR``: the policy, its card and manifest.json in DIR; rerun on the
    finished run, it only bundles (the same bytes)."""
    out, dest = tmp_path / "run", tmp_path / "shipped"
    assert main(train_argv(out, "--bundle", str(out / "policy"))) == 2  # into the trained folder: refused first
    assert "give a folder outside the trained one" in capsys.readouterr().err and not out.exists()
    assert main(train_argv(out, "--bundle", str(dest))) == 0
    printed = capsys.readouterr().out
    assert f"bundled {out}/policy into {dest}" in printed
    manifest = json.loads((dest / "manifest.json").read_text())
    for name in LDAR_ART.files:
        data = (dest / name).read_bytes()
        assert data == (out / "policy" / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert manifest["made_by"].startswith("ctxsel ")
    card = (dest / "MODEL_CARD.md").read_text()
    assert manifest["files"]["model.safetensors"]["sha256"] in card and "## Held-out questions" in card
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["bundle"]["sha256"]["model.safetensors"] == manifest["files"]["model.safetensors"]["sha256"]
    sel = get_selector(f"ldar[policy={dest}]")
    assert sel.select("q?", chunks(50), holo_scores(50, 10)).k >= 1
    before = (dest / "model.safetensors").read_bytes()
    assert main(train_argv(out, "--bundle", str(dest), "--no-eval")) == 0  # resumes the finished run: bundles
    assert (dest / "model.safetensors").read_bytes() == before
    assert "## Held-out questions" not in (dest / "MODEL_CARD.md").read_text()


def test_ctxsel_train_context_picker_refuses_a_bundle_into_its_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["train", "context-picker", "--dataset", "example", "--labels", "--output", str(out)]
    assert main([*argv, "--bundle", str(out / "stage2")]) == 2
    assert "give a folder outside the trained one" in capsys.readouterr().err


def test_ldar_with_no_options_uses_the_bundled_policy_and_its_band_moves() -> None:
    sel = get_selector("ldar")
    assert isinstance(sel, LDAR)
    digest = LDAR_ART.digest
    assert digest is not None and sel.policy_name == f"bundled ldar policy sha256:{digest[:12]}"
    assert sel.config()["policy"] == sel.policy_name and sel.config()["trained_with_reward"]["name"] == "label"
    ks = []
    for relevant in (10, 40, 90):
        s = holo_scores(188, relevant)
        out = sel.select("q?", chunks(188), s)
        band = out.details_as(LDARBand)
        assert out.to_dict()["meta"]["policy"] == sel.policy_name
        assert f"sha256:{digest[:12]}" in out.explanation
        assert band.ranks is not None and 1 < out.k < 188  # a real band, not one chunk nor everything
        ks.append(out.k)
        top = set(np.argsort(-s)[: out.k].tolist())
        assert len(top & set(range(relevant))) >= min(relevant, out.k) * 0.9  # the band holds the relevant
    assert ks[0] < ks[1] < ks[2]  # more relevant sentences, a wider band


def test_the_public_api_and_a_users_policy(tmp_path: Path) -> None:
    import ctxsel
    from ctxsel.selectors.ldar.checkpoint import save_policy

    s = holo_scores(100, 20)
    sel = ctxsel.select("q?", chunks(100), method="ldar", scores=s)
    assert sel.to_dict()["meta"]["policy"].startswith("bundled ldar policy sha256:")
    policy = LDAR().policy
    path = save_policy(tmp_path / "mine", policy, {"reward": {"name": "label"}})
    own = ctxsel.select("q?", chunks(100), method=f"ldar[policy={path}]", scores=s)
    assert own.to_dict()["meta"]["policy"] == str(path) and own.ids == sel.ids  # same weights, same band


def test_cli_select_and_eval_with_no_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = Path(bundled.PACKAGE_ROOT / "data" / "example.md")
    rc = main(
        ["select", "--document", str(doc), "--question", "How heavy is the meteorite?"]
        + ["--scorer", "keywords", "--method", "ldar", "--json"]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    got = json.loads(out)
    assert got["k"] >= 1 and got["config"]["policy"].startswith("bundled ldar policy sha256:")
    assert "[policy: bundled ldar policy sha256:" in got["explanation"]
    rc = main(
        ["eval", "--dataset", "example", "--scorer", "keywords", "--methods", "ldar,top-k@1"]
        + ["--output", str(tmp_path / "ev"), "--no-progress"]
    )
    _, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads((tmp_path / "ev/summary.json").read_text())
    assert summary["config"]["method_configs"]["ldar"]["policy"].startswith("bundled ldar policy sha256:")


def test_env_lists_the_bundled_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "--json"]) == 0
    info: dict[str, Any] = json.loads(capsys.readouterr().out)["bundled"]
    assert info["ldar"]["sha256"] == LDAR_ART.digest and info["ldar"]["present"] is True
    assert info["ldar"]["card"] == str(LDAR_ART.card_path)
    assert info["context-picker"]["bundled"] is False
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    assert f"sha256 {LDAR_ART.digest}" in text and "MODEL_CARD.md" in text
    assert "Context-Picker LoRA adapter: not bundled" in text


def test_the_service_uses_the_bundled_policy_without_ldar_policy(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    body = {"question": "q?", "chunks": [f"c{i}" for i in range(60)], "method": "ldar"}
    body["scores"] = holo_scores(60, 12).tolist()
    got = service_client(ServiceSettings(scorer="keywords")).post("/select", json=body)
    assert got.status_code == 200, got.text
    assert got.json()["config"]["policy"].startswith("bundled ldar policy sha256:") and got.json()["k"] > 1


def test_saved_policies_have_a_canonical_header(tmp_path: Path) -> None:
    """safetensors writes its metadata in hash-map order (a new order each process): save_policy sorts
    it, so the same weights give the same bytes and the same sha256."""
    import struct

    from ctxsel.selectors.ldar.checkpoint import canonical_header, save_policy

    path = save_policy(tmp_path / "p", LDAR().policy) / "model.safetensors"
    first = path.read_bytes()
    (n,) = struct.unpack("<Q", first[:8])
    header = json.loads(first[8 : 8 + n])
    assert list(header["__metadata__"]) == sorted(header["__metadata__"])
    header["__metadata__"] = dict(reversed(list(header["__metadata__"].items())))  # as another process may write
    text = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(first[:8] + text + b" " * (n - len(text)) + first[8 + n :])
    assert path.read_bytes() != first
    canonical_header(path)
    assert path.read_bytes() == first
