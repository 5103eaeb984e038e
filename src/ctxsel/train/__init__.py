"""Training, apart from inference: what ``ctxsel train ...`` and ``ctxsel mine`` run.

One package per trained method, mirroring :mod:`ctxsel.selectors`:

- :mod:`.ldar`: LDAR's REINFORCE trainer and rewards (``ctxsel train ldar``);
- :mod:`.context_picker`: Context-Picker's evidence mining (``ctxsel mine``), query rewrites,
  stage rewards and two-stage GRPO with TRL and LoRA (``ctxsel train context-picker``).

``ctxsel.selectors`` never imports this package: selecting needs no optimizer, TRL or peft.
"""
