"""Checks that run before any work: every model and the data can be found.

A bad ``agents.N.path`` used to surface as a traceback from the warm-up thread pool, and a
bad ``data.path`` as "arm ttrl failed (exit 2)" after the warm-ups had run. Both are
config mistakes, so they are reported as such (exit 2, the key named, what to do) before
anything is built, downloaded or trained. Only what can be checked without loading a
model is checked here; hub ids are left to ``from_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

from vlcohort.typed_yaml import ConfigError


def check_model_path(path: str, key: str) -> None:
    """``path`` names a tiny spec, a ``gguf:`` file or packaged name, a checkpoint folder
    some adapter serves (a registered family, or any causal LM), or (not checked here) a hub
    id; otherwise a :class:`ConfigError` naming ``key``."""
    from vlcohort.processors.gguf import GGUFError, gguf_file, is_gguf_spec, looks_like_gguf_file
    from vlcohort.processors.registry import (
        UnknownFamilyError,
        adapter_class_for_type,
        gguf_path_message,
        read_model_type,
        unserved_message,
    )
    from vlcohort.processors.tiny import TINY_MODELS, is_tiny_spec

    if is_tiny_spec(path):
        name = path.split(":", 1)[1]
        if name not in TINY_MODELS:
            raise ConfigError(f"{key}: unknown tiny model {path!r}; available: "
                              + ", ".join(f"tiny:{n}" for n in TINY_MODELS))
        return
    if is_gguf_spec(path):
        try:
            gguf_file(path)  # the file (or package) is there; conversion happens at load
        except GGUFError as e:
            raise ConfigError(f"{key}: {e}") from None
        return
    local = Path(path).expanduser()
    if not (local.exists() or str(path).startswith((".", "/", "~"))):
        return  # a hub id: from_pretrained resolves (or refuses) it
    if looks_like_gguf_file(local):
        raise ConfigError(f"{key}: {gguf_path_message(path)}")
    try:
        model_type = read_model_type(str(local))
    except (FileNotFoundError, UnknownFamilyError) as e:
        raise ConfigError(f"{key}: {e}") from None
    if adapter_class_for_type(model_type) is None:
        raise ConfigError(unserved_message(f"{key}: {local}", model_type))


def preflight(cfg) -> None:
    """Every agent's model and the training data, checked before any work."""
    for i, agent in enumerate(cfg.agents):
        check_model_path(str(agent.path), f"agents.{i}.path")
    d = cfg.data
    if d.source == "file":
        if not d.path:
            raise ConfigError("data.path: empty; with data.source=file give a parquet / JSON / "
                              "JSONL file or a dataset folder")
        if not Path(d.path).expanduser().exists():
            raise ConfigError(f"data.path: {d.path} does not exist; give a parquet / JSON / "
                              "JSONL file or a dataset folder")
