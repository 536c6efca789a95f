"""Typed configuration from YAML, without a schema of its own: a mapping (a YAML file plus
``key.sub=value`` overrides) becomes nested dataclasses, every key and value checked
against the dataclass fields and type hints, every error a :class:`ConfigError` naming the
dotted key. The YAML itself is bounded (file size, nesting depth, what aliases write out
to, integer length: :class:`StrictLoader`) and every value an error quotes is cut short
(:func:`quote_value`), so a small hostile recipe or override is a one-line error, not
gigabytes. Field docstrings (the string literal under a field) are read back for help
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

#: Most characters of a user's value that an error message quotes (:func:`quote_value`).
QUOTE_LIMIT = 200
#: Longest config error message: a safety net under :func:`quote_value` for a value some
#: message formats unquoted; the head and the tail (which says the fix) are kept.
MAX_MESSAGE_CHARS = 4000
#: How many characters of a huge value's repr :func:`quote_value` counts before it stops
#: counting ("more than ...").
_COUNT_LIMIT = 10_000_000


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key and what is allowed."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], str) and len(args[0]) > MAX_MESSAGE_CHARS:
            m, tail = args[0], MAX_MESSAGE_CHARS // 4
            args = (f"{m[:MAX_MESSAGE_CHARS - tail]} ... ({len(m)} chars in all) ... "
                    f"{m[-tail:]}",)
        super().__init__(*args)


def quote_value(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, cut after ``limit`` characters and its full
    length said: ``'xxxx'... (1048578 chars)``. Lists and mappings are written piece by
    piece, so quoting a value that aliases made huge costs no more than its first
    ``limit`` characters plus a count; every config error quotes a user's value with it."""
    shown: list[str] = []
    room, total = limit + 1, 0
    for piece in _repr_pieces(value, set()):
        if room > 0:
            shown.append(piece[:room])
            room -= len(shown[-1])
        total += len(piece)
        if total > _COUNT_LIMIT:
            return f"{''.join(shown)[:limit]}... (more than {_COUNT_LIMIT} chars)"
    text = "".join(shown)
    return text if total <= limit else f"{text[:limit]}... ({total} chars)"


def _repr_pieces(value: Any, inside: set[int]):
    """``repr(value)`` in pieces (lists and dicts opened up; ``inside``: the ids of the
    containers being written, whose repr inside themselves is ``[...]`` / ``{...}``)."""
    kind = type(value)
    if kind is not list and kind is not dict:
        if kind is str and len(value) > _COUNT_LIMIT:
            value = value[:_COUNT_LIMIT + 1]
        yield repr(value)
        return
    if id(value) in inside:
        yield "[...]" if kind is list else "{...}"
        return
    inside.add(id(value))
    yield "[" if kind is list else "{"
    items = enumerate(value) if kind is list else value.items()
    for i, (k, v) in enumerate(items):
        if i:
            yield ", "
        if kind is dict:
            yield from _repr_pieces(k, inside)
            yield ": "
        yield from _repr_pieces(v, inside)
    yield "]" if kind is list else "}"
    inside.discard(id(value))


def cut_text(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` (a key as the user wrote it, a file name) for an error message: at most
    ``limit`` characters, and its length when it was longer."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that names one key twice; PyYAML would silently keep the last value."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"duplicate key {quote_value(key)} at line {line} (first at line "
                         f"{first_line})")
        self.key, self.line, self.first_line = key, line, first_line


#: Largest recipe file, or override value, read as YAML (bytes): a recipe is a few kB.
MAX_YAML_BYTES = 1 << 20
#: Deepest nesting of lists and mappings in a recipe or override value (the recipes nest 5
#: deep). PyYAML composes a node by recursion, three frames a level: a few hundred ``[``
#: would be a RecursionError inside it, and every walk of the value after it recurses too.
MAX_YAML_DEPTH = 32
#: Most a document may grow to when its aliases (``*name``) are written out: characters of
#: its scalars plus one per value. Aliases share one object, but every walk of the value
#: (an error message's repr, the override's ``#`` restore, a merge) writes it out: nine
#: levels of nine aliases in 359 bytes are 387 million strings (billion laughs).
MAX_ALIAS_EXPANSION = 100_000
#: Longest integer written in a recipe (characters): Python refuses to read one of over
#: 4300 digits (a ValueError from inside PyYAML), and no setting needs more than 19.
MAX_INT_CHARS = 100


class YamlLimitError(yaml.YAMLError):
    """A document past one of the limits above: ``problem`` (with the fix) at ``mark``,
    under the key ``path`` (its parts, from the top of the document)."""

    def __init__(self, problem: str, mark: Any, path: list[str]) -> None:
        super().__init__(problem)
        self.problem, self.mark, self.path = problem, mark, list(path)

    def where(self, prefix: str = "") -> str:
        """The dotted key (``prefix``: the override's own key), shortened when deep."""
        parts = ([prefix] if prefix else []) + self.path
        text = ".".join(cut_text(str(part), 40) for part in parts[:8])
        return text + (f"... ({len(parts)} levels)" if len(parts) > 8 else "")


def _path_part(index: Any) -> str:
    """A node's part of the dotted key: its list index, or its mapping key's text."""
    if isinstance(index, int):
        return str(index)
    if isinstance(index, yaml.ScalarNode):
        return index.value
    return "(key)" if index is None else "(a list or mapping as key)"


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

    # -- the bounds: depth, alias expansion, integer length (YamlLimitError) ----------------

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._path: list[str] = []
        self._aliases = False

    def compose_node(self, parent, index):
        if parent is not None:
            self._path.append(_path_part(index))
        try:
            if len(self._path) > MAX_YAML_DEPTH:
                raise YamlLimitError(
                    f"lists and mappings nested more than {MAX_YAML_DEPTH} levels deep; a "
                    "config nests a few levels: remove the extra brackets or indentation",
                    self.peek_event().start_mark, self._path)
            if self.check_event(yaml.AliasEvent):
                self._aliases = True
            node = super().compose_node(parent, index)
            if (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int"
                    and len(node.value) > MAX_INT_CHARS):
                raise YamlLimitError(
                    f"an integer of {len(node.value)} characters; no setting takes one of "
                    f"more than {MAX_INT_CHARS}: give the intended number", node.start_mark,
                    self._path)
            return node
        finally:
            if parent is not None:
                self._path.pop()

    def compose_document(self):
        node = super().compose_document()
        if self._aliases and node is not None:
            _expanded_size(node, [], {}, set())
        return node


def _expanded_size(node: yaml.Node, path: list[str], seen: dict[int, tuple[int, int]],
                   inside: set[int]) -> tuple[int, int]:
    """How big and how deep ``node`` is with its aliases written out (characters of its
    scalars plus one per value; levels of lists and mappings), each shared node counted
    once per use but computed once (``seen``). A YamlLimitError past
    :data:`MAX_ALIAS_EXPANSION` or :data:`MAX_YAML_DEPTH` (an alias nests its node's
    levels under its own), or for an alias inside the node it names (``inside``: the
    nodes being counted), whose every walk would never end."""
    if id(node) in inside:
        raise YamlLimitError("an alias (*name) inside the list or mapping it names; a "
                             "config value cannot hold itself: write the value out",
                             node.start_mark, path)
    if id(node) not in seen:
        if isinstance(node, yaml.ScalarNode):
            seen[id(node)] = (1 + len(node.value), 0)
        else:
            inside.add(id(node))
            size, height = 1, 0
            if isinstance(node, yaml.SequenceNode):
                children = [(str(i), child) for i, child in enumerate(node.value)]
            else:
                children = [pair for key, value in node.value
                            for pair in (("(key)", key), (_path_part(key), value))]
            for part, child in children:
                child_size, child_height = _expanded_size(child, [*path, part], seen, inside)
                size, height = size + child_size, max(height, child_height + 1)
                if size > MAX_ALIAS_EXPANSION:
                    raise YamlLimitError(
                        f"its aliases (*name) write out to more than {MAX_ALIAS_EXPANSION} "
                        "characters; a config needs a few thousand: write the values out, "
                        "or nest fewer aliases", node.start_mark, path)
            inside.discard(id(node))
            seen[id(node)] = (size, height)
    if len(path) + seen[id(node)][1] > MAX_YAML_DEPTH:
        raise YamlLimitError(f"its aliases (*name) nest lists and mappings more than "
                             f"{MAX_YAML_DEPTH} levels deep; a config nests a few levels: "
                             "write the values out", node.start_mark, path)
    return seen[id(node)]


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


def is_file(path: Path) -> bool:
    """``path.is_file()``, False also for a name the system refuses (too long: ENAMETOOLONG
    is an OSError from ``is_file`` itself)."""
    try:
        return path.is_file()
    except OSError:
        return False


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (empty file: {})."""
    p = Path(path)
    if not is_file(p):
        raise ConfigError(f"config file not found: {cut_text(str(p))}")
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read ({e.strerror}); check its permissions") from None
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"{p}: over {MAX_YAML_BYTES} bytes; a recipe is a few kB: give the "
                          "recipe, not a data file (data.path names the data)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{p}: line {line}: byte 0x{raw[e.start]:02x} is not UTF-8; save the "
                          "file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    try:
        loaded = load_strict(text)
    except DuplicateKeyError as e:
        raise ConfigError(f"{p}: line {e.line}: duplicate key {quote_value(e.key)} (first "
                          f"set at line {e.first_line}); keep one of them") from None
    except YamlLimitError as e:
        raise ConfigError(f"{p}: line {e.mark.line + 1}: {e.where() or 'the top level'}: "
                          f"{e.problem}") from None
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
    problem = cut_text(problem)  # it may quote the text: an anchor's name, a character
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


#: Stands in for ``#`` while an override value is parsed: on a command line ``#`` starts no
#: comment (``data.path=/data/a #1.jsonl`` names a file), but YAML would cut the value there.
_HASH_STAND_IN = "\ue000"


def split_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override {quote_value(item)}: write it as key.sub=value (e.g. "
                          "run.steps=5)")
    key, raw = item.split("=", 1)
    return key.strip(), parse_override_value(raw, key.strip())


def parse_override_value(raw: str, key: str = "value") -> Any:
    """An override's value as YAML (``[a, b]``, ``{k: v}``, numbers, booleans), every ``#``
    kept as text rather than read as the start of a comment."""
    if not raw.strip():
        return ""
    name = quote_value(key)
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"override {name}: a value of {len(raw)} characters; at most "
                          f"{MAX_YAML_BYTES}, and a setting needs far fewer: give the "
                          "intended value")
    if _HASH_STAND_IN in raw:
        raise ConfigError(f"override {name}: the character U+E000 is reserved; remove it")
    try:
        value = load_strict(raw.replace("#", _HASH_STAND_IN))
    except DuplicateKeyError as e:
        raise ConfigError(f"override {name}: duplicate key {quote_value(e.key)}; keep one of "
                          "them") from None
    except YamlLimitError as e:
        raise ConfigError(f"override {quote_value(e.where(key))}: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {name}: not valid YAML ({yaml_problem(e)}); quote "
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
            node[part] = [] if _is_index(nxt) else {}
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        idx = _index(last, key)
        while len(node) <= idx:
            node.append({})
        node[idx] = value
    else:
        node[last] = value


#: Largest list index an override may set (``agents.N.name``): the entries before it are
#: filled with defaults, so ``agents.300000.name=x`` would build 300000 agents.
MAX_LIST_INDEX = 999


def _is_index(part: str) -> bool:
    """``part`` is written in the digits 0-9 (``str.isdigit`` also takes ``²``, which
    ``int`` refuses)."""
    return part.isascii() and part.isdigit()


def _index(part: str, key: str) -> int:
    if not _is_index(part):
        raise ConfigError(f"override {quote_value(key)}: {quote_value(part)} must be a list "
                          "index (0, 1, ...)")
    if len(part) > 3 or int(part) > MAX_LIST_INDEX:
        raise ConfigError(f"override {quote_value(key)}: list index {cut_text(part, 20)} is "
                          f"past {MAX_LIST_INDEX}; no list setting holds that many entries")
    return int(part)


def build(cls, data: Any, prefix: str = ""):
    """Build dataclass ``cls`` from a mapping, checking keys and types."""
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {quote_value(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields), key=str)  # keys may be numbers too
    if unknown:
        guess = nearest_keys(cls, str(unknown[0]))
        raise ConfigError(f"{prefix}{cut_text(str(unknown[0]))}: unknown key. Allowed under "
                          f"{where}: "
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
            raise ConfigError(f"{key}: expected a mapping, got {quote_value(value)}")
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
    raise ConfigError(f"{key}: {quote_value(value)} is not one of "
                      + ", ".join(str(a).lower() if isinstance(a, bool) else str(a)
                                  for a in allowed))


def _coerce_list(item_tp, value, key: str, default) -> list:
    """A list; entries that are dataclasses are merged over the default's entry at the same
    index (``agents.1.max_tiles=6`` edits the default second agent)."""
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list, got {quote_value(value)}")
    out = []
    for i, v in enumerate(value):
        base = default[i] if isinstance(default, list) and i < len(default) else None
        if dataclasses.is_dataclass(item_tp):
            merged = dataclasses.asdict(base) if base is not None else {}
            if not isinstance(v, dict):
                raise ConfigError(f"{key}.{i}: expected a mapping, got {quote_value(v)}")
            merged.update(v)
            out.append(build(item_tp, merged, f"{key}.{i}."))
        else:
            out.append(_coerce(item_tp, v, f"{key}.{i}", None))
    return out


#: Every integer setting fits a signed 64-bit integer (torch's seeds and sizes do).
INT_BOUND = 1 << 63


def _coerce_scalar(tp: type, value, key: str):
    """A bool, int, float or str; a YAML bool is never a number, a float never NaN."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if (word := yaml11_bool(value)) is not None:
            return word
        raise ConfigError(f"{key}: expected true or false, got {quote_value(value)}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {quote_value(value)}")
        if not -INT_BOUND <= value < INT_BOUND:
            raise ConfigError(f"{key}: {quote_value(value)} is past a 64-bit integer; give the "
                              "intended number")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return finite(float(value), key)
            except ValueError as e:
                if isinstance(e, ConfigError):
                    raise
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {quote_value(value)}")
        return finite(float(value), key)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected a string, got {quote_value(value)}")
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
