"""Model-family adapters: everything family-specific lives here (docs/design.md, rule 1).

>>> from processors import adapter_for
>>> adapter = adapter_for("tiny:qwen2_5_vl")          # doctest: +SKIP
>>> model = adapter.load_model()                      # doctest: +SKIP
"""

from .base import (
    Adapter,
    AdapterOptions,
    FamilySettingsError,
    PromptBatch,
    RenderedPrompt,
    TrainingBatch,
    cut_at_stop,
    format_options,
)
from .family import FamilyFacts, register_adapter, tiny_builder
from .images import ImageInputError, ImageLimits, ProblemInputError
from .registry import ADAPTERS, UnknownFamilyError, adapter_for, register, resolve_model_path
from .tiny import TINY_MODELS, tiny_model_path

__all__ = [
    "ADAPTERS", "Adapter", "AdapterOptions", "FamilyFacts", "FamilySettingsError",
    "ImageInputError", "ImageLimits", "register_adapter", "tiny_builder",
    "ProblemInputError", "PromptBatch", "RenderedPrompt", "TINY_MODELS", "TrainingBatch",
    "UnknownFamilyError", "adapter_for", "cut_at_stop", "format_options", "register", "resolve_model_path",
    "tiny_model_path",
]
