"""MATH-Vision's official LaTeX parser, in an environment of its own, behind a worker process.

Why: MATH-Vision's ``evaluation/utils.py`` decides numeric equality by
``round(eval(str(latex2sympy(x))), 2)`` with ``latex2sympy2==1.9.1``, which needs
``antlr4-python3-runtime==4.7.2``; the project's environment carries the 4.13 runtime of
``latex2sympy2_extended`` (math-verify), and the two runtimes cannot share one
environment. The maintained fork accepts text the official parser rejects (``40^{\\circ}``)
and rejects text it accepts (a valid prefix followed by junk), so only the official parser
reproduces the published verdicts.

This module (stdlib only at import time, so the same file runs as the worker inside that
environment):

- ``python -m vlcohort.eval.official.mathvision_env --build`` builds the venv
  (``$VLCOHORT_MATHV_VENV``, default ``~/.cache/vlcohort/venv-mathv-official``) with exactly
  :data:`PINS`; a stamp of the pins makes a second call a no-op;
- :class:`OfficialWorker` runs this file with ``--worker`` in that venv and keeps it for a
  whole scoring run: JSON lines over stdin/stdout, one request carrying a batch of strings,
  one answer line per string. Instead of screening the input, the worker evaluates over
  ``math``'s names only (no builtins that reach the system; no attribute access, so no
  walk from a literal to ``object.__subclasses__``), under ``RLIMIT_AS`` and a
  per-string CPU-time limit (a profiling timer, then ``RLIMIT_CPU``); the client adds a
  wall timeout per string and kills and restarts a worker that dies or hangs. Any failure, a timeout
  included, is an error result: the official code's "exception -> not equal".
"""

from __future__ import annotations

import json
import os
import sys

#: The official environment: MATH-V's evaluation imports ``latex2sympy2`` (1.9.1 is the
#: release on PyPI its README points to), which needs the 4.7.2 ANTLR runtime; sympy 1.12
#: is the release that latex2sympy2 1.9.1 resolved to when the outputs were scored.
PINS = ("latex2sympy2==1.9.1", "antlr4-python3-runtime==4.7.2", "sympy==1.12")
#: Bump when the worker protocol changes, so an old stamp forces a rebuild.
WORKER_PROTOCOL = 1
DEFAULT_VENV = os.path.join("~", ".cache", "vlcohort", "venv-mathv-official")
BUILD_COMMAND = "python -m vlcohort.eval.official.mathvision_env --build"
STAMP_NAME = ".vlcohort-stamp"


def venv_path() -> str:
    return os.path.expanduser(os.environ.get("VLCOHORT_MATHV_VENV") or DEFAULT_VENV)


def venv_python(venv: str | None = None) -> str:
    return os.path.join(venv or venv_path(), "bin", "python")


def _want_stamp() -> str:
    return " ".join(PINS) + f" protocol={WORKER_PROTOCOL}"


def env_status(venv: str | None = None) -> tuple[bool, str]:
    """(ready, a sentence): ready when the venv exists with a stamp of :data:`PINS`."""
    venv = venv or venv_path()
    stamp = os.path.join(venv, STAMP_NAME)
    if not os.path.isfile(venv_python(venv)) or not os.path.isfile(stamp):
        return False, (f"the official MATH-Vision parser environment is not built at {venv}; "
                       f"build it with: {BUILD_COMMAND}  (about 30 s, ~110 MB; "
                       f"$VLCOHORT_MATHV_VENV chooses the folder)")
    with open(stamp) as fh:
        have = fh.read().strip()
    if have != _want_stamp():
        return False, (f"the official MATH-Vision parser environment at {venv} was built for "
                       f"{have!r}, not {_want_stamp()!r}; rebuild it with: {BUILD_COMMAND}")
    return True, f"official MATH-Vision parser environment at {venv} ({' '.join(PINS)})"


def build(venv: str | None = None, force: bool = False) -> str:
    """Build the venv with :data:`PINS` (no-op when its stamp matches); returns its path.
    The stamp is written last, so an interrupted build is rebuilt from scratch."""
    import shutil
    import subprocess

    venv = venv or venv_path()
    if not force and env_status(venv)[0]:
        print(f"mathvision_env: up to date at {venv}", file=sys.stderr)
        return venv
    print(f"mathvision_env: building {venv} with {' '.join(PINS)}", file=sys.stderr)
    shutil.rmtree(venv, ignore_errors=True)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = venv_python(venv)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
                   check=True)
    # the import the worker makes, and the value rule on a string the fork rejects
    probe = ("from latex2sympy2 import latex2sympy; "
             "print(latex2sympy(r'8+2\\sqrt{2}}.theansweris:8+2\\sqrt{2'))")
    out = subprocess.run([py, "-I", "-c", probe], check=True, capture_output=True, text=True)
    print(f"mathvision_env: probe -> {out.stdout.strip()}", file=sys.stderr)
    with open(os.path.join(venv, STAMP_NAME), "w") as fh:
        fh.write(_want_stamp() + "\n")
    return venv


# --------------------------------------------------------------------------- the worker
# (runs inside the venv: stdlib and latex2sympy2 only)


class _Timeout(Exception):
    pass


def _value_key(v) -> str | None:
    """An equality key that agrees with Python's ``==`` on what ``round(x, 2)`` returns
    (int or float): ints and integral floats by exact hex (no int-to-decimal limit), other
    floats by ``float.hex``; NaN equals nothing (None)."""
    import math

    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return "i" + format(v, "x")
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isfinite(v) and v == int(v):
            return "i" + format(int(v), "x")
        return "f" + v.hex()
    return "r" + type(v).__name__ + ":" + repr(v)


def _namespace() -> dict:
    """What the evaluated text may name: ``math``'s names (the official module does
    ``from math import *``) and a few pure builtins."""
    import builtins
    import math

    ns = {k: getattr(math, k) for k in dir(math) if not k.startswith("_")}
    ns["__builtins__"] = {k: getattr(builtins, k) for k in (
        "abs", "round", "pow", "min", "max", "sum", "int", "float", "complex", "bool",
        "divmod", "True", "False", "None")}
    return ns


def _checked(text: str):
    """``text`` compiled as one expression, refused when it holds what no printed sympy
    expression holds and every sandbox escape needs: attribute or subscript access,
    underscore names, lambdas, comprehensions, assignment expressions."""
    import ast

    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Lambda, ast.NamedExpr,
                             ast.comprehension, ast.Starred, ast.keyword)) or (
                isinstance(node, ast.Name) and node.id.startswith("_")):
            raise ValueError(f"refused to evaluate {text[:80]!r} ({type(node).__name__})")
    return compile(tree, "<latex2sympy>", "eval")


def _serve(cpu_s: float, mem_mb: int) -> None:
    """Answer requests ``{"items": [str, ...]}`` with one line per item:
    ``{"ok": true, "str": str(value), "key": equality key}`` or ``{"ok": false, "err": ...}``."""
    import resource
    import signal
    import time

    if mem_mb > 0:
        lim = mem_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # the official Python (3.8) had no such limit
    # keep the protocol channel private: anything printed by the parser goes to stderr
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def on_limit(signum, frame):
        raise _Timeout(f"over {cpu_s} s of CPU time")

    # CPU time, not wall time, so that a verdict does not depend on the machine's load
    signal.signal(signal.SIGPROF, on_limit)
    from latex2sympy2 import latex2sympy  # only inside the official venv

    base = _namespace()
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    out.write(json.dumps({"ready": True, "python": sys.version.split()[0]}) + "\n")
    for line in sys.stdin:
        for s in json.loads(line)["items"]:
            used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
            soft = int(used + cpu_s) + 2
            if hard == resource.RLIM_INFINITY or soft < hard:
                # past this the kernel ends the process (a C-level loop the alarm cannot stop)
                resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
            signal.setitimer(signal.ITIMER_PROF, cpu_s)
            t0 = time.perf_counter()
            try:
                v = round(eval(_checked(str(latex2sympy(s))), dict(base)), 2)
                res = {"ok": True, "str": str(v), "key": _value_key(v)}
            except BaseException as e:  # the official code catches everything
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                res = {"ok": False, "err": f"{type(e).__name__}: {e}"[:300]}
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            res["s"] = round(time.perf_counter() - t0, 4)
            out.write(json.dumps(res) + "\n")


# --------------------------------------------------------------------------- the client


class WorkerError(RuntimeError):
    pass


class OfficialWorker:
    """A persistent worker in the official venv: :meth:`values` maps strings to results
    (cached: a scoring run asks for the same gold strings again and again).

    ``timeout_s`` bounds one string's CPU time (the worker's profiling timer stops Python
    code; past 2 s more, ``RLIMIT_CPU`` ends a C-level computation by killing the worker);
    ``wall_s`` bounds the wait for one answer. A string past a limit, or one that kills
    the worker, gets ``{"ok": False, "err": ...}``; a dead or silent worker is killed and
    restarted for the rest of the batch."""

    def __init__(self, venv: str | None = None, timeout_s: float | None = None,
                 mem_mb: int | None = None, batch: int = 256, cache_size: int = 200_000,
                 wall_s: float | None = None):
        self.venv = venv or venv_path()
        self.timeout_s = float(timeout_s if timeout_s is not None
                               else os.environ.get("VLCOHORT_MATHV_TIMEOUT", 10.0))
        self.mem_mb = int(mem_mb if mem_mb is not None
                          else os.environ.get("VLCOHORT_MATHV_MEM_MB", 4096))
        # the last resort against a worker that neither answers nor burns CPU (its own CPU
        # limits end runaway computations); generous, so machine load cannot decide
        self.wall_s = float(wall_s) if wall_s else max(3 * self.timeout_s, self.timeout_s + 30.0)
        self.batch, self.cache_size = batch, cache_size
        self.cache: dict[str, dict] = {}
        self.proc = None
        self._buf = b""
        self._err = None
        self.restarts = 0
        self.timeouts = 0

    # -- process management
    def start(self) -> None:
        import subprocess
        import tempfile

        ok, msg = env_status(self.venv)
        if not ok:
            raise WorkerError(msg)
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [venv_python(self.venv), "-I", os.path.abspath(__file__), "--worker",
             "--cpu-s", str(self.timeout_s), "--mem-mb", str(self.mem_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self._buf = b""
        hello = self._readline(max(60.0, self.timeout_s))
        if hello is None or not json.loads(hello).get("ready"):
            tail = self._stderr_tail()
            self.close()
            raise WorkerError(f"the MATH-Vision official worker in {self.venv} did not start"
                              f" ({tail or 'no output'}); rebuild with: {BUILD_COMMAND}")

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except Exception:  # already gone
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except Exception:
                    pass
        self.proc = None
        if self._err is not None:
            self._err.close()
            self._err = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _stderr_tail(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read()[-400:].decode("utf-8", "replace").strip()

    def _readline(self, timeout: float) -> bytes | None:
        """One line from the worker within ``timeout`` seconds; None on timeout or EOF."""
        import select
        import time

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    # -- requests
    def values(self, strings) -> list[dict]:
        """The official ``round(eval(str(latex2sympy(s))), 2)`` of each string, as
        ``{"ok", "str", "key"}`` or ``{"ok": False, "err"}``."""
        strings = [str(s) for s in strings]
        todo = list(dict.fromkeys(s for s in strings if s not in self.cache))
        for i in range(0, len(todo), self.batch):
            self._run(todo[i:i + self.batch])
        return [self.cache[s] for s in strings]

    def value(self, s: str) -> dict:
        return self.values([s])[0]

    def _run(self, items: list[str]) -> None:
        pending = list(items)
        while pending:
            if self.proc is None or self.proc.poll() is not None:
                self.close()
                self.start()
            self.proc.stdin.write((json.dumps({"items": pending}) + "\n").encode())
            self.proc.stdin.flush()
            done = 0
            for s in pending:
                line = self._readline(self.wall_s)
                if line is None:
                    died = self.proc.poll() is not None
                    reason = (f"worker died (exit {self.proc.returncode}): {self._stderr_tail()[-200:]}"
                              if died else f"no answer within {self.wall_s} s (wall)")
                    self.timeouts += not died
                    self._store(s, {"ok": False, "err": reason})
                    done += 1
                    self.close()
                    self.restarts += 1
                    break
                self._store(s, json.loads(line))
                done += 1
            pending = pending[done:]

    def _store(self, s: str, res: dict) -> None:
        if len(self.cache) >= self.cache_size:
            self.cache.clear()
        self.cache[s] = res


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vlcohort.eval.official.mathvision_env",
                                 description="MATH-Vision's official LaTeX parser environment")
    ap.add_argument("--build", action="store_true", help="build the venv (no-op when up to date)")
    ap.add_argument("--force", action="store_true", help="with --build: rebuild anyway")
    ap.add_argument("--status", action="store_true", help="say whether the venv is ready")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-s", type=float, default=10.0, help=argparse.SUPPRESS)
    ap.add_argument("--mem-mb", type=int, default=4096, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _serve(args.cpu_s, args.mem_mb)
        return 0
    if args.build:
        build(force=args.force)
    ok, msg = env_status()
    print(msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
