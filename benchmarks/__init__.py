"""Speed benchmarks and the experiments eval cannot run: `python -m benchmarks.NAME` from the repository root."""
