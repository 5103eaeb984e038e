"""Context-Picker (Zhu et al., arXiv 2512.14465): an LLM names a minimal sufficient set of chunk ids.

- :mod:`.prompt`: the observation ``<p_i, q, C>`` and the one strict reply format;
- :mod:`.picker`: :class:`ContextPicker`, the selector (``--method context-picker``);
- :mod:`.reward`: the stage rewards (the paper's Eq. 8 rules, constants documented);
- :mod:`.mining`: offline evidence mining by leave-one-out (Algorithm 1), ``ctxsel mine``;
- :mod:`.rewrite`: five meaning-preserving rewrites per query, split by original query;
- :mod:`.train`: two-stage GRPO with TRL's GRPOTrainer and LoRA (Algorithm 2), ``ctxsel train picker``;
- :mod:`.hf_client`: a transformers model (+ LoRA adapter) as an LLM client.

Only ``prompt``, ``picker``, ``reward``, ``mining`` and ``rewrite`` load without torch.
"""

from ctxsel.selectors.context_picker.picker import ContextPicker

__all__ = ["ContextPicker"]
