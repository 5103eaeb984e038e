"""Evaluation: run methods over a dataset, score them, report."""

from ctxsel.eval.runner import DEFAULT_METHODS, evaluate

__all__ = ["DEFAULT_METHODS", "evaluate"]
