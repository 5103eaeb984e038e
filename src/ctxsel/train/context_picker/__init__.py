"""Context-Picker's training, beside its selector in :mod:`ctxsel.selectors.context_picker`.

    mining.py         offline evidence mining by leave-one-out (Algorithm 1, ``ctxsel mine``)
    rewrite.py        meaning-preserving rewrites of each question (data augmentation)
    reward.py         the stage rewards (the paper's Eq. 8 rules)
    config.py         PickerTrainConfig: the two-stage GRPO settings (torch-free)
    rows.py           training rows: candidate pools, prompts, the train/validation split
    trl_reward.py     the stage reward in TRL's reward-function shape
    replies.py        greedy replies and the validation reward
    warmup.py         the optional supervised format warm-up
    stages.py         one GRPO stage with TRL's GRPOTrainer
    shared_prompt.py  GRPO that reads each prompt once for its group of samples
    tiny_model.py     the random 2-layer model of ``--base tiny``
    plots.py          the stages' reward curves as PNG
    trainer.py        Algorithm 2: the two stages, adapters saved (``ctxsel train context-picker``)
    bundle.py         a trained stage made the adapter that ships (``--bundle DIR``: float16, card, manifest.json)

Importing this package loads nothing heavy.
"""
