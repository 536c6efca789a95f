"""Typed run configuration: dataclass defaults <- YAML file <- ``key.sub=value`` overrides.

Every field has a docstring (the string literal under it), which ``vlcohort config
--help-fields`` prints. An unknown key, a value of the wrong type or an impossible
combination is a :class:`ConfigError` naming the key and what is allowed. The resolved
config is printed with its derived totals and saved with every run.

Batch knobs carry their unit in the name (DESIGN.md rule 5): ``prompts_per_step`` (B),
``rollouts_per_prompt`` (G); sequences per step = A x B x G.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key and what is allowed."""


# ----------------------------------------------------------------------------- sections


@dataclass
class ModelConfig:
    """One agent: its model and how its inputs are prepared."""

    name: str = "A"
    """Agent name, used in metric names (``agent/<name>/...``) and checkpoint folders."""
    path: str = ""
    """Checkpoint folder, hub id, or ``tiny:<family>`` (a tiny model built offline from the
    family's real classes; ``vlcohort tiny`` lists them)."""
    dtype: str = "float32"
    """Weights dtype: float32 | bfloat16 | float16 | auto."""
    attn_implementation: str = "sdpa"
    """eager | sdpa | flash_attention_2."""
    trust_remote_code: bool = False
    """Run code shipped inside the checkpoint. Every supported family is native: leave off."""
    min_pixels: int | None = None
    """Per-image lower pixel budget (families with native-resolution images); None: checkpoint's."""
    max_pixels: int | None = None
    """Per-image upper pixel budget (families with native-resolution images); None: checkpoint's."""
    max_tiles: int | None = None
    """Most tiles per image (families with dynamic tiling); None: checkpoint's."""
    pan_and_scan: bool = False
    """Extra crops for elongated images (families with a fixed canvas)."""
    max_source_pixels: int = 64_000_000
    """Decompression-bomb guard: refuse an image whose header declares more pixels."""
    min_image_side: int = 2
    """Refuse an image with a side shorter than this (a 1x1 image is a broken export)."""
    logprob_chunk_tokens: int = 256
    """Completion positions per chunk when computing log-probs ([B, chunk, V] at a time)."""


@dataclass
class PromptConfig:
    """How a problem becomes a prompt (the same for every agent)."""

    system_prompt: str = "You are a helpful assistant."
    """System message; families without a system role fold it into the first user turn."""
    instruction: str = ("Think briefly, then give the final answer as <answer>X</answer>.")
    """Answer-format instruction appended to every question."""


@dataclass
class RolloutConfig:
    """Generation of rollouts."""

    engine: str = "hf"
    """hf (transformers generate, CPU or GPU) | vllm (GPU only)."""
    prompts_per_step: int = 4
    """B: prompts sampled per step (all agents see the same prompts)."""
    rollouts_per_prompt: int = 8
    """G: completions per prompt per agent (the group of the group-normalised advantage)."""
    max_new_tokens: int = 64
    """Longest completion, in tokens."""
    temperature: float = 1.0
    """Sampling temperature (log-probs for the IS correction use the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 samples from the whole distribution."""


@dataclass
class RewardConfig:
    """Where rewards come from."""

    source: str | None = None
    """peer_vote (Co-RL) | self_vote (TTRL) | ground_truth (GT-Reward); None: the one
    ``method`` implies."""
    topology: str = "ring"
    """peer_vote teachers: ring (agent a taught by a-1) | all_peers."""
    grader: str = "corrected"
    """corrected (multiple-choice aware, the default) | legacy (plain math grader)."""


@dataclass
class RunConfig:
    """Bookkeeping of a run."""

    steps: int = 20
    """RL steps."""
    seed: int = 0
    """Seed of data order, sampling and initialisation."""
    output_dir: str = "runs/default"
    """Run folder: resolved config, metrics.jsonl, checkpoints, plots."""


def _default_agents() -> list[ModelConfig]:
    """Two tiny models of different families. Which families is the adapters' knowledge
    (DESIGN.md rule 1), so the specs come from ``processors.tiny``."""
    from processors.tiny import DEFAULT_TINY_COHORT

    return [ModelConfig(name=n, path=spec) for n, spec in zip("AB", DEFAULT_TINY_COHORT)]


@dataclass
class Config:
    """A whole run. The embedded default is what ``vlcohort train`` runs with no arguments."""

    method: str = "co_rl"
    """co_rl | ttrl | gt_reward: a preset for ``reward.source`` (co_rl: peer_vote, ttrl:
    self_vote, gt_reward: ground_truth)."""
    agents: list[ModelConfig] = field(default_factory=_default_agents)
    """The cohort, A >= 1 agents; each trains its own model."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """Prompt rendering."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout generation."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward source."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run bookkeeping."""


METHOD_SOURCES = {"co_rl": "peer_vote", "ttrl": "self_vote", "gt_reward": "ground_truth"}
CHOICES: dict[str, tuple[str, ...]] = {
    "method": tuple(METHOD_SOURCES),
    "agents.*.dtype": ("float32", "bfloat16", "float16", "auto"),
    "agents.*.attn_implementation": ("eager", "sdpa", "flash_attention_2"),
    "rollout.engine": ("hf", "vllm"),
    "reward.source": tuple(METHOD_SOURCES.values()),
    "reward.topology": ("ring", "all_peers"),
    "reward.grader": ("corrected", "legacy"),
}


# ----------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults <- YAML file (if any) <- ``key.sub=value`` overrides, then validated."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({e})") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got "
                              f"{type(loaded).__name__}")
        data = loaded or {}
    for item in overrides:
        key, value = _split_override(item)
        _set_dotted(data, key, value)
    cfg = _build(Config, data, prefix="")
    validate(cfg)
    return cfg


def default_config() -> Config:
    """The embedded default, resolved and validated (``vlcohort train`` with no arguments)."""
    return load_config()


def _split_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: write it as key.sub=value (e.g. run.steps=5)")
    key, raw = item.split("=", 1)
    return key.strip(), yaml.safe_load(raw) if raw.strip() else ""


def _set_dotted(data: dict, key: str, value: Any) -> None:
    """Set ``a.b.0.c`` in nested dicts/lists; list indices are numbers."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            idx = _index(part, key)
            while len(node) <= idx:
                node.append({})
            node = node[idx]
            continue
        if part not in node or node[part] is None:
            node[part] = [] if nxt.isdigit() else {}
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        idx = _index(last, key)
        while len(node) <= idx:
            node.append({})
        node[idx] = value
    else:
        node[last] = value


def _index(part: str, key: str) -> int:
    if not part.isdigit():
        raise ConfigError(f"override {key!r}: {part!r} must be a list index (0, 1, ...)")
    return int(part)


def _build(cls, data: Any, prefix: str):
    """Build dataclass ``cls`` from a mapping, checking keys and types."""
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key. Allowed under {where}: "
                          + ", ".join(fields))
    hints = typing.get_type_hints(cls)
    defaults = cls()
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        if name not in data:
            continue
        kwargs[name] = _coerce(hints[name], data[name], key, getattr(defaults, name))
    return cls(**kwargs)


def _coerce(tp, value, key: str, default):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, key, default)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        out = []
        for i, v in enumerate(value):
            base = default[i] if isinstance(default, list) and i < len(default) else None
            if dataclasses.is_dataclass(item_tp):
                merged = dataclasses.asdict(base) if base is not None else {}
                if not isinstance(v, dict):
                    raise ConfigError(f"{key}.{i}: expected a mapping, got {v!r}")
                merged.update(v)
                out.append(_build(item_tp, merged, f"{key}.{i}."))
            else:
                out.append(_coerce(item_tp, v, f"{key}.{i}", None))
        return out
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


# ----------------------------------------------------------------------------- validation


def validate(cfg: Config) -> None:
    """Checks that need more than one field, and choice fields; fills derived fields
    (``reward.source`` from ``method``)."""
    _check_choice("method", cfg.method)
    for i, a in enumerate(cfg.agents):
        _check_choice("agents.*.dtype", a.dtype, f"agents.{i}.dtype")
        _check_choice("agents.*.attn_implementation", a.attn_implementation,
                      f"agents.{i}.attn_implementation")
        if a.min_pixels and a.max_pixels and a.min_pixels > a.max_pixels:
            raise ConfigError(f"agents.{i}: min_pixels={a.min_pixels} > max_pixels={a.max_pixels}")
        if not a.path:
            raise ConfigError(f"agents.{i}.path: empty; give a checkpoint folder, hub id or "
                              "tiny:<family> spec")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", a.name):
            raise ConfigError(f"agents.{i}.name: {a.name!r}; use letters, digits, _ . - "
                              "(it names metric keys and checkpoint folders)")
    _check_choice("rollout.engine", cfg.rollout.engine)
    expected = METHOD_SOURCES[cfg.method]
    if cfg.reward.source is None:
        cfg.reward.source = expected  # method is a preset for the reward source
    _check_choice("reward.source", cfg.reward.source)
    if cfg.reward.source != expected:
        raise ConfigError(f"reward.source={cfg.reward.source!r} contradicts method="
                          f"{cfg.method!r} (which means {expected!r}); set one of them only")
    _check_choice("reward.topology", cfg.reward.topology)
    _check_choice("reward.grader", cfg.reward.grader)
    if not cfg.agents:
        raise ConfigError("agents: at least one agent is needed")
    names = [a.name for a in cfg.agents]
    if len(set(names)) != len(names):
        raise ConfigError(f"agents: names must be unique, got {names}")
    if cfg.reward.source == "peer_vote" and len(cfg.agents) < 2:
        raise ConfigError("reward.source=peer_vote needs at least 2 agents (a ring of one "
                          "agent would be self-vote); add an agent or use method=ttrl")
    for key in ("prompts_per_step", "rollouts_per_prompt", "max_new_tokens"):
        if getattr(cfg.rollout, key) < 1:
            raise ConfigError(f"rollout.{key}: must be >= 1, got {getattr(cfg.rollout, key)}")
    if cfg.rollout.temperature <= 0:
        raise ConfigError("rollout.temperature: must be > 0 (sampling is needed for groups)")
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p: must be in (0, 1], got {cfg.rollout.top_p}")
    if cfg.run.steps < 0:
        raise ConfigError(f"run.steps: must be >= 0, got {cfg.run.steps}")


def _check_choice(pattern: str, value: str, key: str | None = None) -> None:
    allowed = CHOICES[pattern]
    if value not in allowed:
        raise ConfigError(f"{key or pattern}: {value!r} is not one of: {', '.join(allowed)}")


# ----------------------------------------------------------------------------- output


def derived_totals(cfg: Config) -> dict[str, int]:
    """Totals the config implies, printed with it (DESIGN.md rule 5)."""
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
    """Write ``config.yaml`` (loadable with :func:`load_config`) into the run folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(to_yaml(cfg))
    tmp.replace(path)
    return path


def field_docs(cls=Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, docstring) for every leaf field, read from the source docstrings."""
    docs = _attribute_docstrings(cls)
    out = []
    default = cls()
    for f in dataclasses.fields(cls):
        value = getattr(default, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            out.extend(field_docs(type(value), key + "."))
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            out.append((key, f"[{len(value)} entries]", docs.get(f.name, "")))
            out.extend(field_docs(type(value[0]), key + ".N."))
        else:
            out.append((key, repr(value), docs.get(f.name, "")))
    return out


def _attribute_docstrings(cls) -> dict[str, str]:
    """The string literal right under each field in the class body."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
