"""Which adapter serves a checkpoint: a registry keyed by ``config.model_type``.

``adapter_for("tiny:gemma3")``, ``adapter_for("/path/to/checkpoint")`` and
``adapter_for("Qwen/Qwen2.5-VL-3B-Instruct")`` (hub id, when the hub is reachable) all
read the checkpoint's ``config.json`` and pick the adapter registered for its
``model_type``. To add a family: write ``processors/<family>.py`` with an
:class:`~vlcohort.processors.base.Adapter` subclass decorated with
:func:`~vlcohort.processors.family.register_adapter` (and its tiny builder, ``@tiny_builder``):
:func:`discover_families` imports the module, so nothing here changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .base import Adapter, AdapterOptions
from .family import ADAPTERS, CAUSAL_LM_FALLBACK  # re-exported public names
from .family import register_adapter as register  # noqa: F401 - re-exported public name
from .gguf import GGUFError, gguf_checkpoint, is_gguf_spec, looks_like_gguf_file
from .tiny import is_tiny_spec, tiny_model_path


class UnknownFamilyError(ValueError):
    """The checkpoint's ``model_type`` has no registered adapter."""


#: Modules of the package that are infrastructure, not families.
_CORE_MODULES = {"base", "family", "gguf", "images", "prompt_formats", "published", "registry",
                 "tiny"}


def discover_families() -> list[str]:
    """Import every family module of ``processors/`` (each registers its adapters and tiny
    builders by decorator), so adding a family is adding its module. Returns their names."""
    import importlib
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
             if m.name not in _CORE_MODULES and not m.name.startswith("_")]
    for name in names:
        importlib.import_module(f"{__package__}.{name}")
    return names


discover_families()


def resolve_model_path(spec: str | os.PathLike) -> str:
    """``tiny:<name>`` -> its built folder; ``gguf:<file or name>`` -> its converted folder
    (``processors/gguf.py``); a local folder -> itself; else a hub id."""
    if is_tiny_spec(spec):
        return str(tiny_model_path(str(spec)))
    if is_gguf_spec(spec):
        return str(gguf_checkpoint(str(spec)))
    return str(spec)


def causal_lm_model_types() -> frozenset[str]:
    """Every ``model_type`` transformers' ``AutoModelForCausalLM`` maps to a model class."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return frozenset(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def adapter_class_for_type(model_type: str) -> type | None:
    """The adapter class serving ``model_type``: the family that registered it, else the
    any-causal-LM adapter when ``AutoModelForCausalLM`` loads that type, else None."""
    cls = ADAPTERS.get(model_type)
    if cls is None and CAUSAL_LM_FALLBACK and model_type in causal_lm_model_types():
        cls = CAUSAL_LM_FALLBACK[0]
    return cls


def unserved_message(where: str, model_type: str) -> str:
    """One line for a checkpoint no adapter serves: what is served and the fix."""
    families = ", ".join(sorted({c.family for c in ADAPTERS.values()}))
    return (f"{where}: model_type {model_type!r} has no adapter and AutoModelForCausalLM "
            f"cannot load it (families: {families}; any causal LM transformers knows is "
            "a text agent). To add a family, write processors/<family>.py with an Adapter "
            "subclass decorated with @register_adapter (README: 'Adding a model family').")


def read_model_type(path: str) -> str:
    """``model_type`` from a local folder's config.json, or through the hub cache."""
    local = Path(path)
    if local.is_dir():
        cfg = local / "config.json"
        if not cfg.is_file():
            raise FileNotFoundError(
                f"{path}: no config.json in this folder; point the model setting at a "
                "checkpoint folder written by save_pretrained (or a hub id)."
            )
        try:
            return str(json.loads(cfg.read_text())["model_type"])
        except (json.JSONDecodeError, KeyError) as e:
            raise UnknownFamilyError(f"{cfg}: cannot read 'model_type' ({e}).") from e
    if local.exists() or path.startswith((".", "/")):
        raise FileNotFoundError(f"{path}: not a folder; give a checkpoint folder or a hub id.")
    from transformers import AutoConfig

    return str(AutoConfig.from_pretrained(path).model_type)


def adapter_class_for(path_or_spec: str | os.PathLike) -> type | None:
    """The adapter class of a ``tiny:`` spec or a local checkpoint folder, found without
    building or downloading anything (None when that cannot be known so: a hub id, a
    missing folder, an unregistered model_type)."""
    from .family import TINY_BUILDERS
    from .tiny import TINY_PREFIX

    if is_tiny_spec(path_or_spec):
        spec = TINY_BUILDERS.get(str(path_or_spec)[len(TINY_PREFIX):])
        return ADAPTERS.get(spec.model_type) if spec else None
    if is_gguf_spec(path_or_spec):  # transformers reads GGUF as causal LMs only
        return CAUSAL_LM_FALLBACK[0] if CAUSAL_LM_FALLBACK else None
    cfg = Path(path_or_spec) / "config.json"
    try:
        return adapter_class_for_type(str(json.loads(cfg.read_text())["model_type"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def adapter_for(path_or_spec: str | os.PathLike, options: AdapterOptions | None = None) -> Adapter:
    """The adapter for a checkpoint, with its processor loaded (the model is not)."""
    if not is_gguf_spec(path_or_spec) and looks_like_gguf_file(path_or_spec):
        raise GGUFError(gguf_path_message(str(path_or_spec)))
    path = resolve_model_path(path_or_spec)
    model_type = read_model_type(path)
    cls = adapter_class_for_type(model_type)
    if cls is None:
        raise UnknownFamilyError(unserved_message(str(path_or_spec), model_type))
    return cls(path, options)


def gguf_path_message(path: str) -> str:
    """A GGUF file given where a checkpoint folder belongs: say how to use it."""
    return (f"{path} is a GGUF file, not a checkpoint folder; write gguf:{path} to convert it "
            "once into a cached safetensors folder (processors/gguf.py)")
