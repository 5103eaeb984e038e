"""Context-Picker (Zhu et al., arXiv 2512.14465): an LLM names a minimal sufficient set of chunk ids.

- :mod:`.prompt`: the observation ``<p_i, q, C>`` and the one strict reply format;
- :mod:`.picker`: :class:`ContextPicker`, the selector (``--method context-picker``);
- a trained picker runs through :mod:`ctxsel.llm.hf_client` (transformers + its LoRA adapter).

Its training (mining, rewrites, rewards, two-stage GRPO) lives in
:mod:`ctxsel.train.context_picker`.
"""

from ctxsel.selectors.context_picker.picker import ContextPicker

__all__ = ["ContextPicker"]
