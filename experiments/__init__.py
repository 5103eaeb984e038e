"""Quality experiments: thin analyses beside the ``*.toml`` eval and training configs, run as ``python -m experiments.NAME``."""
