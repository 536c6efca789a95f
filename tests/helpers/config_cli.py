"""Running ``vlcohort config`` in the test process and reading its one-line error."""

from __future__ import annotations

from vlcohort.cli import main


def config_error(capsys, *args: str) -> str:
    """``vlcohort config ARGS`` in this process: exit 2, one line on stderr, returned."""
    assert main(["config", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[:2000]
    return lines[0]
