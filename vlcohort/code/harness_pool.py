"""One long-lived harness sandbox per worker, serving many checks: a fork server.

Why: a HumanEval / MBPP check (``pair.run_pair``) starts two sandboxes, one for the
benchmark's tests (the harness) and one for the candidate program. Most of a check's
cost is starting them (bubblewrap's namespaces and mounts, the exec chain, the
interpreter and its imports), so two per check cost about twice one. Here the harness's
sandbox is started once per worker and kept: for each check it **forks a fresh child**
from its warm interpreter, and that child runs the check exactly as ``_harness.main``
does in a sandbox of its own (``_harness.judge``), then exits. The candidate still gets
a fresh sandbox of its own per check (``sandbox.run_python``: new namespaces, its own
uid, its own memory cgroup, killed by pid namespace), as before.

Why one check cannot reach another's verdict:

* The candidate never shares anything with the harness but two pipes made for its check
  (plain-data frames, ``_wire.py``). Its sandbox is gone (every process of it) before
  ``run`` returns, so nothing of check k's candidate is alive in check k + 1.
* The harness child of check k is a fork: whatever its tests or the candidate's answers
  did to its interpreter (modules, ``builtins``, globals, the heap) dies with it. The
  server (the parent) never runs a line of test or candidate code and never reads a
  frame from a candidate: it reads jobs from the host only. Before it reports check k
  done, the child is reaped (killed past the check's wall limit), its process group is
  killed, and ``/tmp/work`` and ``/dev/shm`` are emptied; the host starts check k + 1
  on that server only after that report.
* Each check has its own verdict pipe, passed to the child alone (``SCM_RIGHTS`` over
  the host's control socket, which the child closes first and the candidate never
  holds); the host reads check k's verdict from check k's pipe only.
* A server that fails (dies, does not report in time, a different ``Limits``, too old,
  too many checks: RLIMIT_CPU counts its own CPU across checks) is replaced; the check
  in flight fails as a harness failure, as a harness sandbox's failure did before.

The harness child's limits per check are the old harness sandbox's: its wall clock
(``limits.wall_s + HARNESS_EXTRA_S``, enforced by the server and again by the host),
RLIMIT_CPU / AS per process (a fork starts with no CPU time used), the sandbox's
memory cgroup (one check at a time uses it); its stdout / stderr go to ``/dev/null``.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from dataclasses import replace

from vlcohort.code.pair import (
    GRACE_S,
    HARNESS_EXTRA_S,
    PairRuns,
    _await_starts,
    _run,
    _text,
    script,
)
from vlcohort.code.sandbox import Limits, RunResult, sandbox_name

#: A server is replaced after this many checks (its own CPU time adds up under RLIMIT_CPU).
MAX_CHECKS = 200
#: ... or once it has lived this long (its sandbox's wall limit is a little more).
LIFETIME_S = 600.0
#: How long past a check's harness wall limit the host waits for the server's report.
REPORT_GRACE_S = 3.0
#: How long a server may take to start and say it is ready.
START_S = 15.0
#: The most verdict text read per check (as ``run_python``'s side channel cap).
VERDICT_CAP = 64 << 20


def server_script() -> str:
    """The fork server's sandboxed program: the wire format, the harness, ``serve``."""
    return _text("_wire.py") + "\n" + _text("_harness.py") + "\nserve({})\n"


def _failed(status: str, reason: str, wall: float = 0.0, side: str = "") -> RunResult:
    return RunResult(status, None, "", "", reason, wall, side, sandbox_name())


class HarnessServer:
    """One fork-server harness sandbox; ``run`` is a drop-in for ``pair.run_pair``. One
    check at a time: a server belongs to one worker (``HarnessPool``)."""

    def __init__(self, max_checks: int = MAX_CHECKS, lifetime_s: float = LIFETIME_S):
        self.max_checks, self.lifetime_s = max_checks, lifetime_s
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.out: dict[str, RunResult] = {}
        self.limits: Limits | None = None
        self.started = 0.0
        self.checks = 0
        self.starts = 0  # servers started so far (tests count them)
        self.buf = b""

    # ------------------------------------------------------------------ the server

    def _start(self, limits: Limits) -> RunResult | None:
        """Start a server for ``limits``; None when it is ready, else why not."""
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.out = {}
        self.buf = b""
        self.limits, self.checks, self.started = limits, 0, time.monotonic()
        self.starts += 1
        run_limits = replace(limits, wall_s=self.lifetime_s + 60.0)
        self.thread = threading.Thread(
            target=_run, args=(self.out, "h", server_script(), run_limits, False,
                               (inside.fileno(),)), daemon=True)
        try:
            self.thread.start()
            line = self._line(host, time.monotonic() + START_S, self.thread)
        finally:
            inside.close()  # the server holds its own copy now (or has ended)
        if line is not None and line.get("ready") is True:
            self.sock = host
            return None
        host.close()
        self.thread.join(timeout=START_S)
        run = self.out.get("h")
        if run is not None and run.status == "sandbox_error":
            return run
        why = run.reason if run is not None and run.reason else "it did not say it was ready"
        return _failed(run.status if run is not None and run.status != "ok" else "error",
                       f"the harness server did not start: {why}")

    def _line(self, sock: socket.socket, deadline: float,
              thread: threading.Thread | None = None) -> dict | None:
        """The server's next JSON line before ``deadline``; None when it ended or is late."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sel = selectors.DefaultSelector()
            sel.register(sock, selectors.EVENT_READ)
            try:
                ready = sel.select(timeout=min(left, 0.05 if thread is not None else left))
            finally:
                sel.close()
            if not ready:
                if thread is not None and not thread.is_alive():
                    return None
                continue
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > 1 << 20:
                return None
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            d = json.loads(line)
        except ValueError:
            return None
        return d if isinstance(d, dict) else None

    def close(self) -> None:
        """End the server (it exits when its control socket closes) and wait for it."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.thread is not None:
            self.thread.join(timeout=30.0)
            self.thread = None

    def _fresh_for(self, limits: Limits, budget_s: float) -> bool:
        return (self.sock is not None and self.limits == limits
                and self.checks < self.max_checks and self.thread is not None
                and self.thread.is_alive()
                and time.monotonic() - self.started + budget_s < self.lifetime_s)

    def _gone(self, why: str, wall: float, side: str) -> RunResult:
        """The server ended (or stopped answering) during a check: that check's judge."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        run = None
        if self.thread is not None:
            self.thread.join(timeout=10.0)
            run = self.out.get("h")
            self.thread = None
        if run is not None and run.status not in ("ok",):
            return _failed(run.status, f"harness: {run.reason}", wall, side)
        return _failed("error", f"harness: {why}", wall, side)

    # ------------------------------------------------------------------ a check

    def run(self, program: str, harness_payload: dict, limits: Limits,
            case_s: float) -> PairRuns:
        """As ``pair.run_pair``: the candidate in a fresh sandbox, the tests in a fresh
        child of this server."""
        h_wall = limits.wall_s + HARNESS_EXTRA_S
        if not self._fresh_for(limits, h_wall + REPORT_GRACE_S):
            self.close()
            failure = self._start(limits)
            if failure is not None:
                return PairRuns(failure, failure)
        t0 = time.monotonic()
        payload = {**harness_payload, "case_s": case_s, "grace_s": GRACE_S,
                   "load_s": limits.wall_s + GRACE_S, "wall_s": h_wall}
        server = script("server", {"program": program, "case_s": case_s,
                                   "load_s": max(1.0, limits.wall_s - 1.0)})
        hello_r, hello_w = os.pipe()
        req_r, req_w = os.pipe()      # harness -> candidate
        ans_r, ans_w = os.pipe()      # candidate -> harness
        ver_r, ver_w = os.pipe()      # the harness child's verdict lines
        memfd = os.memfd_create("vlcohort-job", os.MFD_CLOEXEC)
        out: dict[str, RunResult] = {}
        tc = threading.Thread(target=_run, args=(out, "c", server, limits, False,
                                                 (hello_w, req_r, ans_w)), daemon=True)
        self.checks += 1
        sent = False
        try:
            os.write(memfd, json.dumps(payload).encode("utf-8"))
            os.lseek(memfd, 0, os.SEEK_SET)
            try:
                socket.send_fds(self.sock, [b"J"], [memfd, req_w, ans_r, ver_w])
                sent = True
            except OSError:
                pass
        finally:
            for fd in (memfd, req_w, ans_r, ver_w):
                os.close(fd)
        try:
            if sent:
                tc.start()
                _await_starts(hello_r, {b"C": tc})
        finally:
            for fd in (hello_r, hello_w, req_r, ans_w):
                os.close(fd)
        if not sent:
            os.close(ver_r)
            judge = self._gone("the harness server was gone", 0.0, "")
            return PairRuns(judge, _failed("sandbox_error", "not run: " + judge.reason))
        try:
            judge = self._collect(ver_r, t0 + h_wall + REPORT_GRACE_S, t0)
        finally:
            os.close(ver_r)
        tc.join()
        return PairRuns(judge, out["c"])

    def _collect(self, ver_r: int, deadline: float, t0: float) -> RunResult:
        """Check k's verdict (its own pipe, to its end) and the server's report on it."""
        verdict = bytearray()
        report = None
        ver_open = True
        os.set_blocking(ver_r, False)
        sel = selectors.DefaultSelector()
        sel.register(ver_r, selectors.EVENT_READ, "v")
        sel.register(self.sock, selectors.EVENT_READ, "s")
        try:
            while ver_open or report is None:
                if report is None and b"\n" in self.buf:
                    report = self._line(self.sock, deadline)
                    if report is None or report.get("done") != self.checks:
                        report = None  # not this check's report: the server is not sane
                        break
                    sel.unregister(self.sock)
                    # the child is reaped: its verdict pipe ends at once (a moment's grace)
                    deadline = min(deadline, time.monotonic() + 1.0)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in sel.select(timeout=left):
                    if key.data == "v":
                        try:
                            chunk = os.read(ver_r, 1 << 16)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            ver_open = False
                            sel.unregister(ver_r)
                        elif len(verdict) <= VERDICT_CAP:
                            verdict += chunk
                    elif report is None:
                        chunk = self.sock.recv(1 << 16)
                        if not chunk:
                            return self._gone("the harness server ended during the check",
                                              time.monotonic() - t0, _decode(verdict))
                        self.buf += chunk
        finally:
            sel.close()
        side = _decode(verdict)
        wall = time.monotonic() - t0
        if report is None or not isinstance(report.get("status"), str):
            return self._gone("the harness server did not report the check in time",
                              wall, side)
        code = report.get("code")
        return RunResult(report["status"], code if type(code) is int else None, "", "",
                         str(report.get("reason", ""))[:300], wall, side, sandbox_name())


def _decode(b: bytes | bytearray) -> str:
    return bytes(b).decode("utf-8", "replace")


class HarnessPool:
    """A fork-server harness per thread that asks (``check_many``'s workers), all ended
    by ``close`` (or leaving the ``with`` block)."""

    def __init__(self, max_checks: int = MAX_CHECKS, lifetime_s: float = LIFETIME_S):
        self.max_checks, self.lifetime_s = max_checks, lifetime_s
        self._local = threading.local()
        self._all: list[HarnessServer] = []
        self._lock = threading.Lock()

    def server(self) -> HarnessServer:
        s = getattr(self._local, "server", None)
        if s is None:
            s = HarnessServer(self.max_checks, self.lifetime_s)
            self._local.server = s
            with self._lock:
                self._all.append(s)
        return s

    def run(self, program: str, harness_payload: dict, limits: Limits,
            case_s: float) -> PairRuns:
        return self.server().run(program, harness_payload, limits, case_s)

    def close(self) -> None:
        with self._lock:
            servers, self._all = self._all, []
        for s in servers:
            s.close()

    def __enter__(self) -> "HarnessPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
