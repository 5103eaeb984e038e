"""Context-Picker at inference time (Zhu et al., arXiv 2512.14465, Sec. 3.3 "Inference").

retrieve -> pick -> generate: the candidate pool is the best chunks by
similarity that fit a token budget ``n_tokens`` (the paper's B; at most
``max_candidates`` of them), the LLM names the ids it keeps with a short
rationale (:mod:`.prompt` documents the one strict format), and the
selection is exactly those chunks.

With ``constrained=True`` (the default wherever the client can enforce a
format: not for a trained ``adapter`` run by transformers) the request
carries the reply's JSON schema (:func:`~.prompt.picker_format`) and the
prompt ends before the reply: llama.cpp enforces the schema with a
grammar, an OpenAI-compatible server with ``response_format``, and the
model writes the whole object. A reply produced under it is parsed by the
schema, any other by the strict :func:`~.prompt.parse_reply`.
``constrained=False`` sends the plain prompt, which ends in the reply's
first characters (the prefill), as training sees it: passed as
``reply_start``, they open the model's own turn with a local chat model,
which then continues the object instead of starting its own (in the user's
message a small chat model tends to open a code fence and restate the object;
in its own turn it does not, though it may still end the object with a period,
which the strict parser rejects: docs/archive/results-log.md counts both).

On an invalid reply the picker asks once more with the error stated in the
prompt; if the second reply is invalid too it falls back to adaptive-k
(within the same budget B) and records it in ``Selection.details`` (a
:class:`PickerDetails`: fallback, invalid replies, the errors and the raw
replies, and the rationale of the reply it used) and in the eval's ``invalid_share`` /
``fallback`` columns.

A trained picker is a LoRA adapter from ``ctxsel train context-picker``; pass
``adapter=PATH`` and the picker runs it in process instead of the ``llm``
client. Left unset, the picker runs the adapter that ships with ctxsel
(``ctxsel.bundled``, sha256-checked) when its ``llm`` is the bundled local model
the adapter was trained on; where none ships (training one needs a GPU) or the
``llm`` is another model, it runs the untrained picker, the paper's baseline,
and its explanation says so. ``adapter=none`` asks for the
untrained picker outright, with no such note. ``runtime=llama.cpp`` (the default when the adapter's base is a
bundled model and llama-cpp-python is installed) converts the adapter once
to a llama.cpp LoRA (:mod:`ctxsel.llm.lora_gguf`) and applies it to the
base model's GGUF, with the reader's llama.cpp threads: no torch, and the
reply format enforced by a grammar. ``runtime=transformers`` loads the
de-quantised base with peft, as training does, and cannot constrain.

Where the paper is silent: B defaults to 2,000 cl100k tokens and the pool
to 20 chunks (about 15 hotpotqa paragraphs, so the prompt fits the local
model's 8k window with room to spare); greedy decoding (temperature 0) at
inference; the fallback is adaptive-k's largest gap over all chunks, capped
at B tokens so a fallback never reads more than the picker could have.
``min_k`` is a floor, as for the score-based methods: a pick of fewer chunks
is topped up with the pool's best-ranked ones it did not name (not in the
paper; the default, 1, never adds any, since a valid pick names one or more).

``samples=n`` (not in the paper; the default, 1, is its greedy pick) reads
the prompt once and samples ``n`` replies at ``temperature`` (default 1.0,
the temperature GRPO sampled the policy at) with seeds ``seed, seed+1, ...``:
self-consistency (Wang et al., 2023) over the policy's own distribution.
A candidate is kept when at least half of the valid replies name it; the
``min_k`` floor is topped up by vote share first and rank second, so with
one greedy reply both rules are the ones above. Invalid replies do not vote;
when none of the ``n`` is valid the picker retries (``n`` more, the error
stated) and then falls back as usual.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from ctxsel.errors import InputError, MissingLLMError, ReplyFormatError
from ctxsel.inputs import MAX_SEED
from ctxsel.llm.base import LLMClient
from ctxsel.options import CommonOptions, option
from ctxsel.query import Query
from ctxsel.reader import for_template
from ctxsel.selectors.adaptive_k import AdaptiveK
from ctxsel.selectors.base import NanPolicy, Selector
from ctxsel.selectors.context_picker.prompt import (
    MAX_RATIONALE_CHARS,
    PICKER,
    PREFILL,
    parse_reply,
    picker_format,
    render_prompt,
)
from ctxsel.selectors.fixed import TopNTokens
from ctxsel.selectors.llm_calls import Calls
from ctxsel.types import MethodDetails, Selection, meta_key


@dataclass(frozen=True, slots=True)
class PickerDetails(MethodDetails):
    """Context-Picker's replies: the rationale of the reply it used (``ctxsel eval`` keeps it in
    the example's row), whether one was valid, and the invalid replies that made it retry or fall
    back to adaptive-k."""

    rationale: str | None = field(metadata=meta_key(omit_none=False, in_row=True))
    valid: bool
    fallback: bool
    invalid_replies: int
    errors: list[str]
    replies: list[str]
    #: replies produced under the JSON schema (0 when the server refused it)
    constrained_replies: int
    seconds: float


class ContextPicker(Selector):
    needs_llm = True

    @dataclass(frozen=True)
    class Options(CommonOptions):
        n_tokens: int = option(2000, minimum=1, doc="the candidate pool's token budget (the paper's B)")
        max_candidates: int = option(20, minimum=1, doc="at most this many candidates in the prompt")
        stage: int = option(2, minimum=1, maximum=2, doc="the prompt of GRPO stage 1 (recall) or 2 (minimal set)")
        retries: int = option(1, minimum=0, doc="asks again after an invalid reply, saying what was wrong")
        max_reply_tokens: int = option(160, minimum=1, doc="the reply's token limit")
        constrained: bool | None = option(None, doc="the reply's format by construction (default: where it can be)")
        runtime: Literal["llama.cpp", "transformers"] | None = option(None, doc="how a trained adapter runs")
        samples: int = option(1, minimum=1, doc="replies that vote (the paper's n); 1 is greedy")
        temperature: float = option(1.0, minimum=0, doc="sampling temperature (samples > 1)")
        seed: int = option(0, minimum=0, maximum=MAX_SEED, doc="the sampling seed (samples > 1)")

        def refuse(self, given: frozenset[str]) -> str | None:
            sampled = {"temperature", "seed"} & given
            if sampled and self.samples == 1:
                return f"{', '.join(sorted(sampled))} only apply to sampled replies (samples > 1); samples=1 is greedy"
            if self.samples > 1 and not self.temperature > 0:
                return f"samples={self.samples} needs temperature > 0, got {self.temperature}"
            return None

    resources = ("llm", "adapter")

    def __init__(self, llm: LLMClient | None = None, *args: Any, adapter: str | None = None, **given: Any) -> None:
        super().__init__(*args, **given)
        given_options = self.options.as_config()
        runtime, constrained = given_options["runtime"], given_options["constrained"]
        adapter, self.note = _resolve_adapter(adapter, llm)
        if adapter is None and runtime is not None:
            raise InputError("runtime= chooses how a trained adapter runs: name one with adapter=PATH")
        if adapter is not None:
            runtime = default_runtime(adapter) if runtime is None else runtime
        if constrained is None:  # on wherever the client can enforce a format
            constrained = runtime != "transformers"
        if constrained and runtime == "transformers":
            raise InputError(
                "transformers cannot enforce a reply format: use runtime=llama.cpp, or constrained=false "
                "(the default with runtime=transformers)"
            )
        self.constrained = constrained
        self.runtime = runtime
        self.adapter = adapter
        if runtime == "llama.cpp":
            from ctxsel.llm.lora_gguf import llama_adapter_client

            llm = llama_adapter_client(cast(str, adapter), n_threads=getattr(llm, "n_threads", None))
        elif runtime == "transformers":
            from ctxsel.llm.hf_client import TransformersClient

            llm = TransformersClient.from_adapter(cast(str, adapter))
        if llm is None:
            raise MissingLLMError("context-picker", "; or name a trained adapter: context-picker[adapter=PATH]")
        self.llm = llm
        self.client = for_template(llm, PICKER)
        self.fallback = AdaptiveK(max_tokens=self.n_tokens, min_k=self.min_k, nan_policy=self.nan_policy)

    def config(self) -> dict[str, Any]:
        return {
            "n_tokens": self.n_tokens,
            "max_candidates": self.max_candidates,
            "stage": self.stage,
            "retries": self.retries,
            "max_reply_tokens": self.max_reply_tokens,
            "template": PICKER.key,
            "constrained": self.constrained,
            "adapter": self.adapter,
            "runtime": self.runtime,
            "samples": self.samples,
            **({"temperature": self.temperature, "seed": self.seed} if self.samples > 1 else {}),
            "llm": getattr(self.llm, "model_id", ""),
            **self.common_config(),
        }

    def candidates(self, query: Query, scores: np.ndarray) -> Selection:
        """C_cand = TopSim(q, C; B): the best chunks within B tokens, at most max_candidates."""
        return candidate_pool(query, scores, self.n_tokens, self.max_candidates, self.nan_policy)

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        # the picker names evidence; the reader, not the picker, reads the answer options
        t0 = time.perf_counter()
        question, chunk_list = query.question, query.chunks
        if scores is None and chunk_list:
            raise InputError(
                "context-picker needs similarity scores to build its candidate pool: pass scores=... "
                "or use ctxsel.select(..., scorer=...)"
            )
        pool = self.candidates(query, scores if scores is not None else np.zeros(0))
        calls = Calls()
        replies: list[str] = []
        errors: list[str] = []
        if not pool.chunks:
            return self._finish(pool, "empty context: nothing to pick", calls, replies, errors, None, False, t0)
        passages = [c.text for c in pool.chunks]
        fmt = picker_format(len(passages)) if self.constrained else None
        # a constrained reply is a whole object: room for the longest rationale and every id
        max_tokens = (
            self.max_reply_tokens
            if fmt is None
            else max(self.max_reply_tokens, MAX_RATIONALE_CHARS // 2 + 3 * len(passages) + 16)
        )
        error: str | None = None
        sampled = self.samples > 1
        for _ in range(1 + self.retries):
            prompt = render_prompt(question, passages, self.stage, error, prefill=fmt is None)
            # constrained, the reply is the whole object; else it continues the prefill, which opens the model's turn
            batch = calls.ask(
                self.client,
                prompt,
                self.samples,
                max_tokens=max_tokens,
                temperature=self.temperature if sampled else 0.0,
                seed=self.seed if sampled else None,
                stop=list(PICKER.stop),
                fmt=fmt,
                reply_start=PREFILL,
            )
            picks: list[list[int]] = []
            rationale = ""
            for reply in batch:
                replies.append(reply.text)
                try:
                    parsed = reply.parse(fmt, lambda text: parse_reply(text, len(passages)))
                except ReplyFormatError as e:
                    error = str(e)
                    errors.append(error)
                    continue
                picks.append([i - 1 for i in parsed.ids])
                rationale = rationale or parsed.rationale
            if not picks:
                continue
            idx, order = vote(picks, pool.k)
            picked = len(idx)
            idx = top_up(idx, order, min(self.min_k, pool.k))  # min_k, as for every method: a floor
            sel = Selection(
                ids=[pool.ids[i] for i in idx],
                scores=[pool.scores[i] for i in idx],
                chunks=[pool.chunks[i] for i in idx],
                method=self.name,
                config={},  # _finish sets it
                explanation="",
                n_candidates=len(chunk_list),
            )
            why = f"picked {picked} of {pool.k} candidates"
            why += f" (named by at least half of {len(picks)} valid samples)" if sampled else ""
            why += f": {rationale[:200]}"
            if sel.k > picked:
                why += f"; raised to min_k={self.min_k} with the {'most-voted, then ' if sampled else ''}best-ranked"
            return self._finish(sel, why, calls, replies, errors, rationale, False, t0)
        fb = self.fallback._select(query, scores)
        why = (
            f"{len(errors)} invalid repl{'y' if len(errors) == 1 else 'ies'} (last: {errors[-1]}); "
            f"fell back to adaptive-k: {fb.explanation}"
        )
        return self._finish(fb, why, calls, replies, errors, None, True, t0)

    def _finish(
        self,
        sel: Selection,
        why: str,
        calls: Calls,
        replies: list[str],
        errors: list[str],
        rationale: str | None,
        fallback: bool,
        t0: float,
    ) -> Selection:
        sel.method = self.name
        sel.config = self.config()
        sel.explanation = f"{why} ({self.note})" if self.note else why
        sel.usage = sel.usage + calls.usage
        n_replies = len(replies)
        sel.details = PickerDetails(
            rationale=rationale,
            valid=not fallback and n_replies > 0,
            fallback=fallback,
            invalid_replies=len(errors),
            errors=errors,
            replies=replies,
            constrained_replies=calls.constrained_replies,
            seconds=time.perf_counter() - t0,
        )
        # per-example numbers the eval averages into its invalid-share / fallback columns
        sel.meta["metrics"] = {
            "invalid_share": (len(errors) / n_replies) if n_replies else None,
            "fallback": float(fallback) if n_replies else None,
        }
        sel.trace.extend(
            {"step": "reply", "attempt": i + 1, "text": r[:500], "error": errors[i] if i < len(errors) else None}
            for i, r in enumerate(replies)
        )
        return sel


def _resolve_adapter(adapter: str | None, llm: LLMClient | None) -> tuple[str | None, str]:
    """The adapter to run and a note for the explanation. ``None``: the bundled adapter when one ships and
    the reader is the bundled local model, else the untrained picker with a note that says why;
    ``"none"``: the untrained picker, asked for."""
    if adapter is not None:
        return (None, "") if str(adapter).lower() == "none" else (str(adapter), "")
    from ctxsel import bundled

    artefact = bundled.get("context-picker")
    if not artefact.bundled:
        return None, "the untrained picker, the paper's baseline: no trained adapter ships with this ctxsel"
    folder = bundled.verify("context-picker")
    from ctxsel.llm.hf_client import adapter_meta

    base = str(adapter_meta(folder)["base"])
    if getattr(llm, "model_id", "") == f"llama.cpp:{base}":
        return str(folder), ""
    return None, f"the untrained picker: the bundled adapter is for the bundled local {base} only"


#: How a trained adapter runs (see the module docstring).
RUNTIMES = ("llama.cpp", "transformers")


def default_runtime(adapter: str) -> str:
    """llama.cpp when the adapter's base is a bundled model (it has a GGUF) and llama-cpp-python is installed."""
    import importlib.util
    from pathlib import Path

    from ctxsel.llm.hf_client import adapter_meta, bundled_base

    base = bundled_base(str(adapter_meta(Path(adapter))["base"]))
    return "llama.cpp" if base is not None and importlib.util.find_spec("llama_cpp") is not None else "transformers"


def vote(picks: Sequence[Sequence[int]], n: int) -> tuple[list[int], list[int]]:
    """The candidates (0-based) that at least half of ``picks`` name, and all ``n`` candidates in the
    order a floor tops up from: by the share of picks naming them, then by rank. One pick: itself."""
    count = np.zeros(n)
    for p in picks:
        count[list(set(p))] += 1
    order = sorted(range(n), key=lambda i: (-count[i], i))
    if not picks:
        return [], order
    if len(picks) == 1:  # a single (greedy) reply: its own order, as the model named them
        return list(picks[0]), order
    return [i for i in order if 2 * count[i] >= len(picks)], order


def top_up(kept: Sequence[int], order: Sequence[int], k: int) -> list[int]:
    """``kept`` raised to ``k`` candidates with the first of ``order`` (``vote``'s: by vote share,
    then rank) it does not hold; unchanged when it already holds ``k``."""
    return [*kept, *[i for i in order if i not in kept][: max(0, k - len(kept))]]


def candidate_pool(
    query: Query,
    scores: np.ndarray | None = None,
    n_tokens: int = 2000,
    max_candidates: int = 20,
    nan_policy: str = "raise",
) -> Selection:
    """The picker's candidate pool (shared by inference and training): the
    longest prefix of the similarity ranking (``scores``, by default the query's) within
    ``n_tokens``, at most ``max_candidates`` chunks, in rank order."""
    cut = TopNTokens(n_tokens, min_k=1, nan_policy=cast(NanPolicy, nan_policy))
    pool = cut._select(query, query.scores if scores is None else scores)
    if pool.k > max_candidates:
        pool.ids, pool.scores, pool.chunks = (
            pool.ids[:max_candidates],
            pool.scores[:max_candidates],
            pool.chunks[:max_candidates],
        )
    return pool


__all__ = ["ContextPicker", "PickerDetails", "candidate_pool", "top_up", "vote"]
