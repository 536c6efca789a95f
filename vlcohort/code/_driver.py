"""The driver of LiveCodeBench's protocols inside the sandbox: one program, all its
cases, one process.

Not imported by the host: checks.py reads this file's text and sends it, with a JSON
payload appended, as the sandboxed program. Standard library only. Each result is one
JSON line on the side channel (fd $VLCOHORT_SIDE_FD), written as soon as it is known,
so a run killed half-way still says which cases it finished:

    {"load": true} | {"load": false, "error": "..."}         once, after the program loads
    {"i": k, "ok": bool, "out": str, "error": str, ...}         per case, in order

Only *outputs* are reported here, never verdicts: the program shares this process and
can write any line it likes, so the host believes one exact sequence of lines
(``checks.parse_side``) and compares each case's output with the expected output, which
never enters the sandbox. Test code that judges (HumanEval, MBPP) runs in a sandbox of
its own instead (``pair.py``).

Kinds (payload["mode"]):
  stdin      per input: fresh __main__ namespace, fd 0 / fd 1 redirected to files
  functional LiveCodeBench call-based: Solution().<entry_point>(*json lines)
"""
import builtins
import json
import os
import signal
import sys
import threading
import time

# LiveCodeBench prepends these imports to every program it runs (stdin and call-based),
# so solutions may use e.g. `math` or `deque` without importing them.
LCB_PRELUDE = "\n".join(
    [f"from {m} import *" for m in (
        "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
        "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json",
        "builtins", "typing")]
    + [f"import {m}" for m in (
        "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
        "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json")]
    + ["sys.setrecursionlimit(50000)"]) + "\n"


class CaseTimeout(BaseException):
    """BaseException, so that a program's own `except Exception` cannot swallow it."""


def _alarm(signum, frame):
    raise CaseTimeout()


def _open_side():
    fd = int(os.environ.pop("VLCOHORT_SIDE_FD"))
    keep = os.dup(fd)  # move it off the advertised number
    os.close(fd)
    return os.fdopen(keep, "w", encoding="utf-8", buffering=1)


def _err(e):
    return f"{type(e).__name__}: {e}"[:500]


def _repr(v, cap):
    """A value's repr for a message, or why there is none (a hostile __repr__)."""
    try:
        return repr(v)[:cap]
    except BaseException as e:
        return f"<a {type(v).__name__} whose repr raised {type(e).__name__}>"


def _jsonable(v):
    """The value as JSON when it is one exactly (str keys, no sets): LiveCodeBench
    compares `prediction == expected` with tuples as lists, which JSON reproduces."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {k: _jsonable(x) for k, x in v.items()}
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def _join_threads(deadline):
    """Competitive programs often run main() in a thread (for a bigger stack)."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(max(0.0, deadline - time.monotonic()))


def _timed(fn, case_s):
    signal.setitimer(signal.ITIMER_REAL, case_s)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_stdin(prelude, code, inputs, case_s, cap, emit):
    saved_in, saved_out = os.dup(0), os.dup(1)
    for i, text in enumerate(inputs):
        with open("case.in", "w", encoding="utf-8") as f:
            f.write(text)
        fin = os.open("case.in", os.O_RDONLY)
        fout = os.open("case.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fin, 0)
        os.dup2(fout, 1)
        os.close(fin)
        os.close(fout)
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        error = ""
        start = time.monotonic()

        def body():
            try:
                g = {"__name__": "__main__", "__builtins__": builtins}
                exec(prelude, g)
                exec(code, g)
            except SystemExit:
                pass
            _join_threads(start + case_s)

        try:
            _timed(body, case_s)
        except CaseTimeout:
            error = f"timeout: case {case_s:g} s"
        except BaseException as e:  # the program's failure is the result
            error = _err(e)
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        with open("case.out", "rb") as f:
            out = f.read(cap).decode("utf-8", "replace")
        emit({"i": i, "ok": not error, "out": out, "error": error})


def main(p):
    side = _open_side()

    def emit(d):
        side.write(json.dumps(d) + "\n")

    signal.signal(signal.SIGALRM, _alarm)
    mode, case_s, cap = p["mode"], p["case_s"], p["cap"]
    # Not "__main__" (as LiveCodeBench's call-based runner): a module's
    # `if __name__ == "__main__":` demo block must not run under the tests.
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        prelude = compile(LCB_PRELUDE, "<prelude>", "exec")
        if mode == "stdin":
            code = compile(p["program"], "<program>", "exec")
        else:
            exec(prelude, ns)
            exec(compile(p["program"], "<program>", "exec"), ns)
            target = ns["Solution"]() if "class Solution" in p["program"] else None
            method = (getattr(target, p["entry_point"]) if target is not None
                      else ns[p["entry_point"]])
    except BaseException as e:
        emit({"load": False, "error": _err(e)})
        return
    emit({"load": True})

    if mode == "stdin":
        _run_stdin(prelude, code, p["inputs"], case_s, cap, emit)
    else:
        for i, text in enumerate(p["inputs"]):
            try:
                args = [json.loads(ln) for ln in text.split("\n") if ln.strip()]
                value = _timed(lambda: method(*args), case_s)
                try:
                    out = json.dumps(_jsonable(value))
                    emit({"i": i, "ok": True, "out": out, "json": True, "error": ""})
                except TypeError:
                    emit({"i": i, "ok": True, "out": _repr(value, cap), "json": False,
                          "error": ""})
            except CaseTimeout:
                emit({"i": i, "ok": False, "out": "", "error": f"timeout: case {case_s:g} s"})
            except BaseException as e:
                emit({"i": i, "ok": False, "out": "", "error": _err(e),
                      "exc": type(e).__name__})
    side.flush()
    sys.stdout.flush()
    os._exit(0)  # the program's leftover threads must not keep the process alive

