"""``vlcohort ... | head``: a reader that closes stdout early ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys

from vlcohort.cli import EXIT_PIPE_CLOSED, pipe_reader_gone


def test_config_fields_into_a_reader_that_stops_after_one_line():
    """A real pipe, made small (4 KiB) so that ``config --fields`` (~36 KB) is still writing
    when the reader closes: the command meets the closed pipe, says nothing on stderr and
    exits 128 + SIGPIPE."""
    proc = subprocess.Popen([sys.executable, "-m", "vlcohort", "config", "--fields"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pipesize=4096)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert first.startswith(b"method = "), first
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert code == EXIT_PIPE_CLOSED == 141


def test_pipe_reader_gone_asks_the_descriptor():
    """Only a pipe whose reader has left counts: a ``BrokenPipeError`` of any other pipe
    (a worker's, a sandbox's) is not taken for a closed stdout."""
    read, write = os.pipe()
    try:
        assert not pipe_reader_gone(write)
        os.close(read)
        assert pipe_reader_gone(write)
    finally:
        os.close(write)
    assert not pipe_reader_gone(write)  # closed descriptor: not a closed reader
