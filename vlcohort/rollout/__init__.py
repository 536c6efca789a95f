"""Rollout engines behind one interface: ``engine.generate(rendered, G, sampling) -> Rollouts``.

``hf`` (transformers ``generate``, CPU or GPU) and ``vllm`` (a colocated vLLM engine, GPU
only, imported lazily by ``make_engine`` so that the package works without vLLM).
"""

from vlcohort.rollout.base import Rollouts, SamplingParams, make_engine
from vlcohort.rollout.hf import HFEngine

__all__ = ["HFEngine", "Rollouts", "SamplingParams", "make_engine"]
