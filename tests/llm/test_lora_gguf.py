"""A peft LoRA adapter written as a llama.cpp LoRA GGUF: names, values, alpha, cache, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from ctxsel.llm.lora_gguf import adapter_sha, cached_lora_gguf, convert, llama_adapter_client  # noqa: E402

D, KV, R = 8, 4, 2  # hidden size, k/v size, LoRA rank


def tiny_base(path: Path, arch: str = "qwen2", n_layers: int = 2) -> Path:
    """A GGUF with just the tensors an adapter is checked against (numpy shapes are out x in)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((D, D), np.float32))
        w.add_tensor(f"blk.{i}.attn_k.weight", np.zeros((KV, D), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def peft_config(**over: Any) -> dict[str, Any]:
    cfg = {"peft_type": "LORA", "r": R, "lora_alpha": 16, "bias": "none", "use_dora": False, "use_rslora": False}
    return {**cfg, **over}


def tiny_adapter(folder: Path, cfg: dict[str, Any] | None = None, n_layers: int = 2, seed: int = 0, **extra: Any):
    """peft's files: adapter_config.json and adapter_model.safetensors (lora_A is r x in, lora_B out x r)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(cfg or peft_config()))
    weights = {}
    for i in range(n_layers):
        for proj, out in (("q_proj", D), ("k_proj", KV)):
            stem = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            weights[f"{stem}.lora_A.weight"] = rng.normal(size=(R, D)).astype(np.float32)
            weights[f"{stem}.lora_B.weight"] = rng.normal(size=(out, R)).astype(np.float32)
    weights.update(extra)
    safetensors_numpy.save_file(weights, str(folder / "adapter_model.safetensors"))
    return weights


def test_adapter_becomes_llama_cpp_lora_tensors_with_the_same_values(tmp_path: Path) -> None:
    base = tiny_base(tmp_path / "base.gguf")
    weights = tiny_adapter(tmp_path / "adapter")
    out = convert(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    r = gguf.GGUFReader(str(out))
    assert r.get_field("general.architecture").contents() == "qwen2"
    assert r.get_field("general.type").contents() == "adapter"
    assert r.get_field("adapter.type").contents() == "lora"
    assert r.get_field("adapter.lora.alpha").contents() == 16.0
    got = {t.name: np.array(t.data) for t in r.tensors}
    assert set(got) == {f"blk.{i}.attn_{p}.weight.lora_{ab}" for i in (0, 1) for p in "qk" for ab in "ab"}
    np.testing.assert_array_equal(
        got["blk.1.attn_k.weight.lora_a"], weights["base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight"]
    )
    np.testing.assert_array_equal(
        got["blk.0.attn_q.weight.lora_b"], weights["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    )
    # llama.cpp's own shape rule: a's ne[0] is the weight's input size, b's ne[1] its output, a's ne[1] = b's ne[0]
    k_a, k_b = (next(t for t in r.tensors if t.name == f"blk.0.attn_k.weight.lora_{x}") for x in "ab")
    assert tuple(k_a.shape) == (D, R) and tuple(k_b.shape) == (R, KV)


def test_conversion_is_cached_by_content(tmp_path: Path, cache_dir: Path) -> None:
    base = tiny_base(tmp_path / "base.gguf")
    tiny_adapter(tmp_path / "a")
    first = cached_lora_gguf(tmp_path / "a", base)
    assert (
        first.parent == cache_dir / "adapters" and first.name == f"lora-{adapter_sha(tmp_path / 'a', base)[:16]}.gguf"
    )
    mtime = first.stat().st_mtime_ns
    assert cached_lora_gguf(tmp_path / "a", base) == first and first.stat().st_mtime_ns == mtime
    tiny_adapter(tmp_path / "b", seed=1)  # other weights: another file
    assert cached_lora_gguf(tmp_path / "b", base) != first
    assert not list(first.parent.glob(".*.tmp"))


def test_without_a_writable_cache_the_conversion_goes_to_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing needs a writable home (docs/reliability.md H9): a cache folder under a file cannot be made."""
    import tempfile

    from ctxsel import paths

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    paths._forget()
    try:
        base = tiny_base(tmp_path / "base.gguf")
        tiny_adapter(tmp_path / "a")
        out = cached_lora_gguf(tmp_path / "a", base)
        assert out.parent.parent.parent == tmp_path / "tmp" and out.parent.name == "adapters" and out.is_file()
        mtime = out.stat().st_mtime_ns
        assert cached_lora_gguf(tmp_path / "a", base) == out and out.stat().st_mtime_ns == mtime  # reused
    finally:
        paths._forget()


@pytest.mark.parametrize(
    ("cfg", "extra", "match"),
    [
        (peft_config(use_dora=True), {}, "use_dora: a llama.cpp LoRA adapter is plain LoRA only"),
        (peft_config(use_rslora=True), {}, "use_rslora"),
        (peft_config(bias="all"), {}, "bias"),
        (peft_config(peft_type="IA3"), {}, "only LoRA runs in llama.cpp"),
        (
            None,
            {
                "base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight": np.zeros((R, D), np.float32),
                "base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight": np.zeros((D, R), np.float32),
            },
            "mlp.gate_proj has no tensor in base.gguf",
        ),
        (
            None,
            {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((R, D + 1), np.float32)},
            "do not fit blk.0.attn_q.weight",
        ),
        (None, {"base_model.model.lm_head.weight": np.zeros((3, D), np.float32)}, "not a LoRA weight"),
    ],
)
def test_what_llama_cpp_would_compute_differently_is_refused(tmp_path: Path, cfg, extra, match) -> None:
    base = tiny_base(tmp_path / "base.gguf")
    tiny_adapter(tmp_path / "adapter", cfg, **extra)
    with pytest.raises(ValueError, match=match):
        convert(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    assert not (tmp_path / "lora.gguf").exists() and not list(tmp_path.glob(".*.tmp"))


def test_an_architecture_whose_converter_permutes_weights_is_refused(tmp_path: Path) -> None:
    base = tiny_base(tmp_path / "base.gguf", arch="llama")
    tiny_adapter(tmp_path / "adapter")
    with pytest.raises(ValueError, match="'llama' model: adapters convert for"):
        convert(tmp_path / "adapter", base, tmp_path / "lora.gguf")


def test_a_folder_that_is_not_an_adapter_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(FileNotFoundError, match="not a peft LoRA adapter"):
        cached_lora_gguf(tmp_path / "a", tiny_base(tmp_path / "base.gguf"))


def test_a_picker_trained_on_a_model_folder_has_no_gguf(tmp_path: Path) -> None:
    (tmp_path / "picker.json").write_text(json.dumps({"base": "tiny-model", "chat": False}))
    with pytest.raises(ValueError, match="use runtime=transformers"):
        llama_adapter_client(tmp_path)


def test_runtime_options_of_the_picker(tmp_path: Path) -> None:
    from ctxsel.selectors.context_picker.picker import ContextPicker, default_runtime

    with pytest.raises(ValueError, match="name one with adapter=PATH"):
        ContextPicker(runtime="llama.cpp")
    (tmp_path / "picker.json").write_text(json.dumps({"base": "tiny-model", "chat": False}))
    with pytest.raises(ValueError, match="runtime must be one of 'llama.cpp', 'transformers', got 'vllm'"):
        ContextPicker(adapter=str(tmp_path), runtime="vllm")
    with pytest.raises(ValueError, match="use runtime=llama.cpp, or constrained=false"):
        ContextPicker(adapter=str(tmp_path), runtime="transformers", constrained=True)
    assert default_runtime(str(tmp_path)) == "transformers"  # a model folder has no GGUF
    (tmp_path / "picker.json").write_text(json.dumps({"base": "qwen-0.5b", "chat": True}))
    pytest.importorskip("llama_cpp")
    assert default_runtime(str(tmp_path)) == "llama.cpp"
