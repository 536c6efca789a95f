"""The judging side of a check: the benchmark's tests, with the candidate behind proxies.

Not imported by the host: ``pair.py`` sends ``_wire.py``'s text, this file's text and a
JSON payload as the sandboxed program. It runs in its own sandbox, not the candidate's:
no candidate code ever runs in this interpreter. The candidate's functions are
:class:`Proxy` objects here; a call sends the arguments (plain data) to the candidate's
process (``_server.py``) and gets back plain data, or the name of the exception it
raised, which is raised here as the builtin exception of that name. So an "always equal"
object, a patched ``builtins``, a forged result line or a frame-stack walk cannot reach
the assertions or the reporting: they are in this process, and the verdict goes out on
this process's side channel (fd $VLCOHORT_SIDE_FD), which the candidate never sees.

Modes (payload["mode"]), each case reported as one JSON line on the side channel:

    humaneval  prompt helpers; proxies; test code; check(<entry point>)      -> one case
    mbpp       setup code; proxies; each top-level statement of the asserts  -> a case
    calls      each call expression (literal arguments) -> its value, canonical JSON

    {"load": true} | {"load": false, "error": "...", "kind": "gone" | "timeout" | ""}
    {"i": k, "ok": bool, "error": "...", "kind": "gone" | "timeout" | "bad" | "", "exc": name,
     "out": canonical value (calls)}
"""

import builtins
import json
import os
import signal
import sys
import time


class CandidateFailure(BaseException):
    """The call got no plain-data answer; ``kind``: "gone" (the process ended),
    "timeout", "bad" (garbage, or a value that is not plain data), "" (an argument the
    harness cannot send). BaseException, so that a test's ``except Exception`` (written
    for the candidate's own exceptions) does not turn it into a pass."""

    def __init__(self, kind, why):
        super().__init__(why)
        self.kind = kind


class CandidateError(Exception):
    """A candidate exception with no builtin of its name (a class of its own)."""


def _builtin_exception(names, msg):
    """The first builtin exception class among ``names`` (the candidate exception's MRO),
    built with the candidate's message; CandidateError when none is builtin or
    constructible from a message alone (e.g. UnicodeDecodeError)."""
    for n in names:
        cls = getattr(builtins, n, None) if type(n) is str else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            try:
                return cls(msg)
            except Exception:  # needs other constructor arguments
                continue
    first = names[0] if names and type(names[0]) is str else "Exception"
    return CandidateError(f"{first[:80]}: {msg}")


class Client:
    """Requests to the candidate's process, one at a time, each with a deadline. After
    the first failure to get an answer the candidate is dead to us: every later call
    fails at once with the same reason (a late answer must not be read as the next)."""

    def __init__(self, chan, case_s, grace_s):
        self.chan, self.case_s, self.grace_s = chan, case_s, grace_s
        self.next_id = 0
        self.dead = None

    def _fail(self, kind, why):
        self.dead = CandidateFailure(kind, why)
        raise CandidateFailure(kind, why)

    def request(self, op, name, args=(), kwargs=None):
        if self.dead is not None:
            raise CandidateFailure(self.dead.kind, str(self.dead))
        try:
            enc_args = [encode(a) for a in args]
            enc_kw = [[k, encode(v)] for k, v in (kwargs or {}).items()]
        except NotPlain as e:
            raise CandidateFailure("", f"an argument to {name} is not plain data: {e}") from None
        self.next_id += 1
        req = {"id": self.next_id, "op": op, "name": name, "args": enc_args, "kwargs": enc_kw}
        deadline = time.monotonic() + self.case_s + self.grace_s
        try:
            self.chan.send(req, deadline)
            reply = self.chan.recv(deadline)
        except PeerGone:
            self._fail("gone", f"the program's process ended during {name}()")
        except PeerLate:
            self._fail("timeout", f"timeout: case {self.case_s:g} s")
        except BadFrame as e:
            self._fail("bad", f"the program's answer is not plain data: {e}")
        if reply.get("id") != self.next_id:
            self._fail("bad", "the program's answer does not match the call")
        return self._value(name, args, reply)

    def _value(self, name, args, reply):
        if reply.get("timeout") is True:
            raise CandidateFailure("timeout", f"timeout: case {self.case_s:g} s")
        if "bad" in reply:
            raise CandidateFailure("bad", f"{name}: {str(reply['bad'])[:300]}")
        if "exc" in reply:
            names = reply["exc"] if type(reply["exc"]) is list else []
            raise _builtin_exception(names or ["Exception"], str(reply.get("msg", ""))[:500])
        if "ok" not in reply:
            self._fail("bad", "the program's answer is not a result")
        try:
            value = decode(reply["ok"])
            after = reply.get("after") or []
            for a, new in zip(args, after if type(after) is list else []):
                if new is not None:
                    _mutate(a, decode(new))
        except BadFrame as e:
            self._fail("bad", f"the program's answer is not plain data: {e}")
        return value


def _mutate(arg, new):
    """Reflect the candidate's in-place change of a list / dict / set / bytearray argument
    on the harness's object, as a test that shares the object with the callee sees it."""
    if type(arg) is not type(new):
        return
    if type(arg) in (list, bytearray):
        arg[:] = new
    elif type(arg) in (dict, set):
        arg.clear()
        arg.update(new)


class Proxy:
    """A candidate function (or class) as the tests see it: calling it is a request."""

    __slots__ = ("_client", "_name")

    def __init__(self, client, name):
        self._client, self._name = client, name

    def __call__(self, *args, **kwargs):
        return self._client.request("call", self._name, args, kwargs)

    @property
    def __name__(self):
        return self._name

    def __repr__(self):
        return f"<candidate {self._name}>"


def _bind(ns, client, wanted, names):
    """Bind in the test namespace each name the tests use that only the candidate
    defines: a function or class -> a Proxy; a module -> the same standard module,
    imported here; another value -> its plain-data copy (or nothing, if it has none)."""
    for name in wanted:
        if name in ns or hasattr(builtins, name) or name not in names:
            continue
        kind = str(names[name])
        if kind == "callable":
            ns[name] = Proxy(client, name)
        elif kind.startswith("module:"):
            mod = kind[len("module:"):]
            if mod.split(".")[0] in sys.stdlib_module_names:
                try:
                    import importlib
                    ns[name] = importlib.import_module(mod)
                except Exception:  # left undefined: a NameError in the test
                    pass
        else:
            try:
                ns[name] = client.request("get", name)
            except (CandidateFailure, Exception):
                pass


def _case(i, fn):
    """Run one case; its result line."""
    try:
        out = fn()
        return {"i": i, "ok": True, "error": "", "kind": "", "out": out}
    except CandidateFailure as e:
        return {"i": i, "ok": False, "error": str(e)[:500], "kind": e.kind, "out": None,
                "exc": "timeout" if e.kind == "timeout" else type(e).__name__}
    except BaseException as e:  # the test's failure is the result
        return {"i": i, "ok": False, "error": f"{type(e).__name__}: {e}"[:500], "kind": "",
                "out": None, "exc": type(e).__name__}


def main(p):
    """One check, in a sandbox of its own (``pair.run_pair``)."""
    rfd, wfd = open_pair_fds(b"H")
    side_fd = int(os.environ.pop("VLCOHORT_SIDE_FD"))
    judge(p, rfd, wfd, side_fd)


def judge(p, rfd, wfd, side_fd):
    """Run the check ``p`` against the candidate behind (rfd, wfd); verdict lines on
    ``side_fd``."""

    def emit(d):
        os.write(side_fd, (json.dumps(d) + "\n").encode("utf-8"))

    chan = Channel(rfd, wfd)
    try:
        load = chan.recv(time.monotonic() + p["load_s"])
    except PeerGone:
        load = {"load": False, "kind": "gone", "error": "the program's process ended "
                                                        "before it loaded"}
    except PeerLate:
        load = {"load": False, "kind": "timeout",
                "error": f"timeout: the program did not load in {p['load_s']:g} s"}
    except BadFrame as e:
        load = {"load": False, "kind": "", "error": f"the program's first answer: {e}"}
    if load.get("load") is not True:
        err = str(load.get("error", "no load result"))[:500]
        kind = load.get("kind", "timeout" if err.startswith("timeout") else "")
        emit({"load": False, "error": err, "kind": kind})
        return
    names = load.get("names") if type(load.get("names")) is dict else {}
    emit({"load": True})
    client = Client(chan, p["case_s"], p["grace_s"])
    ns = {"__name__": "__main__", "__builtins__": builtins}
    mode = p["mode"]
    try:
        exec(compile(p["context"], "<prompt>" if mode != "mbpp" else "<setup>", "exec"), ns)
        _bind(ns, client, p["wanted"], names)
        if mode == "humaneval":
            ns[p["entry_point"]] = Proxy(client, p["entry_point"])
    except BaseException as e:  # the benchmark's own code failed here
        for i in range(len(p["cases"])):
            emit({"i": i, "ok": False, "error": f"test setup: {type(e).__name__}: {e}"[:500],
                  "kind": "", "out": None, "exc": type(e).__name__})
        return
    if mode == "humaneval":
        def run_check():
            exec(compile(p["test_code"], "<test>", "exec"), ns)
            ns["check"](ns[p["entry_point"]])
        emit(_case(0, run_check))
    elif mode == "mbpp":
        for i, stmt in enumerate(p["cases"]):
            emit(_case(i, lambda: exec(compile(stmt, "<test>", "exec"), ns)))
    else:
        for i, call in enumerate(p["cases"]):
            emit(_case(i, lambda: json.dumps(canonical(encode(
                eval(compile(call, "<call>", "eval"), ns))), sort_keys=True)))


# ---------------------------------------------------------------------------------------
# The fork server (``harness_pool.py``): one sandbox serving many checks, one child each

#: A child's exit code when it ran out of memory (the host reports status "memory").
MEMORY_EXIT = 86
#: What a check may leave behind in the sandbox's writable folders: emptied after each.
SCRATCH = ("/tmp/work", "/dev/shm")


def _empty(folder):
    """Remove everything below ``folder`` (not the folder itself); errors ignored."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                _empty(path)
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            pass


def _child(p, rfd, wfd, side_fd, ctl_fd):
    """In the forked child: the check, then ``os._exit`` (never back to the server)."""
    code = 1
    try:
        os.close(ctl_fd)  # the host's control socket: the parent's only
        os.setpgid(0, 0)  # what the tests start dies with the check (killpg)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # no output shared with later checks (or its cap)
            os.dup2(null, fd)
        os.close(null)
        judge(p, rfd, wfd, side_fd)
        code = 0
    except MemoryError:
        code = MEMORY_EXIT
    except BaseException:
        code = 1
    os._exit(code)


def _wait_child(pid, wall_s):
    """(status, exit code, reason) of the child ``pid``, killed past ``wall_s``."""
    deadline = time.monotonic() + wall_s
    try:
        pfd = os.pidfd_open(pid)
    except OSError:
        pfd = None
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        if pfd is not None:
            _wait(pfd, select.POLLIN, min(left, 1.0))
        else:
            time.sleep(min(left, 0.002))
    if pfd is not None:
        os.close(pfd)
    try:
        os.killpg(pid, signal.SIGKILL)  # anything the check's tests left running
    except OSError:
        pass
    code = os.waitstatus_to_exitcode(status)
    if timed_out:
        return "timeout", None, f"timeout: wall {wall_s:g} s"
    if code == 0:
        return "ok", 0, ""
    if code == MEMORY_EXIT:
        return "memory", code, "memory: the harness ran out of memory (MemoryError)"
    if code == -signal.SIGXCPU:
        return "timeout", code, "timeout: the harness's cpu time (RLIMIT_CPU)"
    if code < 0:
        return "killed", code, f"the harness was killed by signal {-code}"
    return "error", code, f"the harness ended with exit {code}"


def serve(_p):
    """The fork server: on the control socket (``$VLCOHORT_PASS_FDS``), each job is one
    byte with four fds (a memfd holding the check's JSON payload, the pipe to the
    candidate, the pipe from it, the verdict pipe); a fresh child forked from this
    interpreter (which never runs test or candidate code itself) runs the check and
    exits; once it is reaped (killed past the payload's ``wall_s``) and the scratch
    folders are emptied, one line ``{"done": n, "status": ..., ...}`` goes back."""
    import socket
    ctl = int(os.environ.pop("VLCOHORT_PASS_FDS"))
    os.environ.pop("VLCOHORT_SIDE_FD", None)
    sock = socket.socket(fileno=ctl)
    sock.sendall(b'{"ready": true}\n')
    n = 0
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 16, 4)
        except OSError:
            break
        if not msg:
            break  # the host closed its end: done
        n += 1
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            sock.sendall((json.dumps({"done": n, "status": "error", "code": None,
                                      "reason": "a job without its four fds"}) + "\n").encode())
            continue
        memfd, wfd, rfd, side_fd = fds
        t0 = time.monotonic()
        try:
            with os.fdopen(memfd, "rb") as f:
                p = json.loads(f.read())
            pid = os.fork()
            if pid == 0:
                _child(p, rfd, wfd, side_fd, ctl)
            for fd in (wfd, rfd, side_fd):
                os.close(fd)
            status, code, reason = _wait_child(pid, float(p["wall_s"]))
        except Exception as e:  # a bad payload: this job fails, the server goes on
            for fd in (wfd, rfd, side_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            status, code, reason = "error", None, f"harness server: {type(e).__name__}: {e}"
        for folder in SCRATCH:
            _empty(folder)
        sock.sendall((json.dumps({"done": n, "status": status, "code": code,
                                  "reason": reason[:300],
                                  "wall_s": time.monotonic() - t0}) + "\n").encode())
