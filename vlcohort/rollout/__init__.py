"""Rollout engines behind one interface: ``engine.generate(rendered, G, sampling) -> Rollouts``.

``hf`` (transformers ``generate``, CPU or GPU) is built here; a ``vllm`` engine implements
the same interface (GPU only).
"""

from .base import Rollouts, SamplingParams, make_engine
from .hf import HFEngine

__all__ = ["HFEngine", "Rollouts", "SamplingParams", "make_engine"]
