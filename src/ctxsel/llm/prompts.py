"""The papers' prompts, versioned.

Each :class:`PromptTemplate` has a name and a version; the version goes into
every LLM cache key (``CachedClient(template_version=...)`` /
``template.key``), so editing a template's text means bumping its version,
and old cached replies then simply miss.

- ``FACTOID_QA``: Adaptive-k paper (Taguchi et al. 2025), App. A.1.1.
- ``HOLOBENCH_QA``: the same paper's HoloBench template, App. A.1.2.
- ``HOLOBENCH_JSON``: ours, the same task with a structured answer (a JSON
  number, list or list of key/value pairs by answer kind; ``ctxsel.llm.aggregation``).
- ``JUDGE``: its LLM-as-a-judge template, App. A.1.3 (Exact / Partial / No
  match per ground-truth item, scored 1 / 0.5 / 0). The paper leaves
  ``{in_context_examples}`` and ``{output_format}`` out; ours are below.
- ``SELF_ROUTE``: the Self-Route answerability prompt as the LDAR paper
  gives it (Table 5, adapted from LaRA).
- ``SAGE_KEYS``, ``SAGE_SUFFICIENT``, ``MULTIPLE_CHOICE``: SAGE's Prompts 1-3
  (keys from the query and what was retrieved; the YES/NO sufficiency
  verdict given the importance score; the multiple-choice answer with the
  option at the head). ``SAGE_IS_COUNTING`` and ``SAGE_COUNT_TARGETS`` are
  ours: the paper describes its counting step (Algorithm 3) but prints no
  prompt for it. None of SAGE's prompts stops at a newline: models often
  open with one (the bundled base model always does), and the keys come
  as a list, one per line; the replies are short by ``max_tokens``.

Every template ends where the answer starts, so it works completion-style
with a base model (stop at a newline) as well as in a chat message. The
factoid template ends in a space after ``**Answer:**``: without it the
bundled base model's first token is a newline, i.e. an empty answer. The
HoloBench template ends in the cue ``- **Reasoning:**``, meant to start a
completion; version 2 sends it as the reply's start (``cue``), because a
chat model that reads it at the end of the user's message may echo it and
stop (both versions are compared in docs/archive/results-log.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ctxsel.errors import InputError


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: int
    text: str
    #: Where a completion-style answer ends (the reader's default ``stop``).
    stop: tuple[str, ...] = ("\n",)
    #: The words the text ends with that start the reply, sent as ``reply_start``: a local chat model reads
    #: them as the start of its own turn (a base model continues them either way). Empty: the text's end
    #: stays in the user's message.
    cue: str = ""

    @property
    def key(self) -> str:
        """``name-vN``: what cache keys and result files record."""
        return f"{self.name}-v{self.version}"

    def render(self, **fields: str) -> str:
        return self.text.format(**fields)


FACTOID_QA = PromptTemplate(
    "factoid-qa",
    1,
    "Your task is to answer the question provided. To help you answer accurately, some relevant context "
    "documents have been retrieved. After reviewing them, you'll be asked the same question again. "
    "Please respond succinctly.\n\n"
    "**Input:**\n- **Question:**\n{question}\n\n- **Context:**\n{context}\n\n- **Question:**\n{question}\n\n"
    "**Response:**\n- **Answer:** ",
)

HOLOBENCH_QA = PromptTemplate(
    "holobench-qa",
    2,
    "You'll be given a set of sentences to read through carefully. Once you've reviewed them, I'll ask you a "
    "question related to the information in those sentences. Your job is to think critically about the details, "
    "analyze the sentences in relation to the question, and then provide your answer. If the information clearly "
    "supports a partial answer, provide that. However, if the evidence is unclear or insufficient, it is okay to "
    'respond with "No answer."\n\n'
    "**Input:**\n- **Sentences:**\n{context}\n\n- **Question:**\n{question}\n\n"
    "**Response:**\n- **Reasoning:**\n  - [Describe how you thought through the sentences and how they helped you "
    "reach your conclusion. If the evidence is unclear or insufficient to provide a reliable answer, explain why. "
    "Your reasoning should not exceed 10,000 words.]\n"
    "- **Answer:** [Provide an answer only if it is clearly supported by the information in the sentences. If the "
    'evidence is unclear or insufficient, respond with "No answer."]\n\n'
    "- **Reasoning:**",
    stop=(),
    cue="- **Reasoning:**",
)

#: The HoloBench task with a structured answer (``ctxsel.llm.aggregation``): no reasoning, one JSON object
#: whose shape (``{shape}``) depends on the answer kind; the reply is held to it by a grammar / JSON schema.
HOLOBENCH_JSON = PromptTemplate(
    "holobench-json",
    2,
    "You'll be given a set of sentences to read through carefully. Once you've reviewed them, I'll ask you a "
    "question related to the information in those sentences. Your job is to find every sentence that the question "
    "is about, count or compute over them exactly as the question asks, and give the result.\n\n"
    "**Input:**\n- **Sentences:**\n{context}\n\n- **Question:**\n{question}\n\n"
    "**Response:** {shape}. Write only the JSON.\n",
    stop=(),
)

SELF_ROUTE = PromptTemplate(
    "self-route",
    1,
    "Here are some chunks retrieved from some {datatype}. Read these chunks to answer a question. Be concise. "
    'If the question cannot be answered based on the information in the article, write "unanswerable".\n\n'
    "{context}\n\nQuestion: {question}\n"
    "Only give me the answer and do not output any other words. If the question cannot be answered based on "
    'the information in the article, write "unanswerable".\nAnswer:',
)

# SAGE (Prompts 1-3). The paper's text, with a last line where the answer starts.
SAGE_KEYS = PromptTemplate(
    "sage-keys",
    1,
    "QUERY: {query}\n\nRETRIEVED INFORMATION: {retrieved}\n\n"
    "PROMPT: Extract proper keywords from both the query and its options.\n"
    "KEYWORDS (comma-separated):",
    stop=(),  # no newline stop: small models answer with a list, one key per line
)

SAGE_SUFFICIENT = PromptTemplate(
    "sage-sufficient",
    1,
    "QUERY: {query}\n\nRETRIEVED INFORMATION: {retrieved}\n\nIMPORTANCE SCORE: {importance}\n\n"
    "PROMPT: Given the retrieved information and the question with a calculated instructional importance of the "
    "information to answering the question from 0 to 1, decide whether the information is enough to answer the "
    "question. If it is, say YES, if it is not, say NO.\nANSWER (YES or NO):",
    stop=(),
)

MULTIPLE_CHOICE = PromptTemplate(
    "multiple-choice",
    1,
    "QUERY_WITH_OPTIONS: {question}\n\nRETRIEVED INFORMATION: {context}\n\n"
    "PROMPT: Based on the retrieved data, make your own choose from the given options and explain why. If you are "
    "unsure of the correct answer, please make your best guess and still choose one of the options. YOU MUST "
    "OUTPUT the option you choose at the HEAD of your response.\nRESPONSE:",
    stop=(),  # the reply may open with a newline; the option is parsed from its head
)

SAGE_IS_COUNTING = PromptTemplate(
    "sage-is-counting",
    1,
    "QUERY: {query}\n\nPROMPT: Does this question ask how many times something occurs, or how many of something "
    "there are, in the text? If it does, say YES, if it does not, say NO.\nANSWER (YES or NO):",
    stop=(),
)

SAGE_COUNT_TARGETS = PromptTemplate(
    "sage-count-targets",
    1,
    "QUERY: {query}\n\nPROMPT: The question asks for a count. Name what has to be counted and every variant it "
    "may appear as in the text (plurals, tenses, nicknames, full and short names), as a comma-separated list.\n"
    "TARGETS:",
    stop=(),
)

_JUDGE_EXAMPLES = """Question: Which airports are in the Pacific time zone?
Assistant's Response: Answer: Seattle Tacoma Intl and Portland Intl.
Ground Truth: [{"id": 0, "item": "Seattle Tacoma Intl"}, {"id": 1, "item": "Portland Intl"}, {"id": 2, "item": "Oakland Intl"}]
Output: [{"id": 0, "label": "Exact Match"}, {"id": 1, "label": "Exact Match"}, {"id": 2, "label": "No Match"}]

Question: What is the average price of the diamonds with an Ideal cut?
Assistant's Response: Answer: about 3,460 dollars
Ground Truth: [{"id": 0, "item": "3457.54"}]
Output: [{"id": 0, "label": "Partial Match"}]"""  # noqa: E501 - the judge prompt, verbatim (a change would change every cached judgement)

_JUDGE_FORMAT = (
    'A JSON list, nothing else: [{"id": <ground-truth id>, "label": "Exact Match" | "Partial Match" | "No Match"}, ...]'
)

JUDGE = PromptTemplate(
    "judge",
    1,
    "You will be given a question along with a response generated by an assistant and the corresponding ground "
    "truth data. Your task is to assess the response based on its accuracy and completeness in comparison to the "
    "ground truth. For each entry in the ground truth, determine whether the information provided by the assistant "
    'is an "Exact Match," a "Partial Match," or a "No Match."\n\n'
    "Evaluation Criteria:\n\n"
    "- **Exact Match**: The assistant's response precisely matches the ground truth in both content and detail.\n"
    "- **Partial Match**: The assistant's response includes some correct information but is either incomplete, "
    "incorrectly ordered, or contains inaccuracies.\n"
    "- **No Match**: The assistant's response does not accurately reflect the ground truth or is missing entirely.\n\n"
    "Special Cases:\n\nGround Truth is None:\n\n"
    "- If the ground truth is `None` (represented as an empty list `[]`):\n"
    " - **Exact Match**: If the assistant's response indicates that there is no information or content.\n"
    " - **No Match**: If the assistant's response provides any information when the ground truth is `None`.\n\n"
    "Output Format:\n\n"
    "- The output should be a list of objects where each object contains:\n"
    " - An `id` that matches the `id` of the corresponding ground truth entry.\n"
    ' - A `label` indicating whether the assistant\'s response is an "Exact Match", "Partial Match", or "No Match".\n'
    "- The number of output objects should match the number of entries in the ground truth.\n\n"
    "Examples:\n\n{in_context_examples}\n\n===== Your task starts here =====\n\n"
    "Question:\n\n{question}\n\nAssistant's Response:\n\n{pred}\n\nGround Truth:\n\n{gold}\n\n"
    "Output Format:\n\n{output_format}\n\nOutput:",
    stop=(),
)


def render_judge(question: str, prediction: str, gold: Sequence[str]) -> str:
    """The judge prompt with the ground truth as ``[{"id", "item"}]``; an
    empty list stands for "no answer" (the paper's ``None``)."""
    items = [{"id": i, "item": g} for i, g in enumerate(gold)]
    return JUDGE.render(
        in_context_examples=_JUDGE_EXAMPLES,
        question=question,
        pred=prediction,
        gold=json.dumps(items, ensure_ascii=False),
        output_format=_JUDGE_FORMAT,
    )


TEMPLATES = {
    t.name: t
    for t in (
        FACTOID_QA,
        HOLOBENCH_QA,
        HOLOBENCH_JSON,
        SELF_ROUTE,
        JUDGE,
        MULTIPLE_CHOICE,
        SAGE_KEYS,
        SAGE_SUFFICIENT,
        SAGE_IS_COUNTING,
        SAGE_COUNT_TARGETS,
    )
}


def get_template(name: str) -> PromptTemplate:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise InputError(f"unknown prompt template {name!r}; available: {', '.join(sorted(TEMPLATES))}") from None
