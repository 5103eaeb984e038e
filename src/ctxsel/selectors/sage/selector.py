"""SAGE: sufficiency-aware exploration of a document's sentences by an LLM.

No index: the document's sentences are the vertices of an implicit graph
(:mod:`.graph`). For a question SAGE (paper 004, Algorithms 1-3):

1. asks the LLM whether the question is a *counting* question; if so, it
   asks for the thing to count and its variants and answers with an exact
   count of their occurrences in the whole text (Algorithm 3), never an LLM
   guess;
2. otherwise, for at most ``iter_max`` rounds: the LLM proposes keys from
   the question (and options) and what was gathered so far (Prompt 1); the
   ``recall_index`` sentences sharing the most non-stopword words with the
   keys join the evidence, and so do ``neighbor_num`` preceding/following
   sentences of the ``n_seeds`` (5) most relevant ones; the evidence's
   importance is measured by perturbation (Algorithm 2) and the LLM, shown
   that score, says YES (enough) or NO (Prompt 2); YES stops the loop;
3. answers from the evidence: a majority of ``voter_num`` sampled answers
   for a multiple-choice question (Prompt 3), one greedy answer otherwise.

The Selection holds the gathered sentences in document order (ids
``<chunk id>#s<j>``, ``meta["parent"]`` the chunk), its trace one entry per
round (keys, retrieved sentences, neighbours, importance, verdict), its
``answer`` the answer (a :class:`~ctxsel.types.RoutedAnswer`: a Reader returns it without another call),
and its ``usage`` every LLM call.

Where the paper is silent (each choice is a parameter):

- importance uses ``n_perturb = 3`` perturbed answers (the paper gives no
  n), lambda ~ U(0.3, 1] as the probability that a word is perturbed
  (:mod:`.noise`), and the cosine of the project's embeddings (MiniLM, run
  by ``backend``, which ``ctxsel eval`` sets from its ``--backend``) of
  the clean and perturbed answers; the clean answer is the same call as a
  free-form final answer, so the last round's is reused rather than asked
  twice;
- free-form questions are answered with the factoid template every other
  method in ctxsel is read with (Prompt 3 is written for options), so
  SubEM compares like with like;
- voters sample at ``voter_temperature = 0.8`` with seeds ``seed+1..``; a
  tie goes to the option voted first;
- the ``neighbor_num`` neighbours are shared evenly by the seeds, nearest
  first (-1, +1, -2, +2 for 4 each), within the seed's document;
- the last round asks no verdict (``final_verdict=False``): Algorithm 1
  leaves its loop after round ``iter_max`` whether the evidence is judged
  sufficient or not, so that verdict, and the ``n_perturb`` perturbed answers
  behind its importance, cannot change the answer; skipping them keeps every
  other call, and so the answer, as it was, and evaluates 1.84x fewer prompt
  tokens on hotpotqa-long (benchmarks/results/sage_prompt_work.md).
  ``final_verdict=True`` asks them as the loop is written, for its trace;
- retrieval runs over every sentence each round (E := E u Retrieve) and
  only sentences with relevance > 0 are retrieved;
- replies the method cannot read do not crash it, they are recorded in
  ``meta["failures"]``: unreadable keys (or keys matching no sentence) fall
  back to the question's and options' own words; an unreadable verdict is
  NO; an unreadable counting verdict is "not counting"; a counting question
  whose options hold no number is explored instead; if no voter names an
  option the first option is answered. A prompt too long for the model's
  window ends the exploration (the evidence so far is answered from).
- the answers (the clean and perturbed ones behind the importance, and the
  final answer or votes) read within the model's window when it is known
  (:func:`ctxsel.reader.context_window`, as the reader does): evidence that
  does not fit is cut to its most relevant sentences (retrieved ones by
  word overlap, then neighbours), read in document order; ``meta["cut"]``
  (the final answer's) and a ``cut`` trace step record it. The keys and
  sufficiency prompts read the whole evidence: past the window they end
  the exploration as above.

Constrained replies (``constrained=True``, the default): every reply with a
format is asked for under its JSON schema -- ``{"keys": [...]}`` (at most
``MAX_CONSTRAINED_KEYS`` short strings), ``{"targets": [...]}``,
``{"verdict": "YES" | "NO"}`` for sufficiency and the counting check,
``{"option": "<letter>", "reason": "..."}`` for each multiple-choice answer
and vote -- enforced by llama.cpp grammars or a server's
``response_format``. A reply produced under its schema is read by the
schema's strict parser; any other reply (``constrained=False``, or a server
that refused the schema) by the parsers above. Free-form answers are never
constrained. ``meta["metrics"]["unreadable_verdicts"]`` is the share of
YES/NO verdicts (sufficiency and counting check) that could not be read,
for the eval to average.
"""

from __future__ import annotations

import re
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ctxsel.datasets.multiple_choice import LETTERS, parse_choice, question_with_options
from ctxsel.errors import InputError, LLMContextLengthError, MissingLLMError, ReplyFormatError
from ctxsel.inputs import as_int, check_question
from ctxsel.llm.base import LLMClient, complete_n
from ctxsel.llm.constrain import ReplyFormat, option_vote_format, string_list_format, yes_no_format
from ctxsel.llm.prompts import (
    FACTOID_QA,
    MULTIPLE_CHOICE,
    SAGE_COUNT_TARGETS,
    SAGE_IS_COUNTING,
    SAGE_KEYS,
    SAGE_SUFFICIENT,
    PromptTemplate,
    get_template,
)
from ctxsel.reader import (
    DEFAULT_MAX_ANSWER_TOKENS,
    clean_answer,
    context_window,
    cue_args,
    fit_to_window,
    for_template,
)
from ctxsel.scoring.keywords import words
from ctxsel.selectors.base import CommonOptions, Selector
from ctxsel.selectors.sage.graph import SentenceGraph
from ctxsel.selectors.sage.noise import disturb, draw_lambda
from ctxsel.selectors.sage.trace import CountingStep, RoundStep
from ctxsel.types import Chunk, LLMUsage, RoutedAnswer, SageDetails, Selection, as_chunks

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_KEY_SPLIT = re.compile(r"[,;\n|]")
_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_KEY_LEAD = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022#]+)\s*")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER = re.compile(r"\b(\d+|" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


#: Constrained replies: at most this many keys (or counting targets), each at most MAX_KEY_CHARS long.
MAX_CONSTRAINED_KEYS = 10
MAX_KEY_CHARS = 40
#: Constrained multiple-choice replies: the reason after the letter is at most this long.
MAX_REASON_CHARS = 100

SUFFICIENT_FORMAT = yes_no_format("sage_sufficient")
COUNTING_FORMAT = yes_no_format("sage_is_counting")
KEYS_FORMAT = string_list_format("sage_keys", "keys", max_items=MAX_CONSTRAINED_KEYS, max_chars=MAX_KEY_CHARS)
TARGETS_FORMAT = string_list_format(
    "sage_count_targets", "targets", max_items=MAX_CONSTRAINED_KEYS, max_chars=MAX_KEY_CHARS
)
#: max_tokens for a constrained reply of each template (the JSON's own tokens on top of the free reply's).
CONSTRAINED_MAX_TOKENS = {
    "sage-sufficient": 16,
    "sage-is-counting": 16,
    "sage-keys": 128,
    "sage-count-targets": 128,
    "multiple-choice": 64,
}


def vote_format(n_options: int) -> ReplyFormat:
    """A multiple-choice answer with the option's letter first (one of the ``n_options``) and a bounded reason."""
    return option_vote_format(n_options, max_reason_chars=MAX_REASON_CHARS, name="sage_vote")


def clean_keys(keys: Sequence[str], limit: int = 32) -> list[str]:
    """Keys with list marks and markup stripped; keys without a non-stopword word, and repeats, dropped."""
    out: list[str] = []
    for part in keys:
        key = _KEY_LEAD.sub("", _TAG.sub(" ", part)).strip(" \t\"'`*.:()[]{}")
        if key and words(key) and key.lower() not in (k.lower() for k in out):
            out.append(key)
    return out[:limit]


def parse_keys(reply: str, limit: int = 32) -> list[str]:
    """Comma/semicolon/line-separated keys with list marks and markup stripped;
    keys without a non-stopword word are dropped."""
    return clean_keys(_KEY_SPLIT.split(_TAG.sub(" ", reply)), limit)


def parse_verdict(reply: str) -> bool | None:
    """YES -> True, NO -> False, the first of either word; None when neither appears."""
    m = _YES_NO.search(reply)
    return None if m is None else m.group(1).lower() == "yes"


def option_number(option: str) -> int | None:
    m = _NUMBER.search(option)
    if m is None:
        return None
    tok = m.group(1).lower()
    return int(tok) if tok.isdigit() else _NUMBER_WORDS[tok]


@dataclass
class _Run:
    """What one select() call accumulates."""

    usage: LLMUsage = field(default_factory=LLMUsage)
    trace: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    out_of_window: bool = False
    cut: dict[str, Any] | None = None
    verdicts: int = 0  # YES/NO verdicts asked for (sufficiency and counting check)
    unreadable_verdicts: int = 0
    constrained_replies: int = 0  # replies produced under their reply format


class SAGE(CommonOptions, Selector):
    name = "sage"
    needs_scores = False
    needs_llm = True

    def __init__(
        self,
        llm: LLMClient | None = None,
        iter_max: int = 2,
        *,
        recall_index: int = 25,
        neighbor_num: int = 20,
        n_seeds: int = 5,
        voter_num: int = 10,
        n_perturb: int = 3,
        lambda_low: float = 0.3,
        voter_temperature: float = 0.8,
        counting: bool = True,
        seed: int = 0,
        max_keys: int = 32,
        answer_template: str = FACTOID_QA.name,
        max_answer_tokens: int = 32,
        embed: Callable[[list[str]], np.ndarray] | None = None,
        backend: str = "auto",
        constrained: bool = True,
        final_verdict: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if llm is None:
            raise MissingLLMError("sage")
        if not isinstance(constrained, bool):
            raise InputError(f"constrained must be true or false, got {constrained!r}")
        self.constrained = constrained
        if not isinstance(final_verdict, bool):
            raise InputError(f"final_verdict must be true or false, got {final_verdict!r}")
        self.final_verdict = final_verdict
        for name, value, low in (
            ("iter_max", iter_max, 1),
            ("recall_index", recall_index, 1),
            ("neighbor_num", neighbor_num, 0),
            ("n_seeds", n_seeds, 1),
            ("voter_num", voter_num, 1),
            ("n_perturb", n_perturb, 0),
            ("max_keys", max_keys, 1),
        ):
            if as_int(name, value) < low:
                raise InputError(f"{name} must be >= {low}, got {value}")
        if not 0.0 <= lambda_low <= 1.0:
            raise InputError(f"lambda_low must be in [0, 1], got {lambda_low}")
        self.llm = llm
        self.iter_max, self.recall_index, self.neighbor_num = int(iter_max), int(recall_index), int(neighbor_num)
        self.n_seeds, self.voter_num, self.n_perturb = int(n_seeds), int(voter_num), int(n_perturb)
        self.lambda_low, self.voter_temperature = float(lambda_low), float(voter_temperature)
        self.counting, self.seed, self.max_keys = bool(counting), int(seed), int(max_keys)
        self.answer_template = get_template(answer_template)
        self.max_answer_tokens = int(max_answer_tokens)
        if backend != "auto":  # checked now (a name, onnxruntime), loaded at the first embedding
            from ctxsel.scoring.dense import resolve_backend

            backend = resolve_backend(backend)
        self._embed = embed
        self.backend = backend if embed is None else "given"  # an embed callable replaces the dense scorer
        self._clients: dict[str, LLMClient] = {}
        self._window = context_window(llm)

    def config(self) -> dict[str, Any]:
        return {
            "iter_max": self.iter_max,
            "recall_index": self.recall_index,
            "neighbor_num": self.neighbor_num,
            "n_seeds": self.n_seeds,
            "voter_num": self.voter_num,
            "n_perturb": self.n_perturb,
            "lambda_low": self.lambda_low,
            "voter_temperature": self.voter_temperature,
            "counting": self.counting,
            "seed": self.seed,
            "answer_template": self.answer_template.key,
            "max_answer_tokens": self.max_answer_tokens,
            "constrained": self.constrained,
            "final_verdict": self.final_verdict,
            **({} if self.backend in ("auto", "given") else {"backend": self.backend}),
            "templates": [
                t.key for t in (SAGE_KEYS, SAGE_SUFFICIENT, MULTIPLE_CHOICE, SAGE_IS_COUNTING, SAGE_COUNT_TARGETS)
            ],
            "llm": getattr(self.llm, "model_id", ""),
            **super().config(),
        }

    # -- LLM calls ---------------------------------------------------------------

    def _ask(
        self,
        run: _Run,
        template: PromptTemplate,
        prompt: str,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        fmt: ReplyFormat | None = None,
    ) -> tuple[str, LLMUsage, bool] | None:
        """One call, counted: (text, usage, produced under ``fmt``); None (and a recorded
        failure) when the prompt exceeds the window. ``fmt`` is sent only when constrained."""
        got = self._ask_n(run, template, prompt, max_tokens, 1, temperature, seed, fmt)
        return None if got is None else got[0]

    def _ask_n(
        self,
        run: _Run,
        template: PromptTemplate,
        prompt: str,
        max_tokens: int,
        n: int,
        temperature: float = 0.0,
        seed: int | None = None,
        fmt: ReplyFormat | None = None,
    ) -> list[tuple[str, LLMUsage, bool]] | None:
        """``n`` replies to one prompt, the prompt paid for once (:func:`~ctxsel.llm.base.complete_n`)."""
        if template.key not in self._clients:
            self._clients[template.key] = for_template(self.llm, template)
        extra: dict[str, Any] = {}
        if fmt is not None and self.constrained:
            extra["reply_format"] = fmt
            max_tokens = max(max_tokens, CONSTRAINED_MAX_TOKENS.get(template.name, max_tokens))
        else:
            extra.update(cue_args(template))
        try:
            replies = complete_n(
                self._clients[template.key],
                prompt,
                n,
                max_tokens=max_tokens,
                temperature=temperature,
                stop=list(template.stop) or None,
                seed=seed,
                **extra,
            )
        except LLMContextLengthError as e:
            run.failures.append(f"{template.name}: prompt exceeds the model's window ({e})")
            run.out_of_window = True
            return None
        out = []
        for reply in replies:
            run.usage = run.usage + reply.usage
            constrained = bool(extra) and reply.constrained
            run.constrained_replies += constrained
            out.append((reply.text, reply.usage, constrained))
        return out

    @staticmethod
    def _read(got: tuple[str, LLMUsage, bool], fmt: ReplyFormat, legacy: Callable[[str], Any]) -> Any:
        """A reply's value: ``fmt``'s strict parser for a constrained reply, else ``legacy``; None if unreadable."""
        if got[2]:
            try:
                return fmt.parse(got[0])
            except ReplyFormatError:
                return None
        return legacy(got[0])

    def _verdict(self, run: _Run, got: tuple[str, LLMUsage, bool], fmt: ReplyFormat) -> bool | None:
        """A YES/NO verdict (counted; None when unreadable)."""
        verdict: bool | None = self._read(got, fmt, parse_verdict)
        run.verdicts += 1
        run.unreadable_verdicts += verdict is None
        return verdict

    def _key_list(self, got: tuple[str, LLMUsage, bool] | None, fmt: ReplyFormat) -> list[str]:
        if got is None:
            return []
        keys = self._read(got, fmt, lambda text: parse_keys(text, self.max_keys))
        return [] if keys is None else clean_keys(keys, self.max_keys)

    def _infer(
        self,
        run: _Run,
        question: str,
        options: Sequence[str],
        context: str,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> tuple[str, str, LLMUsage] | None:
        """(answer, raw reply, usage) from ``context``: Prompt 3 with options, else the answer template."""
        got = self._infer_n(run, question, options, context, temperature, seed, 1)
        return None if got is None else got[0]

    def _infer_n(
        self,
        run: _Run,
        question: str,
        options: Sequence[str],
        context: str,
        temperature: float = 0.0,
        seed: int | None = None,
        n: int = 1,
    ) -> list[tuple[str, str, LLMUsage]] | None:
        """``n`` (answer, raw reply, usage) from ``context``: Prompt 3 with options, else the answer template."""
        fmt = None
        if options:
            t, max_tokens = MULTIPLE_CHOICE, DEFAULT_MAX_ANSWER_TOKENS[MULTIPLE_CHOICE.name]
            prompt = t.render(question=question_with_options(question, options), context=context)
            fmt = vote_format(len(options)) if len(options) <= len(LETTERS) else None
        else:
            t, max_tokens = self.answer_template, self.max_answer_tokens
            prompt = t.render(question=question, context=context)
        replies = self._ask_n(run, t, prompt, max_tokens, n, temperature, seed, fmt)
        if replies is None:
            return None
        out = []
        for got in replies:
            text = got[0]
            if fmt is not None and got[2]:  # {"option": "B", "reason": ...} reads as "B. ..." (raw stays the JSON)
                text = self._read(got, fmt, str) or text
            out.append((clean_answer(text, t), got[0], got[1]))
        return out

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._embed is None:
            from ctxsel.scoring.dense import DenseScorer

            self._embed = DenseScorer(cache=False, backend=self.backend).embed
        v = np.asarray(self._embed(texts), dtype=np.float64)
        return cast(np.ndarray, v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))

    def importance(
        self, run: _Run, question: str, options: Sequence[str], context: str, rng: np.random.Generator
    ) -> tuple[float | None, tuple[str, str, LLMUsage] | None, list[float]]:
        """Algorithm 2: 1 - mean cos(emb(a), emb(a')) over ``n_perturb`` perturbed contexts.

        Returns (importance or None, the clean answer, the lambdas drawn).
        """
        clean = self._infer(run, question, options, context)
        if clean is None or self.n_perturb == 0:
            return None, clean, []
        lambdas: list[float] = []
        answers: list[str] = []
        for _ in range(self.n_perturb):
            lam = draw_lambda(rng, self.lambda_low)
            got = self._infer(run, question, options, disturb(context, lam, rng))
            if got is None:
                return None, clean, lambdas
            lambdas.append(round(lam, 3))
            answers.append(got[0])
        vecs = self.embed([clean[0], *answers])
        return float(1.0 - np.mean(vecs[1:] @ vecs[0])), clean, lambdas

    # -- the method --------------------------------------------------------------

    def select(
        self,
        question: str,
        chunks: Sequence[Chunk | str],
        scores: Sequence[float] | np.ndarray | None = None,
        *,
        choices: Sequence[str] | None = None,
    ) -> Selection:
        del scores  # embedding-free: SAGE never reads similarity scores
        check_question(question)
        t0 = time.perf_counter()
        options = [str(o) for o in (choices or [])]  # a multiple-choice question's answer options
        graph = SentenceGraph(as_chunks(chunks))
        run = _Run()
        rng = np.random.default_rng([self.seed, zlib.crc32(question.encode("utf-8"))])
        if len(graph) == 0:
            got = self._infer(run, question, options, "")
            return self._finish(
                graph, {}, run, options, got, None, "empty context: answered without evidence", "empty", t0
            )
        if self.counting:
            counted = self._count(run, graph, question, options, t0)
            if counted is not None:
                return counted
        return self._explore(run, graph, question, options, rng, t0)

    def _count(self, run: _Run, graph: SentenceGraph, question: str, options: list[str], t0: float) -> Selection | None:
        """Algorithm 3, or None when the question is not a counting one (or cannot be counted)."""
        q = question_with_options(question, options)
        got = self._ask(run, SAGE_IS_COUNTING, SAGE_IS_COUNTING.render(query=q), 8, fmt=COUNTING_FORMAT)
        if got is None:
            return None
        verdict = self._verdict(run, got, COUNTING_FORMAT)
        if verdict is None:
            run.failures.append(f"counting verdict unreadable ({got[0][:80]!r}): treated as not counting")
        if not verdict:
            run.trace.append({"step": "counting-check", "counting": False, "raw": got[0][:200]})
            return None
        got = self._ask(run, SAGE_COUNT_TARGETS, SAGE_COUNT_TARGETS.render(query=q), 48, fmt=TARGETS_FORMAT)
        variants = self._key_list(got, TARGETS_FORMAT)
        if not variants:
            run.failures.append("counting question but no target could be read: explored instead")
            return None
        count, where = graph.count_mentions(variants)
        step: CountingStep = {
            "step": "counting",
            "variants": variants,
            "count": count,
            "sentences": [graph.vertices[i].id for i in where],
            "used": False,
        }
        if options:
            numbers = [option_number(o) for o in options]
            if all(n is None for n in numbers):
                run.failures.append("counting question but no option holds a number: explored instead")
                run.trace.append(dict(step))
                return None
            known = {i: n for i, n in enumerate(numbers) if n is not None}
            best = min(known, key=lambda i: abs(known[i] - count))
            answer = f"{LETTERS[best]}. {options[best]}"
        else:
            answer = str(count)
        step["used"] = True
        run.trace.append(dict(step))
        why = (
            f"counting question: {variants[0]!r} ({len(variants)} variants) occurs {count} times "
            f"in {len(where)} sentences"
        )
        return self._finish(
            graph, dict.fromkeys(where), run, options, (answer, answer, LLMUsage()), None, why, "counting", t0
        )

    def _explore(
        self, run: _Run, graph: SentenceGraph, question: str, options: list[str], rng: np.random.Generator, t0: float
    ) -> Selection:
        """Algorithm 1 (ITE-QA) with Algorithm 2 feeding Prompt 2."""
        evidence: dict[int, float | None] = {}  # vertex -> best relevance seen (None: neighbour only)
        q = question_with_options(question, options)
        clean = None
        why = f"no YES verdict within iter_max={self.iter_max} rounds"
        for r in range(1, self.iter_max + 1):
            work = run.usage.tokens_processed
            got = self._ask(
                run, SAGE_KEYS, SAGE_KEYS.render(query=q, retrieved=graph.text(evidence)), 64, fmt=KEYS_FORMAT
            )
            if got is None:
                why = f"stopped in round {r}: the keys prompt exceeds the model's window"
                break
            keys, source = self._key_list(got, KEYS_FORMAT), "llm"
            hits, rel = graph.retrieve(keys, self.recall_index) if keys else ([], np.zeros(0))
            if not hits:
                run.failures.append(
                    f"round {r}: keys {keys[:5]!r} from {got[0][:60]!r} matched no sentence; used the question's words"
                )
                keys, source = [question, *options], "question (fallback)"
                hits, rel = graph.retrieve(keys, self.recall_index)
            neigh = graph.neighbours(hits[: self.n_seeds], self.neighbor_num)
            before = len(evidence)
            for i in hits:
                evidence[i] = max(float(rel[i]), evidence.get(i) or 0.0)
            for i in neigh:
                evidence.setdefault(i, None)
            step: RoundStep = {
                "step": "round",
                "round": r,
                "keys": keys,
                "keys_from": source,
                "retrieved": [graph.vertices[i].id for i in hits],
                "relevance": [int(rel[i]) for i in hits],
                "neighbours": [graph.vertices[i].id for i in neigh],
                "new_sentences": len(evidence) - before,
            }
            context = graph.text(evidence)
            verdict = clean = None
            if r < self.iter_max or self.final_verdict:
                # the answers behind the importance read what the final answer would: the evidence that fits
                read = self._fit_evidence(run, graph, evidence, question, options, context)
                verdict, clean = self._sufficient(run, step, question, options, context, read, rng)
            elif not options:
                # Algorithm 1 leaves the loop after its last round whatever the verdict says, so the
                # verdict and the importance behind it are not asked: only the clean answer, which is
                # the final one (a multiple-choice question is voted on in _finish instead)
                clean = self._infer(
                    run, question, options, self._fit_evidence(run, graph, evidence, question, options, context)
                )
            step["prompt_tokens"] = run.usage.tokens_processed - work
            run.trace.append(dict(step))
            if run.out_of_window:
                why = f"stopped in round {r}: the evidence exceeds the model's window"
                break
            if verdict:
                why = f"sufficient (YES) after round {r} of {self.iter_max}"
                break
        final = clean if (not options and clean is not None) else None
        return self._finish(graph, evidence, run, options, final, question, why, "explore", t0)

    def _sufficient(
        self,
        run: _Run,
        step: RoundStep,
        question: str,
        options: list[str],
        context: str,
        read: str,
        rng: np.random.Generator,
    ) -> tuple[bool | None, tuple[str, str, LLMUsage] | None]:
        """Algorithm 2's importance on ``read`` (the evidence that fits), then Prompt 2 on the whole
        ``context``: (the verdict, None when unreadable or not asked; the clean answer), recorded in ``step``."""
        imp, clean, lambdas = self.importance(run, question, options, read, rng)
        step["importance"], step["lambdas"] = None if imp is None else round(imp, 4), lambdas
        got = (
            None
            if run.out_of_window
            else self._ask(
                run,
                SAGE_SUFFICIENT,
                SAGE_SUFFICIENT.render(
                    query=question_with_options(question, options),
                    retrieved=context,
                    importance="not computed" if imp is None else f"{imp:.3f}",
                ),
                8,
                fmt=SUFFICIENT_FORMAT,
            )
        )
        verdict = None if got is None else self._verdict(run, got, SUFFICIENT_FORMAT)
        if got is not None and verdict is None:
            run.failures.append(
                f"round {step['round']}: sufficiency verdict unreadable ({got[0][:80]!r}): treated as NO"
            )
        step["sufficient"], step["verdict_raw"] = verdict, None if got is None else got[0][:200]
        return verdict, clean

    def _vote(self, run: _Run, question: str, options: list[str], context: str) -> tuple[str, str, LLMUsage] | None:
        """Majority of ``voter_num`` sampled Prompt-3 answers (one greedy answer when voter_num is 1)."""
        votes: list[int] = []
        raws: list[str] = []
        last: LLMUsage | None = None
        sampled = self.voter_num > 1  # the voters read one prompt: it is evaluated once (complete_n)
        for answer, raw, usage in (
            self._infer_n(
                run,
                question,
                options,
                context,
                self.voter_temperature if sampled else 0.0,
                self.seed + 1 if sampled else None,
                self.voter_num,
            )
            or []
        ):
            raws.append(raw)
            last = usage
            choice = parse_choice(answer, options)  # the answer: a constrained vote reads as "B. <reason>"
            if choice is not None:
                votes.append(choice)
        if last is None:
            return None
        run.trace.append({"step": "vote", "votes": [LETTERS[i] for i in votes], "voters": len(raws)})
        if not votes:
            run.failures.append(f"no voter named an option ({raws[0][:60]!r}...): answered the first option")
            best = 0
        else:
            counts = Counter(votes)
            top = max(counts.values())
            best = next(i for i in votes if counts[i] == top)
        return f"{LETTERS[best]}. {options[best]}", raws[0], last

    def _finish(
        self,
        graph: SentenceGraph,
        evidence: dict[int, float | None],
        run: _Run,
        options: list[str],
        final: tuple[str, str, LLMUsage] | None,
        question: str | None,
        why: str,
        route: str,
        t0: float,
    ) -> Selection:
        order = sorted(evidence)  # vertex indices are in document order
        context = graph.text(evidence)
        if final is None and question is not None:
            read = self._fit_evidence(run, graph, evidence, question, options, context)
            final = self._vote(run, question, options, read) if options else self._infer(run, question, options, read)
        if final is None:
            run.failures.append("no answer: the answer prompt exceeds the model's window")
            final = ("", "", LLMUsage())
        answer, raw, answer_usage = final
        return Selection(
            ids=[graph.vertices[i].id for i in order],
            scores=[evidence[i] for i in order],
            chunks=[graph.vertices[i] for i in order],
            method=self.name,
            config=self.config(),
            explanation=f"{why}: {len(order)} sentences"
            + (f"; {len(run.failures)} failure(s)" if run.failures else ""),
            n_candidates=len(graph),
            trace=run.trace,
            usage=run.usage,
            answer=RoutedAnswer(
                answer,
                raw,
                route,
                tokens_in=answer_usage.tokens_in,
                seconds=time.perf_counter() - t0,
                template=(MULTIPLE_CHOICE if options else self.answer_template).key,
            ),
            details=SageDetails(
                verdicts=run.verdicts,
                unreadable_verdicts=run.unreadable_verdicts,
                constrained_replies=run.constrained_replies,
            ),
            meta={
                "failures": run.failures,
                # per-example numbers the eval averages (None: no verdict was asked for)
                "metrics": {"unreadable_verdicts": (run.unreadable_verdicts / run.verdicts) if run.verdicts else None},
                **({"cut": run.cut} if run.cut else {}),
            },
        )

    def _fit_evidence(
        self,
        run: _Run,
        graph: SentenceGraph,
        evidence: dict[int, float | None],
        question: str,
        options: list[str],
        context: str,
    ) -> str:
        """The answer's context: all the evidence, or its most relevant sentences that fit the window."""
        if self._window is None or not evidence:
            return context
        if options:
            t, q = MULTIPLE_CHOICE, question_with_options(question, options)
            n = DEFAULT_MAX_ANSWER_TOKENS[MULTIPLE_CHOICE.name]
        else:
            t, n, q = self.answer_template, self.max_answer_tokens, question
        ranked = sorted(evidence, key=lambda i: (evidence[i] is None, -(evidence[i] or 0.0), i))
        index = {graph.vertices[i].id: i for i in ranked}
        sel = Selection(
            ids=[graph.vertices[i].id for i in ranked],
            scores=[evidence[i] for i in ranked],
            chunks=[graph.vertices[i] for i in ranked],
            method=self.name,
            config={},
            explanation="evidence",
            n_candidates=len(graph),
        )

        def text(s: Selection) -> str:
            return graph.text({index[c.id]: None for c in s.chunks})

        try:
            kept, cut = fit_to_window(sel, lambda s: t.render(question=q, context=text(s)), self._window, n)
        except LLMContextLengthError as e:
            run.failures.append(f"answer: the prompt exceeds the model's window even without evidence ({e})")
            return context
        if cut is None:
            run.cut = None
            return context
        if cut != run.cut:
            run.trace.append({"step": "cut", **{k: v for k, v in cut.items() if k != "dropped"}})
        run.cut = cut
        return text(kept)


__all__ = [
    "COUNTING_FORMAT",
    "KEYS_FORMAT",
    "SAGE",
    "SUFFICIENT_FORMAT",
    "TARGETS_FORMAT",
    "clean_keys",
    "option_number",
    "parse_keys",
    "parse_verdict",
    "vote_format",
]
