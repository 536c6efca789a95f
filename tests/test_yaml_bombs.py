"""YAML that costs far more than it weighs is a one-line error, fast and small, naming the
file (or override) and the key: an alias bomb (billion laughs: nine levels of nine aliases
in under 400 bytes once printed a 351 MB message at 1.7 GB RSS), lists nested past the
depth PyYAML's composer can recurse, a huge integer, a huge list index, a huge file; and
a huge value in a key of the wrong type is quoted cut short, its length said.

The bombs run through the real ``vlcohort config`` (:func:`vlcohort.cli.main`) in a
child process that measures its own wall time and peak RSS around the call, under an
address-space limit so that code without the bounds fails with a MemoryError instead of
eating the machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers.config_cli import config_error as _cli_error
from vlcohort.config import load_config
from vlcohort.typed_yaml import (
    MAX_ALIAS_EXPANSION,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    QUOTE_LIMIT,
    ConfigError,
    load_strict,
    quote_value,
    read_yaml_mapping,
)

#: The child: every import done by one plain ``vlcohort config`` first, then the address
#: space capped 512 MiB above what it holds, then the measured call.
CHILD = r"""
import contextlib, io, json, resource, sys, time
from vlcohort.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    assert main(["config", "run.steps=3"]) == 0
vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, ((vm << 10) + (512 << 20), resource.RLIM_INFINITY))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
err = io.StringIO()
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    code = main(["config", *json.loads(sys.argv[1])])
wall = time.perf_counter() - start
grew_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"code": code, "err": err.getvalue(), "wall": wall, "grew_kb": grew_kb}))
"""


def _measured(*args: str) -> dict:
    """``vlcohort config ARGS`` in a child process: exit code, stderr, wall seconds and
    peak-RSS growth (kB) of the call itself."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(list(args))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _one_line_error(result: dict) -> str:
    assert result["code"] == 2, result["err"][:500]
    assert "Traceback" not in result["err"]
    lines = result["err"].strip().splitlines()
    assert len(lines) == 1, result["err"][:2000]
    return lines[0]


def _bomb_levels(levels: int = 9) -> list[str]:
    """Anchor ``a`` a list of nine strings; each next anchor a list of nine aliases of the
    one before: ``9 ** levels`` strings once written out."""
    names = "abcdefghijklmnop"
    out = ['&a ["x","x","x","x","x","x","x","x","x"]']
    out += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return out


BOMB_FILE = "run:\n  steps:\n" + "".join(f"  - {level}\n" for level in _bomb_levels())
BOMB_OVERRIDE = "run.steps=[" + ",".join(_bomb_levels()) + "]"


# ------------------------------------------------------------------------------ aliases


def test_the_bomb_is_small_and_would_write_out_to_billions():
    assert len(BOMB_FILE) < 400 and len(BOMB_OVERRIDE) < 400
    assert 9 ** 9 > 1000 * MAX_ALIAS_EXPANSION


def test_an_alias_bomb_file_is_a_one_line_error_fast_and_small(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB_FILE)
    result = _measured(str(path))
    line = _one_line_error(result)
    assert line.startswith(f"config error: {path}: line 7: run.steps.4: its aliases (*name) "
                           f"write out to more than {MAX_ALIAS_EXPANSION} characters")
    assert "write the values out" in line
    assert len(result["err"]) < 400
    assert result["wall"] < 2.0, result
    assert result["grew_kb"] < 64 << 10, result


def test_an_alias_bomb_override_is_a_one_line_error_fast_and_small():
    result = _measured(BOMB_OVERRIDE)
    line = _one_line_error(result)
    assert line.startswith("config error: override 'run.steps.4': its aliases (*name) write "
                           f"out to more than {MAX_ALIAS_EXPANSION} characters")
    assert len(result["err"]) < 400
    assert result["wall"] < 2.0, result
    assert result["grew_kb"] < 64 << 10, result


def test_a_merge_bomb_is_refused_too(tmp_path, capsys):
    """``<<: *name`` merges write out the mapping they name, as aliases do."""
    text = "x0: &m0 {" + ", ".join(f"k{i}: {'v' * 50}" for i in range(20)) + "}\n"
    for n in range(1, 8):
        text += f"x{n}: &m{n} [" + ", ".join(f"{{<<: *m{n - 1}}}" for _ in range(8)) + "]\n"
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    assert f"more than {MAX_ALIAS_EXPANSION} characters" in _cli_error(capsys, str(path))


def test_an_alias_inside_the_list_it_names_is_an_error(tmp_path, capsys):
    line = _cli_error(capsys, "run.steps=&a [1, *a]")
    assert line == ("config error: override 'run.steps.1': an alias (*name) inside the list "
                    "or mapping it names; a config value cannot hold itself: write the value "
                    "out")
    path = tmp_path / "loop.yaml"
    path.write_text("run:\n  name: &a {x: *a}\n")
    assert f"{path}: line 2: run.name.x: an alias" in _cli_error(capsys, str(path))


def test_aliases_may_not_nest_past_the_depth_either(capsys):
    deep = "[" * 30 + "1" + "]" * 30
    line = _cli_error(capsys, f"run.steps=[&a {deep}, [[*a]]]")
    assert line.startswith("config error: override 'run.steps.1.0.0': its aliases (*name) nest "
                           f"lists and mappings more than {MAX_YAML_DEPTH} levels deep")


def test_modest_anchors_load_as_if_written_out(tmp_path):
    """A recipe that shares a block through an anchor, alias and merge still loads, the
    same as the one that writes it out."""
    shared = tmp_path / "shared.yaml"
    shared.write_text("x-lr: &lr 2.0e-6\n"
                      "x-agent: &agent {max_tiles: 6, lr: *lr}\n"
                      "agents:\n  - {<<: *agent, name: A, path: 'tiny:qwen2'}\n"
                      "  - {<<: *agent, name: B, path: 'tiny:gemma3'}\n"
                      "optim: {lr: *lr}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("agents:\n  - {max_tiles: 6, lr: 2.0e-6, name: A, path: 'tiny:qwen2'}\n"
                     "  - {max_tiles: 6, lr: 2.0e-6, name: B, path: 'tiny:gemma3'}\n"
                     "optim: {lr: 2.0e-6}\n")
    data = read_yaml_mapping(shared)
    data.pop("x-lr"), data.pop("x-agent")
    assert data == read_yaml_mapping(plain)


# ------------------------------------------------------------------------------- depth


def test_deep_nesting_in_a_file_is_a_one_line_error(tmp_path):
    """100000 ``[`` once reached PyYAML's composer as a RecursionError traceback."""
    path = tmp_path / "deep.yaml"
    path.write_text("run:\n  steps: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = _measured(str(path))
    line = _one_line_error(result)
    assert line == (f"config error: {path}: line 2: run.steps.0.0.0.0.0.0... (33 levels): "
                    f"lists and mappings nested more than {MAX_YAML_DEPTH} levels deep; a "
                    "config nests a few levels: remove the extra brackets or indentation")
    assert result["wall"] < 2.0, result


@pytest.mark.parametrize("value", ["[" * 1000 + "]" * 1000, "{a: " * 1000 + "1" + "}" * 1000],
                         ids=["lists", "mappings"])
def test_deep_nesting_in_an_override_is_a_one_line_error(capsys, value):
    line = _cli_error(capsys, f"run.steps={value}")
    assert line.startswith("config error: override 'run.steps.")
    assert f"nested more than {MAX_YAML_DEPTH} levels deep" in line


def test_nesting_up_to_the_depth_still_loads(capsys):
    """The limit is the limit: 31 levels under ``run.steps`` (32 in all) parse, and the
    error is the type's, not the depth's."""
    value = "[" * (MAX_YAML_DEPTH - 1) + "1" + "]" * (MAX_YAML_DEPTH - 1)
    assert "run.steps: expected an integer" in _cli_error(capsys, f"run.steps={value}")


# ---------------------------------------------------------------------- sizes and numbers


def test_a_file_over_the_limit_is_refused_before_it_is_parsed(tmp_path, capsys):
    path = tmp_path / "data.yaml"
    path.write_text("run:\n  name: " + "x" * MAX_YAML_BYTES + "\n")
    start = time.perf_counter()
    line = _cli_error(capsys, str(path))
    assert time.perf_counter() - start < 2.0
    assert line == (f"config error: {path}: over {MAX_YAML_BYTES} bytes; a recipe is a few "
                    "kB: give the recipe, not a data file (data.path names the data)")


def test_a_huge_override_value_is_refused(capsys):
    line = _cli_error(capsys, "run.name=" + "x" * (MAX_YAML_BYTES + 1))
    assert line.startswith(f"config error: override 'run.name': a value of {MAX_YAML_BYTES + 1} "
                           "characters")


def test_an_integer_python_cannot_read_is_a_one_line_error(capsys, tmp_path):
    """Over 4300 digits ``int()`` raises a ValueError inside PyYAML (a traceback)."""
    line = _cli_error(capsys, "run.steps=" + "9" * 5000)
    assert line == ("config error: override 'run.steps': an integer of 5000 characters; no "
                    "setting takes one of more than 100: give the intended number")
    path = tmp_path / "int.yaml"
    path.write_text("run:\n  seed: " + "9" * 5000 + "\n")
    assert f"{path}: line 2: run.seed: an integer of 5000" in _cli_error(capsys, str(path))


def test_an_integer_past_64_bits_is_refused_with_the_key(capsys):
    line = _cli_error(capsys, "run.steps=" + "9" * 30)
    assert line == (f"config error: run.steps: {'9' * 30} is past a 64-bit integer; give the "
                    "intended number")
    assert load_config(None, [f"run.seed={2 ** 63 - 1}"]).run.seed == 2 ** 63 - 1


def test_a_huge_list_index_is_refused_before_the_list_is_padded(capsys):
    """``agents.300000.name=x`` once built 300000 default agents (two minutes)."""
    start = time.perf_counter()
    line = _cli_error(capsys, "agents.300000.name=x")
    assert time.perf_counter() - start < 2.0
    assert line == ("config error: override 'agents.300000.name': list index 300000 is past "
                    "999; no list setting holds that many entries")
    assert "list index 99999999999999999999... (40 chars)" in _cli_error(
        capsys, f"agents.{'9' * 40}.name=x")


def test_an_index_in_other_digits_is_no_index(capsys):
    """``'²'.isdigit()`` is true and ``int('²')`` a ValueError."""
    assert _cli_error(capsys, "agents.².name=x") == (
        "config error: override 'agents.².name': '²' must be a list index (0, 1, ...)")


def test_keys_of_mixed_types_are_named_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    path.write_text("run: {1: 2, a: 3}\n")
    assert _cli_error(capsys, str(path)).startswith("config error: run.1: unknown key.")


# ----------------------------------------------------------------------- quoted values


def test_a_huge_scalar_in_a_key_of_the_wrong_type_is_quoted_cut_short(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("run:\n  steps: '" + "x" * 500_000 + "'\n")
    result = _measured(str(path))
    line = _one_line_error(result)
    assert line == ("config error: run.steps: expected an integer, got '"
                    + "x" * (QUOTE_LIMIT - 1) + "... (500002 chars)")


@pytest.mark.parametrize("override, start", [
    ("run.name=[" + "x," * 50_000 + "]", "run.name: expected a string, got ['x', 'x', "),
    ("run.steps={" + ", ".join(f"k{i}: v" for i in range(20_000)) + "}",
     "run.steps: expected an integer, got {'k0': 'v', "),
    ("optim.lr=" + "z" * 100_000, "optim.lr: expected a number, got 'zzz"),
    ("run=" + "w" * 100_000, "run: expected a mapping of fields, got 'www"),
    ("run.stepz" + "s" * 100_000 + "=1", "run.stepzsss"),
    ("agents=[" + "v," * 50_000 + "]", "agents.0: expected a mapping, got 'v'"),
], ids=["list", "mapping", "number", "section", "key", "list-entry"])
def test_every_quoted_value_is_cut_short(capsys, override, start):
    line = _cli_error(capsys, override)
    assert line.startswith("config error: " + start)
    assert len(line) < 1000, line[:300]


def test_an_override_without_equals_is_quoted_cut_short(capsys):
    line = _cli_error(capsys, "run.steps", "x" * 100_000)
    assert "x" * QUOTE_LIMIT not in line and len(line) < 600


def test_quote_value_is_repr_until_the_limit():
    loop: list = [1, "x", {"k": [2.5, None, True]}]
    loop.append(loop)
    for value in (loop, "it's", {"a": {}}, [], 3, -1e-05, (1, 2), {1, 2}):
        assert quote_value(value) == repr(value)
    assert quote_value("x" * 1000, limit=5) == "'xxxx... (1002 chars)"
    wide = [["x"] * 9] * 9
    assert quote_value(wide, limit=12) == "[['x', 'x', ... (" + str(len(repr(wide))) + " chars)"


def test_quote_value_stops_counting_a_value_shared_past_reason():
    """Nine levels of nine shared lists: 387 million strings, quoted at once."""
    value: list = ["x"] * 9
    for _ in range(8):
        value = [value] * 9
    start = time.perf_counter()
    quoted = quote_value(value)
    assert time.perf_counter() - start < 10.0
    assert quoted.endswith("... (more than 10000000 chars)") and len(quoted) < 300


def test_a_config_error_past_the_message_limit_keeps_its_head_and_its_fix():
    message = "key: " + "v" * 100_000 + " ; set it to 1"
    text = str(ConfigError(message))
    assert len(text) < 4100
    assert text.startswith("key: vvv") and text.endswith("; set it to 1")
    assert f"({len(message)} chars in all)" in text


def test_pyyaml_errors_quoting_the_text_are_cut_short(capsys):
    line = _cli_error(capsys, "run.steps=*" + "n" * 100_000)
    assert "found undefined alias" in line and len(line) < 600


def test_the_recipes_use_no_more_than_the_limits():
    """Every shipped recipe parses under the limits (none uses anchors today)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    recipes = sorted((root / "configs").glob("*.yaml")) + sorted(
        (root / "vlcohort" / "recipes").glob("*.yaml"))
    assert recipes
    for path in recipes:
        assert path.stat().st_size < MAX_YAML_BYTES
        assert load_strict(path.read_text())  # no YamlLimitError
