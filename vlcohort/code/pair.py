"""Two sandboxes per check: the candidate program in one, the benchmark's tests in another.

Why two: a program that shares an interpreter with the code judging it can reach that
code (the frame stack, ``gc``, ``builtins``, the result pipe's fd, a nonce in a global)
and write its own verdict. Here the judging process (``_harness.py``) never runs a line
of candidate code; it calls the candidate's functions through proxies that send the
arguments to the candidate's process (``_server.py``) and get back plain data
(``_wire.py``) or the name of an exception. The verdict goes out on the harness's side
channel, which the candidate's process does not hold.

Wiring: the host makes three pipes: harness -> candidate (requests), candidate ->
harness (answers), and a start pipe on which each process writes one byte as it starts.
Both sandboxes start together (two threads, each ``sandbox.run_python``, ``pass_fds``);
once both have started (or ended), the host closes its own copies, so that each side
sees end-of-file as soon as the other's process ends, and neither waits past it.
"""

from __future__ import annotations

import functools
import json
import os
import select
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from vlcohort.code.sandbox import Limits, RunResult, run_python

#: How long past the per-call limit the harness waits for an answer (the candidate
#: enforces the limit itself with a timer; this covers a candidate that disables it).
GRACE_S = 1.0
#: The harness's wall clock beyond the candidate's: time to report after it is killed.
HARNESS_EXTRA_S = 5.0


@functools.lru_cache(maxsize=None)
def _text(name: str) -> str:
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


def script(role: str, payload: dict) -> str:
    """The sandboxed program of ``role`` ("harness" | "server"): the wire format's code,
    the role's code, and its payload as a JSON string literal."""
    return (_text("_wire.py") + "\n" + _text(f"_{role}.py")
            + f"\nmain(json.loads({json.dumps(payload)!r}))\n")


@dataclass
class PairRuns:
    harness: RunResult
    candidate: RunResult


def _run(into: dict, key: str, source: str, limits: Limits, side: bool,
         fds: tuple[int, ...]) -> None:
    try:
        into[key] = run_python(source, limits=limits, side_channel=side, pass_fds=fds)
    except BaseException as e:  # a thread must hand back a result
        into[key] = RunResult("sandbox_error", None, "", "", f"sandbox: {e}", 0.0)


def _await_starts(hello_r: int, threads: dict[bytes, threading.Thread]) -> None:
    """Until each process has written its start byte, or its run has ended (it failed to
    start): only then may the host close the pipe ends the process inherits."""
    left = dict(threads)
    poll = select.poll()  # not select(): a host fd may be numbered above 1024
    poll.register(hello_r, select.POLLIN)
    while left:
        for tag, t in list(left.items()):
            if not t.is_alive():
                del left[tag]
        if not left:
            return
        if poll.poll(50):
            for b in os.read(hello_r, 16):
                left.pop(bytes([b]), None)


def run_pair(program: str, harness_payload: dict, limits: Limits,
             case_s: float) -> PairRuns:
    """Run ``program`` behind the harness described by ``harness_payload`` (mode, test
    code, cases, ...); both runs, the harness's verdict lines in its ``side``."""
    hello_r, hello_w = os.pipe()
    req_r, req_w = os.pipe()      # harness -> candidate
    ans_r, ans_w = os.pipe()      # candidate -> harness
    copies = [hello_w, req_r, req_w, ans_r, ans_w]
    server = script("server", {"program": program, "case_s": case_s,
                               "load_s": max(1.0, limits.wall_s - 1.0)})
    harness = script("harness", {**harness_payload, "case_s": case_s, "grace_s": GRACE_S,
                                 "load_s": limits.wall_s + GRACE_S})
    h_limits = replace(limits, wall_s=limits.wall_s + HARNESS_EXTRA_S)
    out: dict[str, RunResult] = {}
    th = threading.Thread(target=_run, args=(out, "h", harness, h_limits, True,
                                             (hello_w, ans_r, req_w)), daemon=True)
    tc = threading.Thread(target=_run, args=(out, "c", server, limits, False,
                                             (hello_w, req_r, ans_w)), daemon=True)
    try:
        th.start()
        tc.start()
        _await_starts(hello_r, {b"H": th, b"C": tc})
    finally:
        for fd in copies + [hello_r]:
            os.close(fd)
    th.join()
    tc.join()
    return PairRuns(out["h"], out["c"])
