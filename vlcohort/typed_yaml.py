"""Typed configuration from YAML, without a schema of its own: a mapping (a YAML file plus
``key.sub=value`` overrides) becomes nested dataclasses, every key and value checked
against the dataclass fields and type hints, every error a :class:`ConfigError` naming the
dotted key. Field docstrings (the string literal under a field) are read back for help
texts. ``vlcohort/config.py`` holds the schema and the resolved output,
``vlcohort/config_checks.py`` the checks that need more than one field's type.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key and what is allowed."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that names one key twice; PyYAML would silently keep the last value."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping, at any depth.

    A recipe with ``lr`` set twice is almost always an edit that went to the wrong place;
    taking the last value silently trains with a setting nobody chose. Keys brought in by a
    merge (``<<: *anchor``) may still be overridden: only keys written in the mapping itself
    are compared."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, line, seen[key])
                    seen[key] = line
                except TypeError:  # an unhashable key: the base class names that error
                    continue
        return super().construct_mapping(node, deep=deep)


#: YAML 1.1's boolean words, which PyYAML reads as true / false. The loader reads them as
#: text (YAML 1.2: only true / false are booleans), so a string setting keeps the word
#: (``grpo.is_mode: off``, ``self_play.images: on``); a boolean setting still takes them.
YAML11_BOOL_WORDS = {"yes": True, "on": True, "no": False, "off": False}

StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                   re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def yaml11_bool(value: Any) -> bool | None:
    """``value`` as a boolean when it is one of YAML 1.1's words (yes / no / on / off, any
    case), else None."""
    return YAML11_BOOL_WORDS.get(value.lower()) if isinstance(value, str) else None


def load_strict(text: str) -> Any:
    """``text`` parsed as YAML by :class:`StrictLoader` (duplicate keys are an error)."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: safe


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (empty file: {})."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{p}: line {line}: byte 0x{raw[e.start]:02x} is not UTF-8; save the "
                          "file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    try:
        loaded = load_strict(text)
    except DuplicateKeyError as e:
        raise ConfigError(f"{p}: line {e.line}: duplicate key {e.key!r} (first set at line "
                          f"{e.first_line}); keep one of them") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({yaml_problem(e)})") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got "
                          f"{type(loaded).__name__}")
    return loaded or {}


def yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: what is wrong and where (its own text spans several
    lines, with a caret drawing)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


#: Stands in for ``#`` while an override value is parsed: on a command line ``#`` starts no
#: comment (``data.path=/data/a #1.jsonl`` names a file), but YAML would cut the value there.
_HASH_STAND_IN = "\ue000"


def split_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: write it as key.sub=value (e.g. run.steps=5)")
    key, raw = item.split("=", 1)
    return key.strip(), parse_override_value(raw, key.strip())


def parse_override_value(raw: str, key: str = "value") -> Any:
    """An override's value as YAML (``[a, b]``, ``{k: v}``, numbers, booleans), every ``#``
    kept as text rather than read as the start of a comment."""
    if not raw.strip():
        return ""
    if _HASH_STAND_IN in raw:
        raise ConfigError(f"override {key!r}: the character U+E000 is reserved; remove it")
    try:
        value = load_strict(raw.replace("#", _HASH_STAND_IN))
    except DuplicateKeyError as e:
        raise ConfigError(f"override {key!r}: duplicate key {e.key!r}; keep one of them") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {key!r}: not valid YAML ({yaml_problem(e)}); quote "
                          "the value if it is text") from None
    return _restore_hash(value)


def _restore_hash(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(_HASH_STAND_IN, "#")
    if isinstance(value, list):
        return [_restore_hash(v) for v in value]
    if isinstance(value, dict):
        return {_restore_hash(k): _restore_hash(v) for k, v in value.items()}
    return value


def set_dotted(data: dict, key: str, value: Any) -> None:
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


def build(cls, data: Any, prefix: str = ""):
    """Build dataclass ``cls`` from a mapping, checking keys and types."""
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        guess = nearest_keys(cls, str(unknown[0]))
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key. Allowed under {where}: "
                          + ", ".join(fields)
                          + (f"; did you mean {' or '.join(prefix + g for g in guess)}?" if guess else ""))
    hints = typing.get_type_hints(cls)
    defaults = cls()
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        if name not in data:
            continue
        kwargs[name] = _coerce(hints[name], data[name], key, getattr(defaults, name))
    return cls(**kwargs)


#: How alike (difflib's ratio) a mistyped key and an allowed one must be for the error to
#: suggest it: one or two letters off in a word of five or more (``stepz`` / ``steps`` 0.8,
#: ``rollout_per_prompt`` / ``rollouts_per_prompt`` 0.97), not a different word that shares
#: a few letters (``banana`` / ``name`` 0.6).
SUGGEST_CUTOFF = 0.75


def nearest_keys(cls, name: str) -> list[str]:
    """Keys of dataclass ``cls`` (relative to it) that the unknown key ``name`` was most
    likely meant to be: the closest field of ``cls`` itself; else a field of a section
    below it with that name, or one close to it (``steps`` at the top level ->
    ``run.steps``), at most three. Empty when nothing is close enough: a wrong guess
    misleads more than none."""
    import difflib

    own = difflib.get_close_matches(name, [f.name for f in dataclasses.fields(cls)], n=1,
                                    cutoff=SUGGEST_CUTOFF)
    if own:
        return own
    below = [k for k in _section_keys(cls) if "." in k]
    leaves = {k.rsplit(".", 1)[1] for k in below}
    close = set(difflib.get_close_matches(name, sorted(leaves), n=3, cutoff=SUGGEST_CUTOFF))
    return [k for k in below if k.rsplit(".", 1)[1] in close][:3]


def _section_keys(cls, prefix: str = "") -> list[str]:
    """Dotted keys of ``cls``'s fields and of its nested sections' fields (not into lists
    of sections, whose keys need an index), in declaration order."""
    out = []
    defaults = cls()
    for f in dataclasses.fields(cls):
        out.append(prefix + f.name)
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            out.extend(_section_keys(type(value), f"{prefix}{f.name}."))
    return out


def _coerce(tp, value, key: str, default):
    """``value`` as type ``tp`` (``key``: its dotted name in errors; ``default``: the
    field's default, whose list entries a list of dataclasses is merged over)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _coerce(args[0], value, key, default)
    if origin is typing.Literal:
        return _coerce_literal(typing.get_args(tp), value, key)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key + ".")
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {_coerce(key_tp, k, f"{key}.{k}", None): _coerce(value_tp, v, f"{key}.{k}", None)
                for k, v in value.items()}
    if origin is list:
        return _coerce_list(typing.get_args(tp)[0], value, key, default)
    if tp in (bool, int, float, str):
        return _coerce_scalar(tp, value, key)
    reject_non_finite(value, key)
    return value


def _coerce_literal(allowed: tuple, value, key: str):
    for a in allowed:  # a YAML bool must be a bool choice, a string a string one
        if value == a and isinstance(value, bool) == isinstance(a, bool):
            return a
    word = yaml11_bool(value)  # yes / no / on / off: a bool choice, unless a string one
    if word is not None and word in [a for a in allowed if isinstance(a, bool)]:
        return word
    raise ConfigError(f"{key}: {value!r} is not one of "
                      + ", ".join(str(a).lower() if isinstance(a, bool) else str(a)
                                  for a in allowed))


def _coerce_list(item_tp, value, key: str, default) -> list:
    """A list; entries that are dataclasses are merged over the default's entry at the same
    index (``agents.1.max_tiles=6`` edits the default second agent)."""
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
            out.append(build(item_tp, merged, f"{key}.{i}."))
        else:
            out.append(_coerce(item_tp, v, f"{key}.{i}", None))
    return out


def _coerce_scalar(tp: type, value, key: str):
    """A bool, int, float or str; a YAML bool is never a number, a float never NaN."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if (word := yaml11_bool(value)) is not None:
            return word
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return finite(float(value), key)
            except ValueError as e:
                if isinstance(e, ConfigError):
                    raise
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return finite(float(value), key)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return str(value)


def finite(value: float, key: str) -> float:
    """``value`` when it is a finite number. No setting of a run takes NaN or infinity: a
    NaN learning rate or clip range is accepted by every comparison (all are false) and
    only fails deep inside torch, steps later, with a traceback instead of the key."""
    if not math.isfinite(value):
        raise ConfigError(f"{key}: {value} is not a finite number; give a finite value")
    return value


def reject_non_finite(value: Any, key: str) -> None:
    """Free-form values (``agents.N.processor``, untyped mappings): no NaN or infinity at
    any depth either."""
    if isinstance(value, float):
        finite(value, key)
    elif isinstance(value, dict):
        for k, v in value.items():
            reject_non_finite(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            reject_non_finite(v, f"{key}.{i}")


def field_docs(cls, prefix: str = "") -> list[tuple[str, str, str]]:
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
    """The string literal right under each field in the class body, inherited fields
    included (read from the dataclass base that declares them; a subclass's own wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_attribute_docstrings(klass))
    return docs


def _own_attribute_docstrings(cls) -> dict[str, str]:
    """The string literal right under each field in ``cls``'s own class body."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
