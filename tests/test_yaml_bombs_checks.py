"""Huge values quoted by the checks after the types (``vlcohort/config_checks.py``) and by
a recipe's ``base:`` (``vlcohort/config.py``) are cut short like the type errors' (see
``tests/test_yaml_bombs.py``), and a huge or non-ASCII agent index is an error, not a
traceback. Through the real ``vlcohort config``."""

from __future__ import annotations

import pytest

from tests.helpers.config_cli import config_error as _cli_error
from vlcohort.typed_yaml import QUOTE_LIMIT


@pytest.mark.parametrize("override, start", [
    ("grpo.is_mode=" + "y" * 100_000, "grpo.is_mode: 'yyy"),
    ("agents.0.device=" + "d" * 100_000, "agents.0.device: 'ddd"),
    ("arms=[" + "a" * 100_000 + "]", "arms: 'aaa"),
    ("monitor.stop_on=[" + "s" * 100_000 + "]", "monitor.stop_on.0: 'sss"),
    ("agents.0.name=" + "n/" * 50_000, "agents.0.name: 'n/n/"),
], ids=["choice", "device", "arm", "stop_on", "name"])
def test_a_value_the_checks_refuse_is_quoted_cut_short(capsys, override, start):
    line = _cli_error(capsys, override)
    assert line.startswith("config error: " + start)
    assert "... (100002 chars)" in line and len(line) < 600


@pytest.mark.parametrize("solver", ["9" * 5000, "²"], ids=["5000-digits", "superscript"])
def test_a_self_play_agent_index_that_int_refuses_is_an_error(capsys, solver):
    """``str.isdigit`` takes both; ``int`` refuses both (a ValueError traceback)."""
    line = _cli_error(capsys, "configs/self_play_tiny.yaml", f"self_play.solver='{solver}'")
    assert line.startswith(f"config error: self_play.solver: {repr(solver)[:QUOTE_LIMIT]}")
    assert "names no agent" in line and len(line) < 600


def test_a_huge_base_is_named_cut_short(tmp_path, capsys):
    """A ``base:`` of 5000 characters is a name the system refuses (ENAMETOOLONG from
    ``is_file``, once a traceback)."""
    path = tmp_path / "top.yaml"
    path.write_text("base: " + "b" * 5000 + "\n")
    line = _cli_error(capsys, str(path))
    assert line.startswith(f"config error: {path}: base: {'b' * QUOTE_LIMIT}... (5000 chars) "
                           "not found (looked for ")
    assert len(line) < 1000
    path.write_text("base: [" + "b," * 50_000 + "]\n")
    line = _cli_error(capsys, str(path))
    assert line.startswith(f"config error: {path}: base: must be a path to another recipe, got "
                           "['b', 'b'")
    assert len(line) < 600
