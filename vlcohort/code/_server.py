"""The candidate's side of a check: load the program, then answer calls with plain data.

Not imported by the host: ``pair.py`` sends ``_wire.py``'s text, this file's text and a
JSON payload as the sandboxed program. It runs in the same interpreter as the candidate
program, so nothing here is trusted by anyone: the program may replace any of it. What
the candidate can do to the verdict is therefore only what it can say over its pipe:
plain data (``_wire.encode``) in answer to the harness's requests. The harness, in
another sandbox, decides pass or fail.

Frames (one JSON line each), candidate -> harness:

    {"load": true, "names": {name: "callable" | "module:<name>" | "value"}}
    {"load": false, "error": "SyntaxError: ..."}
    {"id": n, "ok": <value>, "after": [<positional argument after the call> | null]}
    {"id": n, "exc": ["ValueError", "Exception", ...], "msg": "..."}   (the class's MRO)
    {"id": n, "timeout": true} | {"id": n, "bad": "why the value cannot be sent"}

harness -> candidate: {"id": n, "op": "call" | "get", "name": ..., "args": [...],
"kwargs": [[k, v], ...]}.
"""

import builtins
import os
import select
import signal
import sys
import threading
import types


class CallTimeout(BaseException):
    """BaseException, so that a program's own ``except Exception`` does not swallow it."""


def _alarm(signum, frame):
    raise CallTimeout()


def _names(ns):
    """What the program defines, for the harness to decide which names it proxies."""
    out = {}
    for k, v in list(ns.items())[:5000]:
        if type(k) is not str or k.startswith("__"):
            continue
        if isinstance(v, types.ModuleType):
            out[k] = "module:" + str(getattr(v, "__name__", ""))[:200]
        else:
            out[k] = "callable" if callable(v) else "value"
    return out


def _mutable(v):
    return type(v) in (list, dict, set, bytearray)


def _answer(req, ns, case_s):
    """One request's reply frame (every failure of the program is a reply)."""
    rid = req.get("id")
    try:
        target = ns[req["name"]]
    except KeyError:
        return {"id": rid, "exc": ["NameError"], "msg": f"name {req['name']!r} is not defined"}
    try:
        args = [decode(a) for a in req.get("args", [])]
        kwargs = {str(k): decode(v) for k, v in req.get("kwargs", [])}
    except BadFrame as e:
        return {"id": rid, "bad": f"request: {e}"}
    signal.setitimer(signal.ITIMER_REAL, case_s)
    try:
        value = target(*args, **kwargs) if req.get("op") == "call" else target
        reply = {"id": rid, "ok": encode(value)}
        reply["after"] = [encode(a) if _mutable(a) else None for a in args]
        return reply
    except CallTimeout:
        return {"id": rid, "timeout": True}
    except NotPlain as e:
        return {"id": rid, "bad": f"the result is not plain data: {e}"}
    except RecursionError:
        return {"id": rid, "exc": ["RecursionError"], "msg": "maximum recursion depth"}
    except BaseException as e:  # the program's failure is the answer
        return {"id": rid, "exc": [c.__name__ for c in type(e).__mro__][:20],
                "msg": str(e)[:500]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _safe_answer(req, ns, case_s):
    """_answer, past whatever a hostile value raises while it is encoded or described."""
    try:
        return _answer(req, ns, case_s)
    except BaseException as e:  # e.g. a __str__ that raises
        return {"id": req.get("id"), "bad": f"the call's outcome cannot be described "
                                            f"({type(e).__name__})"}


def _exit_when_orphaned(rfd, _exit=os._exit, _poll=select.poll,
                        _end=select.POLLHUP | select.POLLERR | select.POLLNVAL):
    """End this process as soon as the harness closes its end (it has its verdict, or it
    gave up on a call): a program busy in a loop must not run on to its own limits. A
    daemon thread, holding its own references, started before the program loads."""
    p = _poll()
    p.register(rfd, 0)  # hang-up and errors only: requests are the main loop's to read
    while True:
        for _, ev in p.poll():
            if ev & _end:
                _exit(0)


def main(p):
    rfd, wfd = open_pair_fds(b"C")
    threading.Thread(target=_exit_when_orphaned, args=(rfd,), daemon=True).start()
    chan = Channel(rfd, wfd)
    forever = float("inf")
    signal.signal(signal.SIGALRM, _alarm)
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        signal.setitimer(signal.ITIMER_REAL, p["load_s"])
        exec(compile(p["program"], "<program>", "exec"), ns)
        signal.setitimer(signal.ITIMER_REAL, 0)
        load = {"load": True, "names": _names(ns)}
    except CallTimeout:
        load = {"load": False, "error": f"timeout: the program did not load in "
                                        f"{p['load_s']:g} s"}
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        load = {"load": False, "error": f"{type(e).__name__}: {e}"[:500]}
    try:
        chan.send(load, forever)
        if not load["load"]:
            return
        while True:
            req = chan.recv(forever)
            chan.send(_safe_answer(req, ns, p["case_s"]), forever)
    except (PeerGone, PeerLate, BadFrame, OSError):
        pass
    finally:
        sys.stdout.flush()
        os._exit(0)  # the program's leftover threads must not keep the process alive
