"""SAGE: sufficiency-aware exploration of a document's sentences by an LLM (paper 004).

No index: the document's sentences are the vertices of an implicit graph (:mod:`.graph`). For a
question SAGE

1. asks whether it is a *counting* question and, if so, answers with an exact count
   (Algorithm 3, :mod:`.counting`);
2. otherwise, for at most ``iter_max`` rounds: the LLM proposes keys from the question (and
   options) and what was gathered so far (Prompt 1); the ``recall_index`` sentences sharing the
   most non-stopword words with the keys join the evidence, and so do ``neighbor_num``
   preceding/following sentences of the ``n_seeds`` most relevant ones; the evidence's importance
   (Algorithm 2, :mod:`.importance`) is shown to the LLM, which says YES (enough) or NO (Prompt 2);
   YES stops the loop;
3. answers from the evidence (:mod:`.asking`): a majority of ``voter_num`` sampled answers for a
   multiple-choice question (Prompt 3), one greedy answer otherwise.

The Selection holds the gathered sentences in document order (ids ``<chunk id>#s<j>``,
``meta["parent"]`` the chunk), its trace one entry per round (:mod:`.trace`), its ``answer`` the
answer (a Reader returns it without another call), its ``usage`` every LLM call, and its details
a :class:`SageDetails`. Reply formats, and what an unreadable reply falls back to: :mod:`.replies`.

Where the paper is silent (each choice is a parameter):

- free-form questions are answered with the factoid template every other method is read with
  (Prompt 3 is written for options), so SubEM compares like with like;
- the ``neighbor_num`` neighbours are shared evenly by the seeds, nearest first (-1, +1, -2, +2
  for 4 each), within the seed's document;
- the last round asks no verdict (``final_verdict=False``): Algorithm 1 leaves its loop after
  round ``iter_max`` whatever the verdict, so that verdict and the perturbed answers behind its
  importance cannot change the answer; skipping them keeps every other call, and so the answer,
  as it was. ``final_verdict=True`` asks them as the loop is written, for its trace;
- retrieval runs over every sentence each round (E := E u Retrieve), and only sentences with
  relevance > 0 are retrieved; keys matching no sentence fall back to the question's and
  options' own words;
- a keys or sufficiency prompt past the model's window ends the exploration, and the evidence
  so far is answered from.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ctxsel.datasets.multiple_choice import question_with_options
from ctxsel.errors import InputError, MissingLLMError
from ctxsel.inputs import MAX_SEED
from ctxsel.llm.base import LLMClient
from ctxsel.llm.prompts import (
    FACTOID_QA,
    MULTIPLE_CHOICE,
    SAGE_COUNT_TARGETS,
    SAGE_IS_COUNTING,
    SAGE_KEYS,
    SAGE_SUFFICIENT,
    get_template,
)
from ctxsel.numbers import short_number
from ctxsel.options import CommonOptions, option
from ctxsel.query import Query
from ctxsel.selectors.base import Selector
from ctxsel.selectors.sage.asking import Asker
from ctxsel.selectors.sage.counting import count
from ctxsel.selectors.sage.graph import SentenceGraph
from ctxsel.selectors.sage.importance import importance
from ctxsel.selectors.sage.replies import (
    KEYS_FORMAT,
    SUFFICIENT_FORMAT,
    Answer,
    Run,
    key_list,
)
from ctxsel.selectors.sage.trace import RoundStep
from ctxsel.types import ChunkLike, LLMUsage, MethodDetails, RoutedAnswer, Selection


@dataclass(frozen=True, slots=True)
class SageDetails(MethodDetails):
    """SAGE's sufficiency verdicts: how many it asked for, how many it could not read, and how
    many replies came under a grammar or schema."""

    verdicts: int
    unreadable_verdicts: int
    constrained_replies: int


class SAGE(Selector):
    needs_scores = False
    needs_llm = True

    @dataclass(frozen=True)
    class Options(CommonOptions):
        iter_max: int = option(2, minimum=1, doc="exploration rounds at most (the paper's iter_max)")
        recall_index: int = option(25, minimum=1, doc="sentences each keyword retrieves")
        neighbor_num: int = option(20, minimum=0, doc="neighbours added around each kept sentence")
        n_seeds: int = option(5, minimum=1, doc="seed sentences of the first round")
        voter_num: int = option(10, minimum=1, doc="votes of the importance step")
        n_perturb: int = option(3, minimum=0, doc="perturbed copies per vote (Algorithm 2)")
        lambda_low: float = option(0.3, minimum=0, maximum=1, doc="importance below this drops a sentence")
        voter_temperature: float = option(0.8, minimum=0, doc="the voters' sampling temperature")
        counting: bool = option(True, doc="counting questions take Algorithm 3")
        seed: int = option(0, minimum=0, maximum=MAX_SEED, doc="seeds the perturbations")
        max_keys: int = option(32, minimum=1, doc="keywords read from one reply at most")
        answer_template: str = option(FACTOID_QA.name, doc="the answer prompt's template")
        max_answer_tokens: int = option(32, minimum=1, doc="the answer's token limit")
        backend: str = option("auto", doc="how the sentence embedder runs (as the dense scorer's backend)")
        constrained: bool = option(True, doc="replies' formats by construction")
        final_verdict: bool = option(False, doc="ask the sufficiency question after the last round too")
        sufficient_at: float | None = option(
            None,
            minimum=0,
            maximum=1,
            doc="stop when the LLM's probability of YES reaches this (none: the paper's YES/NO reply)",
        )

    resources = ("llm", "embed")

    def __init__(
        self,
        llm: LLMClient | None = None,
        *args: Any,
        embed: Callable[[list[str]], np.ndarray] | None = None,
        **given: Any,
    ) -> None:
        super().__init__(*args, **given)
        if llm is None:
            raise MissingLLMError("sage")
        backend = self.options.as_config()["backend"]
        if embed is not None and "backend" in given:
            raise InputError("backend chooses how SAGE embeds sentences; an embed function given replaces it")
        self.asker = Asker(
            llm,
            constrained=self.constrained,
            answer_template=get_template(self.answer_template),
            max_answer_tokens=self.max_answer_tokens,
        )
        if backend != "auto":  # checked now (a name, onnxruntime), loaded at the first embedding
            from ctxsel.scoring.dense import resolve_backend

            backend = resolve_backend(backend)
        self._embed = embed
        self.backend = backend if embed is None else "given"  # an embed callable replaces the dense scorer

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
            "answer_template": self.asker.answer_template.key,
            "max_answer_tokens": self.asker.max_answer_tokens,
            "constrained": self.asker.constrained,
            "final_verdict": self.final_verdict,
            **({} if self.sufficient_at is None else {"sufficient_at": self.sufficient_at}),
            **({} if self.backend in ("auto", "given") else {"backend": self.backend}),
            "templates": [
                t.key for t in (SAGE_KEYS, SAGE_SUFFICIENT, MULTIPLE_CHOICE, SAGE_IS_COUNTING, SAGE_COUNT_TARGETS)
            ],
            "llm": getattr(self.asker.llm, "model_id", ""),
            **self.common_config(),
        }

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length embeddings of ``texts`` (the dense scorer's model, loaded at the first call)."""
        if self._embed is None:
            from ctxsel.scoring.dense import DenseScorer

            self._embed = DenseScorer(cache=False, backend=self.backend).embed
        v = np.asarray(self._embed(texts), dtype=np.float64)
        return cast(np.ndarray, v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))

    # -- the method --------------------------------------------------------------

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        del scores  # embedding-free: SAGE never reads similarity scores
        t0 = time.perf_counter()
        question = query.question
        options = list(query.choices)  # a multiple-choice question's answer options
        graph = SentenceGraph(query.chunks)
        run = Run()
        rng = self._rng(question)
        if len(graph) == 0:
            got = self.asker.answer(run, question, options, "")
            return self._finish(
                graph, {}, run, options, got, None, "empty context: answered without evidence", "empty", t0
            )
        if self.counting:
            counted = count(
                lambda t, prompt, max_tokens, fmt: self.asker.ask(run, t, prompt, max_tokens, fmt),
                run,
                graph,
                question,
                options,
                self.max_keys,
            )
            if counted is not None:
                answer = Answer(counted.answer, counted.answer, LLMUsage())
                return self._finish(
                    graph, dict.fromkeys(counted.sentences), run, options, answer, None, counted.why, "counting", t0
                )
        return self._explore(run, graph, question, options, rng, t0)

    def _explore(
        self, run: Run, graph: SentenceGraph, question: str, options: list[str], rng: np.random.Generator, t0: float
    ) -> Selection:
        """Algorithm 1 (ITE-QA) with Algorithm 2 feeding Prompt 2."""
        evidence: dict[int, float | None] = {}  # vertex -> best relevance seen (None: neighbour only)
        q = question_with_options(question, options)
        clean = None
        why = f"no YES verdict within iter_max={self.iter_max} rounds"
        for r in range(1, self.iter_max + 1):
            work = run.usage.tokens_processed
            got = self.asker.ask(
                run, SAGE_KEYS, SAGE_KEYS.render(query=q, retrieved=graph.text(evidence)), 64, fmt=KEYS_FORMAT
            )
            if got is None:
                why = f"stopped in round {r}: the keys prompt exceeds the model's window"
                break
            keys, source = key_list(got, KEYS_FORMAT, self.max_keys), "llm"
            hits, rel = graph.retrieve(keys, self.recall_index) if keys else ([], np.zeros(0))
            if not hits:
                run.failures.append(
                    f"round {r}: keys {keys[:5]!r} from {got.text[:60]!r} matched no sentence; "
                    "used the question's words"
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
                read = self.asker.fit_evidence(run, graph, evidence, question, options, context)
                verdict, clean = self._sufficient(run, step, question, options, context, read, rng)
            elif not options:
                # Algorithm 1 leaves the loop after its last round whatever the verdict says, so the
                # verdict and the importance behind it are not asked: only the clean answer, which is
                # the final one (a multiple-choice question is voted on in _finish instead)
                clean = self.asker.answer(
                    run, question, options, self.asker.fit_evidence(run, graph, evidence, question, options, context)
                )
            step["prompt_tokens"] = run.usage.tokens_processed - work
            run.trace.append(dict(step))
            if run.out_of_window:
                why = f"stopped in round {r}: the evidence exceeds the model's window"
                break
            if verdict:
                p_yes = step.get("p_sufficient")
                said = "YES" if p_yes is None else f"P(YES) {p_yes:.3f} >= {self.sufficient_at}"
                why = f"sufficient ({said}) after round {r} of {self.iter_max}"
                break
        final = clean if (not options and clean is not None) else None
        return self._finish(graph, evidence, run, options, final, question, why, "explore", t0)

    def _rng(self, question: str) -> np.random.Generator:
        """The perturbations' generator: one stream per (seed, question), so a question's run repeats."""
        return np.random.default_rng([self.seed, zlib.crc32(question.encode("utf-8"))])

    def judge(
        self, question: str, chunks: Sequence[ChunkLike], sentence_ids: Sequence[str], options: Sequence[str] = ()
    ) -> dict[str, Any]:
        """SAGE's sufficiency check alone, on given sentences of ``chunks`` (ids ``<chunk id>#s<j>``, as
        a Selection of SAGE names them): Algorithm 2's importance, then Prompt 2, as a round asks
        them. Returns the round's verdict fields (``sufficient``, ``p_sufficient`` with
        ``sufficient_at``, ``importance``, ``verdict_raw``) and ``prompt_tokens``: what a threshold
        on P(YES) is calibrated from without running the exploration."""
        query = Query(question, chunks, choices=options)
        question = query.question
        graph = SentenceGraph(query.chunks)
        where = {v.id: i for i, v in enumerate(graph.vertices)}
        unknown = [s for s in sentence_ids if s not in where]
        if unknown:
            raise InputError(f"no sentence {unknown[0]!r} in these chunks (ids are '<chunk id>#s<j>')")
        evidence: dict[int, float | None] = {where[s]: None for s in sentence_ids}
        run, opts = Run(), list(options)
        rng = self._rng(question)
        step: RoundStep = {
            "step": "round",
            "round": 1,
            "keys": [],
            "keys_from": "given",
            "retrieved": list(sentence_ids),
            "relevance": [],
            "neighbours": [],
            "new_sentences": len(evidence),
        }
        context = graph.text(evidence)
        read = self.asker.fit_evidence(run, graph, evidence, question, opts, context)
        self._sufficient(run, step, question, opts, context, read, rng)
        return {**step, "prompt_tokens": run.usage.tokens_processed, "failures": run.failures}

    def _sufficient(
        self,
        run: Run,
        step: RoundStep,
        question: str,
        options: list[str],
        context: str,
        read: str,
        rng: np.random.Generator,
    ) -> tuple[bool | None, Answer | None]:
        """Algorithm 2's importance on ``read`` (the evidence that fits), then Prompt 2 on the whole
        ``context``: (the verdict, None when unreadable or not asked; the clean answer), recorded in ``step``."""
        imp, clean, lambdas = importance(
            lambda context: self.asker.answer(run, question, options, context),
            self.embed,
            read,
            rng,
            n_perturb=self.n_perturb,
            lambda_low=self.lambda_low,
        )
        step["importance"], step["lambdas"] = None if imp is None else round(imp, 4), lambdas
        prompt = SAGE_SUFFICIENT.render(
            query=question_with_options(question, options),
            retrieved=context,
            importance="not computed" if imp is None else short_number(imp),
        )
        got, p_yes = None, None
        if not run.out_of_window and self.sufficient_at is not None:
            asked = self.asker.ask_words(run, SAGE_SUFFICIENT, prompt, 8, SUFFICIENT_FORMAT)
            if asked is not None:
                got, probs = asked
                p_yes = None if probs is None else probs["YES"]
            step["p_sufficient"] = None if p_yes is None else round(p_yes, 4)
        if got is None and not run.out_of_window:
            got = self.asker.ask(run, SAGE_SUFFICIENT, prompt, 8, fmt=SUFFICIENT_FORMAT)
        if p_yes is not None:
            assert self.sufficient_at is not None
            verdict: bool | None = p_yes >= self.sufficient_at
            run.verdicts += 1
        else:  # the paper's rule, or no probability to be had: the reply's YES or NO
            verdict = None if got is None else run.verdict(got, SUFFICIENT_FORMAT)
        if got is not None and verdict is None:
            run.failures.append(
                f"round {step['round']}: sufficiency verdict unreadable ({got.text[:80]!r}): treated as NO"
            )
        step["sufficient"], step["verdict_raw"] = verdict, None if got is None else got.text[:200]
        return verdict, clean

    def _finish(
        self,
        graph: SentenceGraph,
        evidence: dict[int, float | None],
        run: Run,
        options: list[str],
        final: Answer | None,
        question: str | None,
        why: str,
        route: str,
        t0: float,
    ) -> Selection:
        order = sorted(evidence)  # vertex indices are in document order
        context = graph.text(evidence)
        if final is None and question is not None:
            read = self.asker.fit_evidence(run, graph, evidence, question, options, context)
            final = (
                self.asker.vote(
                    run, question, options, read, n=self.voter_num, temperature=self.voter_temperature, seed=self.seed
                )
                if options
                else self.asker.answer(run, question, options, read)
            )
        if final is None:
            run.failures.append("no answer: the answer prompt exceeds the model's window")
            final = Answer("", "", LLMUsage())
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
                template=(MULTIPLE_CHOICE if options else self.asker.answer_template).key,
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


__all__ = ["SAGE", "SageDetails"]
