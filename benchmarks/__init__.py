"""Speed benchmarks: `python -m benchmarks.NAME` from the repository root (quality experiments: `experiments`)."""
