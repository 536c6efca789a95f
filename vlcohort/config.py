"""Typed run configuration: dataclass defaults <- YAML file <- ``key.sub=value`` overrides.

The schema (one dataclass per section, each field with its docstring, which ``vlcohort
config --fields`` prints) is ``vlcohort/config_schema.py``, re-exported here; this file
loads it (recipes with their ``base:`` files, overrides) and writes the resolved output.
The mechanics (YAML mappings -> checked dataclasses, dotted overrides, field docstrings)
are schema-free and live in ``vlcohort/typed_yaml.py``; ``vlcohort/config_checks.py``
resolves the derived values and checks each section and their combinations against the
registries. An unknown key, a value of the wrong type or an impossible combination is a
:class:`ConfigError` naming the key and what is allowed. The resolved config is printed
with its derived totals and saved with every run.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import yaml

from vlcohort import run_folder, typed_yaml
from vlcohort.config_checks import deprecations, pitfalls, validate
from vlcohort.config_schema import (  # noqa: F401 - re-exported: the schema's names are vlcohort.config's
    DEFAULT_COHORT,
    AgentIdentity,
    CheckpointConfig,
    ComasConfig,
    Config,
    DataColumns,
    DataConfig,
    DistributedConfig,
    EMATeacherConfig,
    EvalConfig,
    EvalDataConfig,
    GRPOConfig,
    LogConfig,
    ModelConfig,
    MonitorConfig,
    OptimConfig,
    PromptConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    SelfPlayConfig,
    ViewConfig,
    VLLMConfig,
    WandbConfig,
    WarmupConfig,
    agent_reward_source,
    default_cohort_entries,
)
from vlcohort.typed_yaml import ConfigError, build, read_yaml_mapping, set_dotted, split_override

# ----------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults <- YAML file (if any, with its ``base:`` files) <- ``key.sub=value``
    overrides, then validated."""
    data = read_layered(path) if path is not None else {}
    for item in overrides:
        key, value = split_override(item)
        set_dotted(data, key, value)
    cfg = build(Config, data)
    validate(cfg)
    for line in [*deprecations(cfg), *pitfalls(cfg)]:
        print(line, file=sys.stderr)
    return cfg


def read_layered(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A recipe file's mapping with its ``base:`` recipe (a path relative to the file)
    underneath: the file's keys are merged over the base's, section by section (lists and
    scalars replace). A recipe that differs from another in two keys says only those."""
    path = Path(path)
    data = read_yaml_mapping(path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: must be a path to another recipe, got "
                          f"{typed_yaml.quote_value(base)}")
    base_path = (path.parent / base).resolve()
    if base_path in _seen or base_path == path.resolve():
        raise ConfigError(f"{path}: base: {typed_yaml.cut_text(base)} makes a circle of recipes")
    if not typed_yaml.is_file(base_path):
        raise ConfigError(f"{path}: base: {typed_yaml.cut_text(base)} not found (looked for "
                          f"{typed_yaml.cut_text(str(base_path))})")
    return merged(read_layered(base_path, _seen + (path.resolve(),)), data)


def merged(under: dict, over: dict) -> dict:
    """``over``'s keys on top of ``under``'s; nested mappings merge, anything else replaces."""
    out = dict(under)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


#: The packaged demo recipe: what ``vlcohort train`` runs with no arguments
#: (``configs/demo.yaml`` is a link to it).
DEMO_RECIPE = Path(__file__).resolve().parent / "recipes" / "demo.yaml"


#: Override keys that say "my own data / my own models" (``agents.N.path`` too): with no
#: recipe file they start from the plain defaults, never from the demo's prompt, tasks and
#: agents. Other keys (``agents.0.warmup.steps``, ``data.num_problems``) tune the demo.
OWN_RUN_KEYS = ("data.path", "data.source", "agents")


def train_base(config_path: str | Path | None, overrides: list[str] | tuple[str, ...]
               ) -> tuple[Path | None, list[str], str]:
    """What ``vlcohort train`` / ``vlcohort config`` build on: ``(recipe or None for the
    plain defaults, overrides, one line saying which and why)``.

    A recipe file given is used as is. With none, bare ``vlcohort train`` (or overrides of
    settings that tune it) runs the packaged demo; ``data.path``, ``data.source``,
    ``agents`` or an ``agents.N.path`` mean a run of the user's own, so they start from the plain defaults (the demo's
    multiple-choice instruction, synthetic tasks and warm-ups would otherwise leak into
    it), and ``data.path`` without ``data.source`` implies ``data.source=file``."""
    if config_path is not None:
        return Path(config_path), list(overrides), f"# base recipe: {config_path}"
    keys = [split_override(item)[0] for item in overrides]
    own = [k for k in keys if k in OWN_RUN_KEYS or re.fullmatch(r"agents\.\d+\.path", k)]
    if not own:
        return DEMO_RECIPE, list(overrides), (f"# base recipe: the packaged demo ({DEMO_RECIPE.name}"
                                              "; give a recipe file, or data.path / agents "
                                              "overrides for a run of your own)")
    implied = (["data.source=file"] if "data.path" in keys and "data.source" not in keys
               else [])
    if "agents" not in keys and any(k.startswith("agents.") for k in keys):
        # agents.N.* edits the default cohort, as it edits a recipe's list
        implied.append("agents=" + yaml.safe_dump(list(default_cohort_entries()),
                                                  default_flow_style=True, width=10**6).strip())
    return None, implied + list(overrides), (
        f"# base recipe: none, the plain defaults ({', '.join(own)} given"
        + (", data.source=file implied by data.path" if implied else "") + ")")


def default_config(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The embedded default (the demo recipe), resolved and validated."""
    return load_config(DEMO_RECIPE, overrides)


# ----------------------------------------------------------------------------- output


def derived_totals(cfg: Config) -> dict[str, int]:
    """Totals the config implies, printed with it (``docs/design.md``, rule 5)."""
    A, B, G = len(cfg.agents), cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    return {"agents (A)": A, "prompts_per_step (B)": B, "rollouts_per_prompt (G)": G,
            "sequences_per_step (A x B x G)": A * B * G,
            "sequences_per_agent_per_step (B x G)": B * G}


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True, width=100)


def resolved_text(cfg: Config) -> str:
    totals = "\n".join(f"#   {k}: {v}" for k, v in derived_totals(cfg).items())
    return f"# resolved config\n{to_yaml(cfg)}# derived totals\n{totals}\n"


def save_resolved(cfg: Config, folder: str | Path) -> Path:
    """Write config.yaml (loadable with :func:`load_config`) into the run folder,
    through :func:`vlcohort.run_folder.write_text`: a run folder may come from someone
    else, and a link planted at its config.yaml or the temporary is replaced, never
    written through."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return run_folder.write_text(folder / "config.yaml", to_yaml(cfg))


def field_docs(cls=Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, docstring) of every leaf field of the run config (``vlcohort config
    --fields``)."""
    return typed_yaml.field_docs(cls, prefix)
