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
    """``path`` names a tiny spec, a checkpoint folder of a registered family, or (not
    checked here) a hub id; otherwise a :class:`ConfigError` naming ``key``."""
    from processors.registry import ADAPTERS, UnknownFamilyError, read_model_type
    from processors.tiny import TINY_MODELS, is_tiny_spec

    if is_tiny_spec(path):
        name = path.split(":", 1)[1]
        if name not in TINY_MODELS:
            raise ConfigError(f"{key}: unknown tiny model {path!r}; available: "
                              + ", ".join(f"tiny:{n}" for n in TINY_MODELS))
        return
    local = Path(path).expanduser()
    if not (local.exists() or str(path).startswith((".", "/", "~"))):
        return  # a hub id: from_pretrained resolves (or refuses) it
    try:
        model_type = read_model_type(str(local))
    except (FileNotFoundError, UnknownFamilyError) as e:
        raise ConfigError(f"{key}: {e}") from None
    if model_type not in ADAPTERS:
        raise ConfigError(f"{key}: {local} is a {model_type!r} checkpoint, which no adapter "
                          f"serves (supported: {', '.join(sorted(ADAPTERS))}); see the README "
                          "section 'Adding a model family'")


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
