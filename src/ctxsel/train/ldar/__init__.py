"""LDAR's training (REINFORCE), beside its selector in :mod:`ctxsel.selectors.ldar`.

    config.py      TrainConfig: the REINFORCE settings (the policy's own are selectors.ldar.config)
    rewards.py     label F-beta, LLM correctness, cost regularisation
    items.py       a training question and the Selection a sampled band makes of it
    trainer.py     Trainer: the REINFORCE loop, monitoring, checkpoints
    checkpoint.py  resumable training states (weights, Adam, RNG states)
    plots.py       the reward curve as PNG
    bundle.py      a trained policy made an artefact that ships (``--bundle DIR``: files, card, manifest.json)

Importing this package loads nothing heavy; ``trainer`` and ``checkpoint`` import torch.
"""
