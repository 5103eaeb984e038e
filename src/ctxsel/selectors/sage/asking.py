"""How SAGE asks its LLM: its prompts, the answers it reads from the evidence, the votes.

One client per prompt template (its key in the response cache's keys); a reply format sent only
when SAGE is constrained (with room for the JSON's own tokens); every call counted in the
select() call's :class:`~.replies.Run`. A prompt past the model's window is not an error: the
call returns None and the run records it, and the exploration ends there.

The answers read within the model's window when it is known
(:func:`ctxsel.reader.context_window`, as the reader does): evidence that does not fit is cut to
its most relevant sentences (retrieved ones by word overlap, then neighbours), read in document
order, and the run records the cut (``meta["cut"]``, a ``cut`` trace step).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ctxsel.datasets.multiple_choice import LETTERS, parse_choice, question_with_options
from ctxsel.errors import LLMContextLengthError
from ctxsel.llm.base import LLMClient
from ctxsel.llm.constrain import ReplyFormat
from ctxsel.llm.prompts import MULTIPLE_CHOICE, PromptTemplate
from ctxsel.reader import DEFAULT_MAX_ANSWER_TOKENS, clean_answer, context_window, fit_to_window, for_template
from ctxsel.selectors.llm_calls import Reply
from ctxsel.selectors.sage.graph import SentenceGraph
from ctxsel.selectors.sage.replies import CONSTRAINED_MAX_TOKENS, Answer, Run, read_reply, vote_format
from ctxsel.types import LLMUsage, Selection


class Asker:
    """SAGE's LLM with SAGE's settings for it: whether replies are constrained, and the template
    and answer length of a free-form answer (a multiple-choice one is read with Prompt 3)."""

    def __init__(
        self, llm: LLMClient, *, constrained: bool, answer_template: PromptTemplate, max_answer_tokens: int
    ) -> None:
        self.llm = llm
        self.constrained = constrained
        self.answer_template = answer_template
        self.max_answer_tokens = max_answer_tokens
        self.window = context_window(llm)
        self._clients: dict[str, LLMClient] = {}

    def ask(
        self, run: Run, template: PromptTemplate, prompt: str, max_tokens: int, fmt: ReplyFormat | None = None
    ) -> Reply | None:
        """One greedy call, counted; None (and a recorded failure) when the prompt exceeds the window."""
        got = self.ask_n(run, template, prompt, max_tokens, 1, fmt=fmt)
        return None if got is None else got[0]

    def ask_n(
        self,
        run: Run,
        template: PromptTemplate,
        prompt: str,
        max_tokens: int,
        n: int,
        temperature: float = 0.0,
        seed: int | None = None,
        fmt: ReplyFormat | None = None,
    ) -> list[Reply] | None:
        """``n`` replies to one prompt, the prompt paid for once; ``fmt`` is sent only when constrained."""
        if template.key not in self._clients:
            self._clients[template.key] = for_template(self.llm, template)
        if fmt is not None and self.constrained:
            max_tokens = max(max_tokens, CONSTRAINED_MAX_TOKENS.get(template.name, max_tokens))
        else:
            fmt = None
        try:
            return run.ask(
                self._clients[template.key],
                prompt,
                n,
                max_tokens=max_tokens,
                temperature=temperature,
                stop=list(template.stop) or None,
                seed=seed,
                fmt=fmt,
                reply_start=template.cue,
            )
        except LLMContextLengthError as e:
            run.failures.append(f"{template.name}: prompt exceeds the model's window ({e})")
            run.out_of_window = True
            return None

    def ask_words(
        self, run: Run, template: PromptTemplate, prompt: str, max_tokens: int, fmt: ReplyFormat
    ) -> tuple[Reply, dict[str, float] | None] | None:
        """The probability of each of ``fmt``'s words as the reply (:meth:`Calls.ask_words`), counted;
        None when the client cannot give them or the prompt exceeds the window (recorded)."""
        if template.key not in self._clients:
            self._clients[template.key] = for_template(self.llm, template)
        words = tuple(fmt.words or ())
        constrained = fmt if self.constrained else None
        if constrained is not None:
            max_tokens = max(max_tokens, CONSTRAINED_MAX_TOKENS.get(template.name, max_tokens))
        try:
            return run.ask_words(
                self._clients[template.key],
                prompt,
                words,
                max_tokens=max_tokens,
                stop=list(template.stop) or None,
                fmt=constrained,
                reply_start=template.cue,
            )
        except LLMContextLengthError as e:
            run.failures.append(f"{template.name}: prompt exceeds the model's window ({e})")
            run.out_of_window = True
            return None

    def answer(self, run: Run, question: str, options: Sequence[str], context: str) -> Answer | None:
        """The greedy answer from ``context``: Prompt 3 with options, else the answer template."""
        got = self.answers(run, question, options, context)
        return None if got is None else got[0]

    def answers(
        self,
        run: Run,
        question: str,
        options: Sequence[str],
        context: str,
        temperature: float = 0.0,
        seed: int | None = None,
        n: int = 1,
    ) -> list[Answer] | None:
        """``n`` answers from ``context``: Prompt 3 with options, else the answer template."""
        fmt = None
        if options:
            t, max_tokens = MULTIPLE_CHOICE, DEFAULT_MAX_ANSWER_TOKENS[MULTIPLE_CHOICE.name]
            prompt = t.render(question=question_with_options(question, options), context=context)
            fmt = vote_format(len(options)) if len(options) <= len(LETTERS) else None
        else:
            t, max_tokens = self.answer_template, self.max_answer_tokens
            prompt = t.render(question=question, context=context)
        replies = self.ask_n(run, t, prompt, max_tokens, n, temperature, seed, fmt)
        if replies is None:
            return None
        out = []
        for got in replies:
            text = got.text
            # a constrained vote {"option": "B", "reason": ...} reads as "B. ..." (raw stays the JSON)
            if fmt is not None and got.constrained:
                text = read_reply(got, fmt, str) or text
            out.append(Answer(clean_answer(text, t), got.text, got.usage))
        return out

    def vote(
        self, run: Run, question: str, options: list[str], context: str, *, n: int, temperature: float, seed: int
    ) -> Answer | None:
        """Majority of ``n`` sampled Prompt-3 answers (one greedy answer when ``n`` is 1), seeds
        ``seed+1..``; a tie goes to the option voted first, and no option named to the first option."""
        votes: list[int] = []
        raws: list[str] = []
        last: LLMUsage | None = None
        sampled = n > 1  # the voters read one prompt: it is evaluated once (complete_n)
        for answer, raw, usage in (
            self.answers(
                run, question, options, context, temperature if sampled else 0.0, seed + 1 if sampled else None, n
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
        return Answer(f"{LETTERS[best]}. {options[best]}", raws[0], last)

    def fit_evidence(
        self,
        run: Run,
        graph: SentenceGraph,
        evidence: dict[int, float | None],
        question: str,
        options: list[str],
        context: str,
    ) -> str:
        """The answer's context: all the evidence, or its most relevant sentences that fit the window."""
        if self.window is None or not evidence:
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
            method="sage",
            config={},
            explanation="evidence",
            n_candidates=len(graph),
        )

        def text(s: Selection) -> str:
            return graph.text({index[c.id]: None for c in s.chunks})

        try:
            kept, cut = fit_to_window(sel, lambda s: t.render(question=q, context=text(s)), self.window, n)
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


__all__ = ["Asker"]
