"""Code benchmarks: run programs in a sandbox, check them against a benchmark's tests,
pass@k, the final code block of a completion, and behavioural equivalence for the vote.

Modules: ``sandbox`` (isolation), ``checks`` (HumanEval / MBPP / LiveCodeBench
protocols), ``passk``, ``blocks``, ``equivalence``.
"""
