"""Rollout engines behind one interface: ``engine.generate(rendered, G, sampling) -> Rollouts``.

``base.py``: what every engine takes and returns (``SamplingParams``, ``Rollouts``, the
``Engine`` protocol). ``engines.py``: the engine names and ``make_engine``, which imports
``hf.py`` (transformers ``generate``, CPU or GPU) or ``vllm.py`` (a colocated vLLM
engine, GPU only) lazily, so that the package works without vLLM. This file imports
nothing: import each name from the module where it lives.
"""
