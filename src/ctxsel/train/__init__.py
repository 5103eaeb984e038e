"""Training, apart from inference: what ``ctxsel train ...`` and ``ctxsel mine`` run.

- :mod:`.ldar_trainer`: LDAR's REINFORCE trainer (``ctxsel train ldar``), its ``TrainConfig``;
- :mod:`.ldar_rewards`: the rewards it trains on (label recall, an LLM reader's answer score);
- :mod:`.picker_mining`: Context-Picker's offline evidence mining by leave-one-out (``ctxsel mine``);
- :mod:`.picker_rewrite`: five meaning-preserving rewrites per query for its training data;
- :mod:`.picker_reward`: its stage rewards (the paper's Eq. 8 rules);
- :mod:`.picker_trainer`: its two-stage GRPO with TRL and LoRA (``ctxsel train picker``).

``ctxsel.selectors`` never imports this package: selecting needs no optimizer, TRL or peft.
"""
