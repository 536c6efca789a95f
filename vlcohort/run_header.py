"""The run header: the config as a person reads it at the start of a run (derived
totals, the rollout engine's dtype, the keys that differ from the defaults, the code
sandbox), and what a comparison arm changes. Kept apart from ``vlcohort/console.py``,
which the rollout engines import to keep third-party output quiet: this module reads the
config, so the console must not."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def changed_keys(cfg: Any, defaults: Any = None) -> list[tuple[str, Any]]:
    """``[(dotted key, value)]`` of ``cfg`` where it differs from ``defaults`` (a config of
    the same class; None: the validated defaults, what a config file with no keys gives).
    Agents are compared one by one with the default agent of the same index (the one an
    ``agents`` list entry is built over), so ``agents.0.path`` is named, not ``agents``."""
    from vlcohort.config import load_config, to_dict

    if defaults is None:
        defaults = load_config(None)
    return _diff(to_dict(cfg), to_dict(defaults), "")


def _diff(now: Any, base: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(now, dict) and isinstance(base, dict):
        out = []
        for key in now:
            out += _diff(now[key], base.get(key, _MISSING), f"{prefix}{key}.")
        return out
    if isinstance(now, list) and now and all(isinstance(x, dict) for x in now):
        base = base if isinstance(base, list) else []
        out = []
        for i, item in enumerate(now):
            out += _diff(item, base[i] if i < len(base) else _default_like(item), f"{prefix}{i}.")
        return out
    return [] if now == base else [(prefix.rstrip("."), now)]


_MISSING = object()


def _default_like(item: dict) -> dict:
    """An agent entry beyond the default cohort is compared with ``ModelConfig()``'s
    defaults (what it was built over)."""
    import dataclasses

    from vlcohort.config_schema import ModelConfig

    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    return dataclasses.asdict(ModelConfig()) if set(item) <= fields else {}


def override_text(key: str, value: Any, width: int = 60) -> str:
    """``key=value`` as it could be typed after ``vlcohort train`` (YAML flow style),
    long values cut to ``width`` characters."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("...").strip()  # a scalar's document end marker
    if isinstance(value, str) and " " in text and not text.startswith(("'", '"')):
        text = "'" + text.replace("'", "''") + "'"  # one shell word, YAML's quoting
    if len(text) > width:
        text = text[: width - 3] + "..."
    return f"{key}={text}"


def wrap_items(items: list[str], width: int, first: str, rest: str, sep: str = "  ") -> list[str]:
    """``items`` packed into lines of at most ``width`` characters, never splitting one
    (an item longer than a line gets a line of its own)."""
    lines: list[str] = []
    line = first
    for item in items:
        fresh = line in (first, rest)
        if not fresh and len(line) + len(sep) + len(item) > width:
            lines.append(line)
            line, fresh = rest, True
        line += item if fresh else sep + item
    if line not in (first, rest):
        lines.append(line)
    return lines


def config_summary(cfg: Any, saved_to: str | Path | None = None, width: int = 100) -> str:
    """The config as printed at the start of a run: the derived totals (``docs/design.md``, rule 5),
    a vLLM engine's dtype beside its policy's, then the keys that differ from the defaults
    (as overrides, one section a line), then where the full resolved file is. The full
    file stays the record; this is the part a person reads."""
    from vlcohort.config import derived_totals
    from vlcohort.rollout.dtypes import rollout_header
    from vlcohort.training.rewards import answer_kind

    totals = [f"{k} {v}" for k, v in derived_totals(cfg).items()]
    lines = ["# run: " + ", ".join(f"{mc.name}={mc.path}" for mc in cfg.agents)
             + f"; method {cfg.method}" + (f", arms {', '.join(cfg.arms)}" if cfg.arms else "")
             + f"; {cfg.run.steps} step" + ("" if cfg.run.steps == 1 else "s")]
    lines += wrap_items(totals, width, "# totals: ", "#   ", sep=", ")
    lines += rollout_header(cfg.rollout.engine, cfg.rollout.vllm.dtype,
                            [(mc.name, mc.dtype) for mc in cfg.agents])
    if answer_kind(cfg.reward.answer_kind).runs_programs:
        lines.append(code_sandbox_line())
    changed = changed_keys(cfg)
    lines.append(f"# set ({len(changed)} keys differ from the defaults):")
    by_section: dict[str, list[str]] = {}
    for key, value in changed:
        parts = key.split(".")
        section = ".".join(parts[:2]) if parts[0] == "agents" and len(parts) > 2 else parts[0]
        by_section.setdefault(section, []).append(override_text(key, value))
    for items in by_section.values():
        lines += wrap_items(items, width, "#   ", "#     ")
    if saved_to is not None:
        lines.append(f"# full config: {saved_to} (every key: vlcohort config --fields)")
    return "\n".join(lines)


def code_sandbox_line() -> str:
    """Where the run's code rewards run: the weak fallback is only ever the user's explicit
    choice (``VLCOHORT_SANDBOX=unshare-unsafe``), and a run under it must say so first."""
    from vlcohort.code.sandbox import sandbox_name

    name = sandbox_name()
    if name == "bwrap":
        return "# code rewards: sandboxed by bubblewrap (vlcohort.code.sandbox.mechanism())"
    if name == "none":
        return ("# code rewards: NO SANDBOX WORKS HERE, every program is refused and scores 0 "
                "(apt-get install -y bubblewrap)")
    return (f"# code rewards: {name}: VLCOHORT_SANDBOX=unshare-unsafe, programs see the "
            "host's files; rewards can be forged")


def arm_difference(arm: Any, parent: Any) -> str:
    """What an arm changes in its parent comparison config, as overrides on one line."""
    skip = ("arms", "reward.source", "agents")
    items = [override_text(k, v) for k, v in changed_keys(arm, parent)
             if not any(k == s or k.startswith(s + ".") for s in skip)]
    return "  ".join(items)

