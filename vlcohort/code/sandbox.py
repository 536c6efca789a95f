"""Run untrusted Python (model-written code and a benchmark's tests) in a sandbox.

Why a separate process in namespaces and not ``exec`` with a "reliability guard": the
programs are written by a model being trained to pass tests; anything the process can
reach it may touch. The isolation is an existing mechanism, not a home-made one:

* **bubblewrap** (Debian's ``bubblewrap``; ``.ci/run`` installs it): new network, pid,
  IPC and UTS namespaces (no network: only a loopback nobody listens on), the host's
  filesystem bound read-only, a private ``/tmp`` and a fresh size-capped tmpfs as the
  working folder, the homes masked (the interpreter's prefix re-bound read-only), a
  cleared environment, ``--die-with-parent`` so the whole pid namespace dies with us.
* **util-linux** ``setpriv`` + ``prlimit`` inside it: when we are root, the program runs as
  an unprivileged uid of its own (RLIMIT_NPROC does not bind root; it binds this uid, so a
  fork bomb stops at ``Limits.processes``), no capabilities, ``no_new_privs``; then
  RLIMIT_CPU / AS / NPROC / FSIZE / NOFILE / CORE=0.
* Where bubblewrap cannot run, util-linux ``unshare`` (net + pid namespaces, same
  ``setpriv`` / ``prlimit`` chain, a host folder as the working folder, no read-only
  root: the unprivileged uid's file permissions are what protect the host's files).
  As root it needs an interpreter that another uid can reach, else it refuses rather
  than run the program as root. :func:`mechanism` says which one is in use. With
  neither, runs are refused (status ``sandbox_error``): code is never run unsandboxed.

Around the process: a new session (its process group is killed at the end and on
timeout), a wall-clock deadline, stdout + stderr read with a cap (past
``Limits.output_bytes`` the group is killed), and a side channel (a pipe on an inherited
fd) for a driver's JSON results (see :mod:`vlcohort.code.checks`).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Sequence

#: Directories hidden behind an empty tmpfs: other users' files, other runs' folders.
MASKED_DIRS = ("/tmp", "/var/tmp", "/root", "/home", "/run")
#: Inside a bubblewrap sandbox: the program's read-only folder and its writable folder.
SRC_DIR, WORK_DIR = "/tmp/src", "/tmp/work"
SIDE_FD_ENV = "VLCOHORT_SIDE_FD"
PASS_FDS_ENV = "VLCOHORT_PASS_FDS"
_SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use; past any of these it is stopped and says why."""

    cpu_s: float = 10.0        # RLIMIT_CPU (soft; SIGKILL one second later)
    wall_s: float = 20.0       # wall clock, then the whole process group is killed
    memory_mb: int = 1024      # RLIMIT_AS
    processes: int = 64        # RLIMIT_NPROC of the run's own uid (+ the pid namespace)
    output_bytes: int = 1_000_000  # stdout+stderr captured; more: killed, status output_limit
    file_mb: int = 16          # RLIMIT_FSIZE
    disk_mb: int = 64          # size of the working folder's tmpfs (bubblewrap)
    open_files: int = 256      # RLIMIT_NOFILE


@dataclass
class RunResult:
    """How one run ended. ``reason`` is one human line, empty when ``status == "ok"``."""

    status: str      # "ok" | "error" (nonzero exit) | "timeout" | "memory" | "output_limit"
                     # | "killed" (signal) | "sandbox_error"
    exit_code: int | None
    stdout: str
    stderr: str
    reason: str
    wall_s: float
    side: str = ""   # what the program wrote on the side channel (fd $VLCOHORT_SIDE_FD)


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=None)
def _backend() -> str:
    """"bwrap" | "unshare" | "none": the first mechanism that runs a trivial program.

    ``VLCOHORT_SANDBOX=unshare`` forces the fallback (to test it where bwrap works).
    """
    forced = os.environ.get("VLCOHORT_SANDBOX", "")
    probe = [sys.executable, "-c", "pass"]
    if forced in ("", "bwrap") and shutil.which("bwrap"):
        tmp = tempfile.gettempdir()
        if _works(_bwrap_prefix(tmp, tmp, Limits()) + probe):
            return "bwrap"
        if _works(_bwrap_prefix(tmp, tmp, Limits(), sized=False) + probe):
            _BWRAP_UNSIZED.add(True)  # bubblewrap < 0.7: no --size
            return "bwrap"
    if forced in ("", "unshare", "bwrap") and shutil.which("unshare") and _works(
            _unshare_prefix() + probe):
        return "unshare"
    return "none"


@functools.lru_cache(maxsize=None)
def _interpreter_reachable() -> bool:
    """Can any uid walk to and run the interpreter (every folder above it o+x)?"""
    for target in {os.path.realpath(sys.executable), os.path.realpath(sys.prefix)}:
        path = target
        while True:
            st = os.stat(path)
            need = 0o001 if os.path.isdir(path) else 0o005
            if st.st_mode & need != need:
                return False
            if path == "/":
                break
            path = os.path.dirname(path)
    return True


def _drops_uid(backend: str) -> bool:
    """Root runs the program as an unprivileged uid (so that RLIMIT_NPROC binds);
    bubblewrap re-binds the interpreter where it is hidden, unshare cannot."""
    return os.geteuid() == 0 and (backend == "bwrap" or _interpreter_reachable())


def mechanism() -> str:
    """Which isolation is in use, in words (for logs and the README's sandbox note)."""
    backend = _backend()
    if os.geteuid() != 0:
        who = "unprivileged: a user namespace"
    elif _drops_uid(backend):
        who = "as root: the program runs as an unprivileged uid of its own (setpriv)"
    else:
        return ("refused: bubblewrap does not work here, and util-linux unshare would run "
                "the program as root (the interpreter is not reachable by another uid), "
                "with the host's files writable; install bubblewrap "
                "(apt-get install -y bubblewrap) or use an interpreter outside /root")
    limits = "rlimits CPU/AS/NPROC/FSIZE/NOFILE/CORE=0 (prlimit)"
    return {
        "bwrap": "bubblewrap: net+pid+ipc+uts namespaces, read-only root, private /tmp, "
                 + ("tmpfs working folder (unsized: bubblewrap < 0.7)" if _BWRAP_UNSIZED
                    else "size-capped tmpfs working folder")
                 + f", cleared environment; {who}; {limits}",
        "unshare": "util-linux unshare (bubblewrap unavailable): net+pid namespaces, "
                   f"host working folder, root NOT read-only; {who}; {limits}",
        "none": "none: neither bubblewrap nor unshare works here; runs are refused "
                "(install bubblewrap: apt-get install -y bubblewrap)",
    }[backend]


# ---------------------------------------------------------------------------------------
# Command lines

def _interpreter_binds() -> list[str]:
    """bwrap args re-binding the interpreter's prefix where a masked dir hides it.

    The intermediate folders are made 0755 so that the unprivileged uid can walk to it
    (e.g. ``/root/.pyenv/versions/3.11.7`` under a masked, mode-0700 ``/root``).
    """
    paths = {os.path.realpath(p) for p in
             (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))}
    args: list[str] = []
    made: set[str] = set()
    for path in sorted(paths):
        mask = next((m for m in MASKED_DIRS if path == m or path.startswith(m + "/")), None)
        if mask is None:
            continue
        parts = path[len(mask):].strip("/").split("/")
        for i in range(1, len(parts)):
            d = mask + "/" + "/".join(parts[:i])
            if d not in made:
                made.add(d)
                args += ["--perms", "0755", "--dir", d]
        args += ["--ro-bind", path, path]
    return args


_BWRAP_UNSIZED: set = set()  # non-empty: this bubblewrap has no --size (older than 0.7)


def _bwrap_prefix(src: str, work: str, limits: Limits, sized: bool = True) -> list[str]:
    """bubblewrap's part of the command line; ``src`` is bound read-only at SRC_DIR.
    ``sized``: the working folder's tmpfs capped at ``disk_mb`` (bubblewrap >= 0.7)."""
    args = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    if os.geteuid() != 0:
        args.insert(1, "--unshare-user")
    for m in MASKED_DIRS:
        if os.path.isdir(m):
            args += ["--perms", "0755", "--tmpfs", m]
    args += _interpreter_binds()
    size = ["--size", str(limits.disk_mb << 20)] if sized else []
    args += ["--ro-bind", src, SRC_DIR, *size, "--perms", "0777", "--tmpfs", WORK_DIR,
             "--chdir", WORK_DIR, "--clearenv"]
    return args


def _unshare_prefix() -> list[str]:
    """util-linux unshare: net + pid namespaces; the pid namespace dies with its init."""
    args = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if os.geteuid() != 0:
        args.insert(1, "--map-root-user")
    return args


_uid_lock = threading.Lock()
_uid_free: list[int] = []
_uid_next = itertools.count()


UID_BASE, UIDS_PER_PROCESS = 200_000, 1000


def uid_range() -> range:
    """The uids this process's runs use (as root): 1000 per host process."""
    start = UID_BASE + (os.getpid() % 20_000) * UIDS_PER_PROCESS
    return range(start, start + UIDS_PER_PROCESS)


def _take_uid() -> int:
    """A uid no other concurrent run of this process uses: RLIMIT_NPROC counts per uid,
    so a fork bomb in one run must not starve its siblings of processes."""
    with _uid_lock:
        if _uid_free:
            return _uid_free.pop()
        return uid_range()[next(_uid_next) % UIDS_PER_PROCESS]


def _give_uid(uid: int) -> None:
    with _uid_lock:
        _uid_free.append(uid)


def _limit_args(limits: Limits, uid: int | None) -> list[str]:
    """setpriv (when root) + prlimit: the last two links before the interpreter."""
    args: list[str] = []
    if uid is not None:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    cpu = max(1, math.ceil(limits.cpu_s))
    mem = limits.memory_mb << 20
    fsize = limits.file_mb << 20
    args += ["prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={mem}:{mem}",
             f"--nproc={limits.processes}:{limits.processes}",
             f"--fsize={fsize}:{fsize}", f"--nofile={limits.open_files}:{limits.open_files}",
             "--core=0:0", "--"]
    return args


def _python_args(script: str) -> list[str]:
    """The same interpreter. ``-s -B`` (+ ``-P`` on 3.11+) rather than ``-I``: -I would also
    ignore PYTHONHASHSEED, and a fixed hash seed makes set / dict-of-str output
    reproducible, which the behavioural vote (equivalence.py) needs. The environment is
    ours entirely (cleared), so nothing else that -I guards against can come in."""
    flags = ["-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    return [sys.executable, *flags, script]


def _env(work: str, side_fd: int | None, pass_fds: Sequence[int] = ()) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
           "OMP_NUM_THREADS": "1"}
    if side_fd is not None:
        env[SIDE_FD_ENV] = str(side_fd)
    if pass_fds:
        env[PASS_FDS_ENV] = ",".join(str(fd) for fd in pass_fds)
    return env


# ---------------------------------------------------------------------------------------
# Running

def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _uid_pids(uid: int) -> list[int]:
    """Host pids whose /proc entry belongs to ``uid`` (the run's own uid)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def _reap(uid: int, patience_s: float = 10.0) -> bool:
    """Kill every process of the run's uid and wait until there is none: the pid
    namespace dies with bwrap, but asynchronously; a run is over only when its
    processes are gone. False when some outlived ``patience_s``."""
    end = time.monotonic() + patience_s
    while True:
        pids = _uid_pids(uid)
        if not pids:
            return True
        if time.monotonic() > end:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


def _pump(proc: subprocess.Popen, side_r: int | None, limits: Limits, deadline: float,
          side_cap: int) -> tuple[bytes, bytes, bytes, str]:
    """Read stdout / stderr / the side channel until EOF, the deadline or a cap.

    Returns (stdout, stderr, side, stop) where stop is "", "timeout", "output" or "side".
    """
    sel = selectors.DefaultSelector()
    bufs = {"out": bytearray(), "err": bytearray(), "side": bytearray()}
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    if side_r is not None:
        sel.register(side_r, selectors.EVENT_READ, "side")
    stop = ""
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stop = "timeout"
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                fd = key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno()
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                bufs[key.data] += chunk
            if len(bufs["out"]) + len(bufs["err"]) > limits.output_bytes:
                stop = "output"
                break
            if len(bufs["side"]) > side_cap:
                stop = "side"
                break
    finally:
        sel.close()
    return bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["side"]), stop


def _last_line(text: str) -> str:
    return next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "")


def _classify(code: int, stderr: str, limits: Limits) -> tuple[str, str]:
    """(status, reason) from an exit code (bwrap / unshare give 128+signal for a signal)."""
    last = _last_line(stderr)
    if code == 0:
        return "ok", ""
    if "MemoryError" in last or last.startswith("MemoryError"):
        return "memory", f"memory: RLIMIT_AS {limits.memory_mb} MB ({last[:200]})"
    if "File too large" in last:  # Python ignores SIGXFSZ: the write raises EFBIG
        return "error", f"file over {limits.file_mb} MB (RLIMIT_FSIZE): {last[:200]}"
    if "No space left on device" in last:
        return "error", f"disk: working folder over {limits.disk_mb} MB: {last[:200]}"
    sig = code - 128 if code > 128 else (-code if code < 0 else 0)
    if sig == signal.SIGXCPU:
        return "timeout", f"timeout: cpu {math.ceil(limits.cpu_s)} s (RLIMIT_CPU)"
    if sig in _SIGNAL_NAMES:
        name = _SIGNAL_NAMES[sig]
        if sig == signal.SIGXFSZ:
            return "killed", f"file over {limits.file_mb} MB (RLIMIT_FSIZE, {name})"
        return "killed", f"killed by {name}" + (f" ({last[:200]})" if last else "")
    if last.startswith(("bwrap:", "unshare:", "setpriv:", "prlimit:")):
        return "sandbox_error", f"sandbox: {last[:300]}"
    return "error", f"exit {code}: {last[:300]}" if last else f"exit {code}"


def run_python(source: str, *, stdin: str = "", limits: Limits = Limits(),
               side_channel: bool = False, side_cap: int = 64 << 20,
               pass_fds: Sequence[int] = ()) -> RunResult:
    """Run ``source`` as a Python program in the sandbox, ``stdin`` on its standard input.

    ``side_channel``: a pipe is passed on the fd named by ``$VLCOHORT_SIDE_FD``; what the
    program writes there comes back in ``RunResult.side`` (at most ``side_cap`` bytes).
    ``pass_fds``: host fds (e.g. pipe ends joining two sandboxes) that the program
    inherits under the same numbers, listed in ``$VLCOHORT_PASS_FDS`` (comma-separated).
    The caller keeps ownership: it closes its copies once the program has started.
    """
    backend = _backend()
    t0 = time.monotonic()
    if backend == "none" or (backend == "unshare" and os.geteuid() == 0
                             and not _drops_uid(backend)):
        return RunResult("sandbox_error", None, "", "", mechanism(), 0.0)
    host = tempfile.mkdtemp(prefix="vlcohort-sbx-")
    src = os.path.join(host, "src")
    os.mkdir(src)
    uid = _take_uid() if _drops_uid(backend) else None
    side_r = side_w = None
    proc = None
    try:
        with open(os.path.join(src, "main.py"), "w", encoding="utf-8") as f:
            f.write(source)
        with open(os.path.join(host, "stdin"), "w", encoding="utf-8") as f:
            f.write(stdin)
        os.chmod(src, 0o755)
        os.chmod(host, 0o755)
        if backend == "bwrap":
            work, script = WORK_DIR, f"{SRC_DIR}/main.py"
            prefix = _bwrap_prefix(src, work, limits, sized=not _BWRAP_UNSIZED)
        else:
            work = os.path.join(host, "work")
            os.mkdir(work)
            if uid is not None:
                os.chown(work, uid, uid)
            script = os.path.join(src, "main.py")
            prefix = _unshare_prefix()
        if side_channel:
            side_r, side_w = os.pipe()
        cmd = prefix + _limit_args(limits, uid) + _python_args(script)
        env = _env(work, side_w, pass_fds)
        if backend == "bwrap":  # bwrap --clearenv: the environment is given by --setenv
            cmd[cmd.index("--clearenv") + 1:cmd.index("--clearenv") + 1] = [
                a for k, v in env.items() for a in ("--setenv", k, v)]
            env = {"PATH": env["PATH"]}
        with open(os.path.join(host, "stdin"), "rb") as fin:
            proc = subprocess.Popen(cmd, stdin=fin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env,
                                    cwd=work if backend != "bwrap" else host,
                                    start_new_session=True,
                                    pass_fds=((side_w,) if side_w is not None else ())
                                    + tuple(pass_fds))
        if side_w is not None:
            os.close(side_w)
            side_w = None
        deadline = t0 + limits.wall_s
        out, err, side, stop = _pump(proc, side_r, limits, deadline, side_cap)
        code = None
        if not stop:  # its pipes are closed; it may still be running (closed them itself)
            try:
                code = proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop = "timeout"
        if stop:
            _kill_group(proc)
            proc.wait()
        _kill_group(proc)  # leftovers of the group (the pid namespace is gone with bwrap)
        if uid is not None and not _reap(uid):
            uid = None  # still busy: never hand this uid to another run
        wall = time.monotonic() - t0
        so = out.decode("utf-8", "replace")
        se = err.decode("utf-8", "replace")
        sd = side.decode("utf-8", "replace")
        if stop == "timeout" and _last_line(se).startswith("MemoryError"):
            # it ran out of memory and was still unwinding (freeing) at the deadline
            return RunResult("memory", None, so, se,
                             f"memory: RLIMIT_AS {limits.memory_mb} MB (MemoryError)", wall, sd)
        if stop == "timeout":
            return RunResult("timeout", None, so, se, f"timeout: wall {limits.wall_s:g} s",
                             wall, sd)
        if stop == "output":
            return RunResult("output_limit", None, so, se,
                             f"output over {limits.output_bytes} bytes", wall, sd)
        if stop == "side":
            return RunResult("output_limit", None, so, se,
                             f"side channel over {side_cap} bytes", wall, sd)
        status, reason = _classify(code, se, limits)
        return RunResult(status, code, so, se, reason, wall, sd)
    except OSError as e:
        if proc is not None:
            _kill_group(proc)
        return RunResult("sandbox_error", None, "", "", f"sandbox: {e}",
                         time.monotonic() - t0)
    finally:
        for fd in (side_r, side_w):
            if fd is not None:
                os.close(fd)
        if proc is not None:
            for s in (proc.stdout, proc.stderr):
                if s:
                    s.close()
        if uid is not None:
            _give_uid(uid)
        shutil.rmtree(host, ignore_errors=True)
