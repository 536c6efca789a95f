"""Evaluation: benchmark loaders and scorers, the runner behind ``vlcohort eval``.

Importing the package registers the text benchmarks (:mod:`eval.text_benchmarks`) in
:data:`eval.benchmarks.BENCHMARKS`, so every caller sees one table.
"""

from . import text_benchmarks  # noqa: F401  (registers AMC, GPQA, HumanEval, ...)
