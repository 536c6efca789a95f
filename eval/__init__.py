"""Evaluation: benchmark loaders and scorers, the runner behind ``vlcohort eval``.

Importing the package registers the text benchmarks (:mod:`vlcohort.eval.text_datasets`) in
:data:`vlcohort.eval.datasets.BENCHMARKS`, so every caller sees one table.
"""

from . import text_datasets  # noqa: F401 - imported to register AMC, GPQA, HumanEval, ...
