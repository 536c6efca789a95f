"""Run untrusted Python (model-written code and a benchmark's tests) in a sandbox.

Why a separate process in namespaces and not ``exec`` with a "reliability guard": the
programs are written by a model being trained to pass tests; anything the process can
reach it may touch. The isolation is made of existing mechanisms, not home-made ones.

What is guaranteed (with bubblewrap, ``apt-get install -y bubblewrap``; ``.ci/run``
installs it), and by which mechanism:

* **A minimal view of the host** (bubblewrap mount namespace): read-only ``/usr``, the
  ``/bin /lib /lib64 /sbin`` entries (symlinks recreated as symlinks on merged-usr
  systems), the dynamic loader's files in ``/etc`` and the interpreter's ``bin`` / ``lib``
  folders; every ``site-packages`` / ``dist-packages`` folder is hidden behind an empty
  read-only tmpfs. Nothing of the host's ``/work``, ``/opt``, ``/srv``, ``/root``,
  ``/home``, ``/tmp``, ``/var``, ``/run``, ``/mnt``, ``/media``, ``/sys`` or the rest of
  ``/etc`` is there, so no host path where a unix socket can live. **Programs may import the standard library only.**
  The program's source is a read-only ``/tmp/src``, its working folder ``/tmp/work`` and
  ``/dev/shm`` are fresh tmpfs mounts capped at ``Limits.disk_mb`` each; the root
  itself is read-only; ``/proc`` is the sandbox's own pid namespace's; ``/dev`` is
  bubblewrap's minimal one (null, zero, full, random, urandom, tty, a private devpts).
  Bubblewrap 0.7 or newer is needed (``--size``).
* **No network** (a new network namespace: only a loopback nobody listens on; abstract
  unix sockets are per namespace), new IPC and UTS namespaces, a cleared environment.
* **A syscall filter** (seccomp, built with libseccomp through ``pyseccomp`` once per
  process and handed to ``bwrap --seccomp``): ``unshare``, ``setns``, ``clone`` with a
  namespace flag (``clone3`` answers ENOSYS so the C library falls back to ``clone``),
  the mount family, ``chroot``, the keyring, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring_*``, ``kexec_*``, module loading, ``ptrace`` and
  ``process_vm_*``, ``open_by_handle_at``, ``TIOCSTI`` fail with EPERM. Sockets are
  allow-listed: ``socket`` / ``socketpair`` of every family but AF_UNIX (AF_INET,
  AF_INET6, AF_VSOCK, which the network namespace does not cover, AF_NETLINK, AF_PACKET,
  AF_ALG, ...) fail with EAFNOSUPPORT. Without ``pyseccomp`` or ``libseccomp.so.2``
  runs are refused, never run unfiltered.
* **Memory per run, not per process** (a memory cgroup per run): each run gets a cgroup
  of its own, ``vlcohort-run-<pid>-<n>`` below the cgroup this process is in (cgroup v2
  with the memory controller: ``memory.max``, ``memory.swap.max=0``, ``memory.oom.group``;
  else the v1 memory hierarchy: ``memory.limit_in_bytes`` and ``memsw`` where swap is
  accounted), capped at ``Limits.memory_mb``. The run's first process (``sh``, which then
  execs bubblewrap) writes its pid into ``cgroup.procs`` before anything else of the run
  starts, so every process of it, and every page they fault (anonymous, memfd, the
  ``/tmp/work`` and ``/dev/shm`` tmpfs files, pipe buffers), counts toward one limit.
  Past it the kernel OOM-kills inside the cgroup only (never the trainer), the run is
  stopped whole (cgroup v1 kills one process: the others are killed by pid namespace
  within 0.1 s) and ends as status ``memory``; ``RunResult.memory_peak_mb`` is the
  cgroup's peak. The cgroup is removed once the pid namespace is empty (its tmpfs
  mounts die with it). cgroup v2 without a delegated memory controller: when this process
  is alone in its cgroup it moves into a leaf ``vlcohort-host`` and enables the
  controller for its children. Without a usable memory cgroup runs are refused.
  ``RLIMIT_AS`` stays, per process.
* **An unprivileged uid** when we are root (util-linux ``setpriv``): no capabilities,
  ``no_new_privs``; then ``prlimit``: RLIMIT_CPU / AS / NPROC / FSIZE / NOFILE / CORE=0.
  The uid comes from :data:`UID_RANGE`; each is held, while this process uses it for
  its runs (one run at a time), by an exclusive ``flock`` on ``<uid>.lock`` in a
  root-only folder (:data:`LOCK_DIR`, else a 0700
  folder under the system temp dir), and a uid any live host process has is skipped:
  concurrent runs, in this process or others, never share one (RLIMIT_NPROC counts per
  uid, so a fork bomb cannot starve a sibling run).
* **Processes are ended by pid namespace, never by uid**: bubblewrap's ``--info-fd``
  names the namespace's init; at the end of a run it is SIGKILLed through a pidfd
  (which cannot hit a recycled pid), which kills everything in the namespace, and the
  run ends only when no host process is left in that namespace: the init's pidfd turns
  readable only once the kernel has emptied its namespace, and failing that, no
  ``/proc/<pid>/ns/pid`` names it; nothing outside it is ever signalled (pidfds: Linux
  5.3+).
  ``--die-with-parent`` tears it down if we die.

Around the process: a wall-clock deadline, stdout + stderr read with a cap (past
``Limits.output_bytes`` it is killed), and a side channel (a pipe on an inherited fd)
for a driver's JSON results (see :mod:`vlcohort.code.checks`).

What is not guaranteed: the kernel is shared (a kernel bug reachable through an allowed
syscall escapes); ``/usr`` is readable (host tools, documentation, the C library);
``/proc`` shows the machine's CPU and memory figures and the sandbox's own mount table
(the host paths of what is bound); CPU time is bounded per process by RLIMIT_CPU, not as a
share of the machine; without root (a user namespace) there is no uid drop; memory the
kernel charges to no cgroup (most kernel objects; on cgroup v1 socket buffers other than
TCP's) is outside the run's cap, and so is swap on cgroup v1 without ``memsw`` accounting.

Without bubblewrap code execution is **refused** (status ``sandbox_error``, the reason
names ``apt-get install -y bubblewrap``); so it is without a memory cgroup this process may
make (the reason names root, or ``systemd-run --user --scope -p Delegate=yes``).
``VLCOHORT_SANDBOX=unshare-unsafe`` runs it through util-linux ``unshare`` instead (net +
pid namespaces, the same ``setpriv`` / ``prlimit`` chain, ``setpriv --pdeathsig KILL``),
*with the host's filesystem visible*, no disk limit and no syscall filter (a memory cgroup
only where one can be made); every :class:`RunResult` of such a run says
``sandbox="unshare-UNSAFE"``. :func:`mechanism` describes the mechanism in use,
:func:`sandbox_name` names it in one word.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import glob
import itertools
import json
import math
import os
import select
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

#: Inside a bubblewrap sandbox: the program's read-only folder and its writable folder.
SRC_DIR, WORK_DIR = "/tmp/src", "/tmp/work"
SIDE_FD_ENV = "VLCOHORT_SIDE_FD"
PASS_FDS_ENV = "VLCOHORT_PASS_FDS"
#: The environment switch choosing the mechanism: unset or "bwrap", or UNSAFE_SWITCH.
SANDBOX_ENV = "VLCOHORT_SANDBOX"
UNSAFE_SWITCH = "unshare-unsafe"
INSTALL_BWRAP = "apt-get install -y bubblewrap"
#: The uids sandboxed programs run as (when we are root), one per concurrent run.
UID_RANGE = range(200_000, 200_000 + 65_536)
#: Where the uid locks live (root-only); a 0700 folder under the temp dir if not writable.
LOCK_DIR = "/run/vlcohort-sandbox-uids"
_SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use; past any of these it is stopped and says why."""

    cpu_s: float = 10.0        # RLIMIT_CPU (soft; SIGKILL one second later)
    wall_s: float = 20.0       # wall clock, then the whole pid namespace is killed
    memory_mb: int = 1024      # the run's memory cgroup (all its processes), and RLIMIT_AS
    processes: int = 64        # RLIMIT_NPROC of the run's own uid (+ the pid namespace)
    output_bytes: int = 1_000_000  # stdout+stderr captured; more: killed, status output_limit
    file_mb: int = 16          # RLIMIT_FSIZE
    disk_mb: int = 64          # size of the working folder's and /dev/shm's tmpfs (bubblewrap)
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
    sandbox: str = ""  # sandbox_name() of the mechanism that ran it: "bwrap" | "unshare-UNSAFE"
    #: The most memory the run's cgroup held at once (all its processes, memfd and tmpfs
    #: pages included), in MB; None where the kernel does not say or no cgroup was used.
    memory_peak_mb: float | None = None


# ---------------------------------------------------------------------------------------
# The syscall filter

#: Syscalls a test program never needs: ways out of the namespaces, and kernel attack
#: surface (each refused with EPERM).
REFUSED_SYSCALLS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "ptrace",
    "process_vm_readv", "process_vm_writev", "pidfd_getfd", "open_by_handle_at",
    "quotactl", "swapon", "swapoff", "reboot", "acct", "syslog")
#: clone() flags that make a new namespace (CLONE_NEWNS .. CLONE_NEWNET).
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000,
                         0x20000000, 0x40000000)
_TIOCSTI = 0x5412  # push characters into a terminal's input: refused
#: The one socket family a program may create (socket / socketpair): the rest answer
#: EAFNOSUPPORT, as for a family the kernel lacks. The network namespace does not cover
#: every family (AF_VSOCK reaches the hypervisor; AF_ALG, AF_PACKET, AF_NETLINK are
#: kernel attack surface), so the filter allows one instead of listing the others.
ALLOWED_SOCKET_FAMILY = 1  # AF_UNIX


@functools.lru_cache(maxsize=None)
def _seccomp_program() -> tuple[bytes, str]:
    """(the BPF program, "") or (b"", why it cannot be built). Built once per process.

    Default allow, a list refused: a test program uses threads, subprocesses, files and
    pipes; what it never needs is listed. ``clone3`` passes its flags in memory, which a
    filter cannot read, so it answers ENOSYS and the C library falls back to ``clone``,
    whose flags are checked. Sockets are the exception, an allow-list: ``socket`` and
    ``socketpair`` of any family but AF_UNIX answer EAFNOSUPPORT (the family is compared
    as the whole 64-bit register, so high bits cannot smuggle one past it); where the
    architecture multiplexes them through ``socketcall`` (i386), whose arguments a filter
    cannot read, ``socketcall`` is refused outright."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as e:
        return b"", (f"the seccomp filter cannot be built ({type(e).__name__}: {e}); "
                     "install it: pip install pyseccomp (and apt-get install -y libseccomp2)")
    try:
        filt = sc.SyscallFilter(sc.ALLOW)
        eperm = sc.ERRNO(errno.EPERM)
        for name in REFUSED_SYSCALLS:
            if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:  # unknown on this arch: absent
                filt.add_rule(eperm, name)
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for flag in CLONE_NAMESPACE_FLAGS:
            filt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        filt.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
        no_family = sc.ERRNO(errno.EAFNOSUPPORT)
        for name in ("socket", "socketpair"):
            filt.add_rule(no_family, name, sc.Arg(0, sc.NE, ALLOWED_SOCKET_FAMILY))
        if sc.resolve_syscall(sc.Arch.NATIVE, "socketcall") >= 0:
            filt.add_rule(eperm, "socketcall")
        with tempfile.TemporaryFile() as f:
            filt.export_bpf(f)
            f.seek(0)
            return f.read(), ""
    except (OSError, ValueError) as e:
        return b"", f"the seccomp filter cannot be built with this libseccomp ({e})"


def _seccomp_fd() -> int:
    """A fresh fd holding the BPF program at offset 0 (bubblewrap reads it to the end)."""
    fd = os.memfd_create("vlcohort-seccomp", 0)
    try:
        os.write(fd, _seccomp_program()[0])
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


# ---------------------------------------------------------------------------------------
# The run's memory cgroup

#: Each run's memory cgroup: ``<base>/vlcohort-run-<pid of this process>-<n>``.
CGROUP_PREFIX = "vlcohort-run-"
#: cgroup v2: the leaf this process moves into when it is alone in its own cgroup, so that
#: the memory controller can be enabled below that cgroup (no process may sit beside it).
CGROUP_HOST_LEAF = "vlcohort-host"
#: How a run joins its cgroup before anything of it runs: the first process (``sh``,
#: then bwrap / unshare by ``exec``) writes its own pid into ``cgroup.procs``.
_JOIN_CGROUP = ('echo $$ > "$0" || { echo "vlcohort-sandbox: cannot join the memory cgroup '
                '$0" >&2; exit 125; }; exec "$@"')
_cgroup_serial = itertools.count()
_cgroup_leftovers: set[str] = set()  # run cgroups whose rmdir failed: tried again later


@dataclass(frozen=True)
class _CgroupBase:
    """Where runs' memory cgroups are made, and the hierarchy's version (1 or 2)."""

    path: str
    version: int


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name), encoding="ascii") as f:
        return f.read()


def _write(folder: str, name: str, value: str, optional: bool = False) -> bool:
    """Write a cgroup file; False when it is absent and ``optional`` (else OSError)."""
    try:
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if optional:
            return False
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    return True


def _cgroup_folders() -> dict[int, str]:
    """{1: our cgroup's folder in the v1 memory hierarchy, 2: in the cgroup2 one}, for
    those mounted (mount point + our path relative to the mount's root)."""
    own: dict[int, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                own[2] = path
            elif "memory" in controllers.split(","):
                own[1] = path
    out: dict[int, str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, fs = left.split(), right.split()
            if len(fields) < 5 or len(fs) < 3:
                continue
            version = (2 if fs[0] == "cgroup2" else
                       1 if fs[0] == "cgroup" and "memory" in fs[2].split(",") else 0)
            if not version or version not in own or version in out:
                continue
            root, point, path = fields[3], fields[4], own[version]
            if root != "/" and _under(path, root):
                path = path[len(root):]
            folder = os.path.join(point, path.lstrip("/"))
            if os.path.isdir(folder):
                out[version] = folder.rstrip("/")
    return out


def _v2_base(folder: str) -> tuple[_CgroupBase | None, str]:
    """Our cgroup v2 as the runs' parent: the memory controller enabled for its children.
    cgroup v2 lets no process sit beside child cgroups that have a controller, so when
    this process is alone in its cgroup it moves into a leaf (CGROUP_HOST_LEAF) first."""
    if "memory" not in _read(folder, "cgroup.controllers").split():
        return None, f"cgroup v2 {folder} has no memory controller"
    if "memory" in _read(folder, "cgroup.subtree_control").split():
        return _CgroupBase(folder, 2), ""
    me = str(os.getpid())
    if _read(folder, "cgroup.procs").split() != [me]:
        return None, (f"cgroup v2 {folder} holds other processes too, so its memory "
                      "controller cannot be enabled for sub-cgroups")
    leaf = os.path.join(folder, CGROUP_HOST_LEAF)
    try:
        os.makedirs(leaf, exist_ok=True)
        _write(leaf, "cgroup.procs", me)
    except OSError as e:
        return None, f"cgroup v2 {folder} is not writable here ({e.strerror})"
    try:
        _write(folder, "cgroup.subtree_control", "+memory")
    except OSError as e:
        with contextlib.suppress(OSError):
            _write(folder, "cgroup.procs", me)
            os.rmdir(leaf)
        return None, f"cgroup v2 {folder}: the memory controller cannot be enabled ({e.strerror})"
    return _CgroupBase(folder, 2), ""


@functools.lru_cache(maxsize=None)
def _cgroup_base() -> tuple[_CgroupBase | None, str]:
    """(where each run's memory cgroup is made, "") or (None, why there is none): below
    our own cgroup (where we may write), cgroup v2 with the memory controller first,
    else the v1 memory hierarchy. Checked by making (and removing) one; cgroups of dead
    vlcohort processes found there are removed. Computed once per process."""
    try:
        folders = _cgroup_folders()
    except (OSError, ValueError) as e:
        return None, f"cannot read /proc/self/cgroup or /proc/self/mountinfo ({e})"
    why = []
    for version in (2, 1):
        if version not in folders:
            continue
        folder = folders[version]
        try:
            if version == 2:
                base, err = _v2_base(folder)
            elif os.path.exists(os.path.join(folder, "memory.limit_in_bytes")):
                base, err = _CgroupBase(folder, 1), ""
            else:
                base, err = None, f"cgroup v1 {folder} has no memory.limit_in_bytes"
            if base is not None:
                _sweep_dead_cgroups(base)
                _remove_cgroup(_new_cgroup(base, Limits().memory_mb))
                return base, ""
        except OSError as e:
            err = f"cgroup v{version} {folder}: cannot make a memory cgroup there ({e})"
        why.append(err)
    return None, "; ".join(why) or "no memory cgroup hierarchy is mounted"


def _sweep_dead_cgroups(base: _CgroupBase) -> None:
    """Remove run cgroups that a vlcohort process no longer alive left behind."""
    for name in os.listdir(base.path):
        owner = name[len(CGROUP_PREFIX):].split("-")[0] if name.startswith(CGROUP_PREFIX) else ""
        if owner.isdigit() and not _alive(int(owner)):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base.path, name))


def _new_cgroup(base: _CgroupBase, memory_mb: int) -> str:
    """A fresh cgroup for one run, holding all its processes to ``memory_mb`` together
    (no swap where the kernel accounts it; v2: one OOM kill takes the whole group)."""
    for path in list(_cgroup_leftovers):
        _remove_cgroup(path, 0.0)
    limit = str(memory_mb << 20)
    while True:
        path = os.path.join(base.path, f"{CGROUP_PREFIX}{os.getpid()}-{next(_cgroup_serial)}")
        try:
            os.mkdir(path, 0o755)
            break
        except FileExistsError:
            continue
    try:
        if base.version == 2:
            _write(path, "memory.max", limit)
            _write(path, "memory.swap.max", "0", optional=True)
            _write(path, "memory.oom.group", "1", optional=True)
        else:
            _write(path, "memory.limit_in_bytes", limit)
            if not _write(path, "memory.memsw.limit_in_bytes", limit, optional=True):
                _write(path, "memory.swappiness", "0", optional=True)
    except OSError:
        _remove_cgroup(path, 0.0)
        raise
    return path


def _remove_cgroup(path: str, patience_s: float = 2.0) -> bool:
    """rmdir the run's cgroup (its processes are gone); kept for a later try if busy."""
    end = time.monotonic() + patience_s
    while True:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            if time.monotonic() < end:
                time.sleep(0.01)
                continue
            _cgroup_leftovers.add(path)
            return False
        _cgroup_leftovers.discard(path)
        return True


def _oom_kills(path: str, version: int) -> int:
    """Processes of the run the kernel killed for the cgroup's memory limit so far."""
    try:
        text = _read(path, "memory.events" if version == 2 else "memory.oom_control")
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def _peak_mb(path: str, version: int) -> float | None:
    try:
        return int(_read(path, "memory.peak" if version == 2
                         else "memory.max_usage_in_bytes")) / (1 << 20)
    except (OSError, ValueError):
        return None


def _join_cgroup_args(path: str) -> list[str]:
    """The command prefix that puts the run's first process in its cgroup, then execs."""
    return ["/bin/sh", "-c", _JOIN_CGROUP, os.path.join(path, "cgroup.procs")]


# ---------------------------------------------------------------------------------------
# Which mechanism

def _first_error_line(cmd: list[str], pass_fds: Sequence[int] = ()) -> str | None:
    """None when ``cmd`` runs a trivial program, else its last stderr line (or why not)."""
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=30, pass_fds=tuple(pass_fds))
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if r.returncode == 0:
        return None
    return _last_line(r.stderr.decode("utf-8", "replace")) or f"exit {r.returncode}"


@functools.lru_cache(maxsize=None)
def _backend() -> tuple[str, str]:
    """("bwrap" | "unshare" | "none", why "none"): the mechanism runs use.

    ``VLCOHORT_SANDBOX`` unset or ``bwrap``: bubblewrap, else refused.
    ``unshare-unsafe``: util-linux unshare, weakly isolated, named so in every result.
    """
    forced = os.environ.get(SANDBOX_ENV, "")
    probe = [sys.executable, "-c", "pass"]
    unsafe_hint = (f" (or set {SANDBOX_ENV}={UNSAFE_SWITCH} to run it weakly isolated, "
                   "with the host's files visible)")
    if forced == UNSAFE_SWITCH:
        if not shutil.which("unshare") or not shutil.which("setpriv"):
            return "none", ("refused: util-linux unshare/setpriv not found for "
                            f"{SANDBOX_ENV}={UNSAFE_SWITCH}; install bubblewrap: {INSTALL_BWRAP}")
        if os.geteuid() == 0 and not _interpreter_reachable():
            return "none", ("refused: util-linux unshare would run the program as root (the "
                            "interpreter is not reachable by another uid); install "
                            f"bubblewrap: {INSTALL_BWRAP}")
        err = _first_error_line(_unshare_prefix() + probe)
        if err is not None:
            return "none", f"refused: util-linux unshare does not work here ({err[:200]})"
        return "unshare", ""
    if forced not in ("", "bwrap"):
        return "none", (f"refused: {SANDBOX_ENV}={forced!r} is not a sandbox this project "
                        f"runs code in; unset it (bubblewrap: {INSTALL_BWRAP}), or set "
                        f"{SANDBOX_ENV}={UNSAFE_SWITCH} to run it weakly isolated")
    if not shutil.which("bwrap"):
        return "none", ("refused: bubblewrap (bwrap) not found, and code is never run "
                        f"without it; install it: {INSTALL_BWRAP}" + unsafe_hint)
    if _seccomp_program()[1]:
        return "none", "refused: " + _seccomp_program()[1]
    base, why = _cgroup_base()
    if base is None:
        return "none", ("refused: no memory cgroup to hold a run's processes to "
                        f"Limits.memory_mb together ({why}); run as root, or under a cgroup "
                        "v2 with the memory controller delegated (systemd-run --user "
                        "--scope -p Delegate=yes ...)" + unsafe_hint)
    tmp = tempfile.gettempdir()
    sfd = _seccomp_fd()
    cg = None
    try:
        cg = _new_cgroup(base, Limits().memory_mb)
        err = _first_error_line(_join_cgroup_args(cg) + _bwrap_prefix(tmp, Limits(), sfd)
                                + probe, (sfd,))
    except OSError as e:
        err = f"cannot make a memory cgroup under {base.path} ({e})"
    finally:
        os.close(sfd)
        if cg is not None:
            _remove_cgroup(cg)
    if err is not None:
        needs = ("bubblewrap 0.7 or newer (--size)" if "--size" in err else
                 "namespaces (as root, or unprivileged user namespaces)")
        return "none", (f"refused: bubblewrap does not work here ({err[:200]}); it needs "
                        f"{needs}; install it: {INSTALL_BWRAP}" + unsafe_hint)
    return "bwrap", ""


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


def sandbox_name() -> str:
    """The mechanism in one word, as every RunResult and verdict record carries it:
    ``"bwrap"``, ``"unshare-UNSAFE"`` or ``"none"`` (runs are refused)."""
    return {"bwrap": "bwrap", "unshare": "unshare-UNSAFE", "none": "none"}[_backend()[0]]


def mechanism() -> str:
    """Which isolation is in use, in words (for logs and the README's sandbox note)."""
    backend, why = _backend()
    if backend == "none":
        return "none: " + why
    if os.geteuid() != 0:
        who = "unprivileged: a user namespace"
    else:
        who = (f"as root: the program runs as an unprivileged uid of its own (setpriv; "
               f"{UID_RANGE.start}-{UID_RANGE.stop - 1}, flock-allocated)")
    limits = "rlimits CPU/AS/NPROC/FSIZE/NOFILE/CORE=0 (prlimit)"
    base = _cgroup_base()[0]
    memory = (f"a memory cgroup v{base.version} per run (all its processes, memfd and tmpfs "
              f"included) under {base.path}" if base is not None else
              "no memory cgroup: memory bounded per process only (RLIMIT_AS)")
    if backend == "bwrap":
        return ("bubblewrap: net+pid+ipc+uts namespaces, minimal read-only view (standard "
                "library only, no site-packages), size-capped tmpfs working folder and "
                "/dev/shm, seccomp filter (no new namespaces, mount, ptrace, bpf, ...; "
                "sockets: AF_UNIX only), "
                f"cleared environment, killed by pid namespace; {memory}; {who}; {limits}")
    return ("UNSAFE util-linux unshare (" + f"{SANDBOX_ENV}={UNSAFE_SWITCH}): net+pid "
            "namespaces only, host filesystem visible, host working folder, no disk limit, "
            f"no syscall filter; {memory}; {who}; {limits}")


# ---------------------------------------------------------------------------------------
# The minimal view

#: What the dynamic loader and the C library read in /etc (bound read-only if present).
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
             "/etc/alternatives")
#: Top-level entries that are symlinks into /usr on merged-usr systems, else folders.
ROOT_ENTRIES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _interpreter_roots() -> list[str]:
    """The interpreter's folders outside /usr: ``bin`` and ``lib`` (``lib64``) of its
    prefix (and of a venv's base), and a venv's ``pyvenv.cfg``: not the whole prefix,
    which may hold other things (a conda package cache, sources)."""
    exe_dir = os.path.dirname(os.path.realpath(sys.executable))
    roots = {exe_dir, os.path.dirname(os.path.abspath(sys.executable))}
    for prefix in {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}:
        for sub in ("bin", "lib", "lib64", "pyvenv.cfg"):
            p = os.path.join(prefix, sub)
            if os.path.exists(p):
                roots.add(os.path.realpath(p))
    return sorted(r for r in roots if not _under(r, "/usr") and os.path.exists(r))


def _package_dirs(roots: Sequence[str]) -> list[str]:
    """Every site-packages / dist-packages folder inside the bound roots: hidden."""
    found = set()
    for root in roots:
        for pattern in ("lib*/python*/*-packages", "local/lib*/python*/*-packages",
                        "python*/*-packages", "*-packages"):
            found.update(glob.glob(os.path.join(root, pattern)))
    import site
    found.update(site.getsitepackages() + [site.getusersitepackages()])
    found.update(p for p in sys.path if os.path.basename(p) in _PACKAGE_DIRS)
    out = set()
    for p in found:
        real = os.path.realpath(p)
        if (os.path.basename(real) in _PACKAGE_DIRS and os.path.isdir(real)
                and any(_under(real, r) for r in roots)):
            out.add(real)
    return sorted(out)


@functools.lru_cache(maxsize=None)
def _view_args() -> tuple[str, ...]:
    """bwrap args for the read-only minimal view (computed once per process)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_ENTRIES:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    roots = _interpreter_roots()
    made: set[str] = set()
    for root in roots:  # its parents walkable by the program's uid (e.g. under /root)
        parts = root.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/" + "/".join(parts[:i])
            if d not in made:
                made.add(d)
                args += ["--perms", "0755", "--dir", d]
        args += ["--ro-bind", root, root]
    for hidden in _package_dirs(["/usr"] + [r for r in roots if os.path.isdir(r)]):
        args += ["--perms", "0555", "--tmpfs", hidden]
    return tuple(args)


def _bwrap_prefix(src: str, limits: Limits, seccomp_fd: int,
                  info_fd: int | None = None) -> list[str]:
    """bubblewrap's part of the command line; ``src`` is bound read-only at SRC_DIR."""
    args = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", *_view_args(), "--proc", "/proc",
            "--dev", "/dev"]
    if os.geteuid() != 0:
        args.insert(1, "--unshare-user")
    size = ["--size", str(limits.disk_mb << 20)]
    args += [*size, "--perms", "1777", "--tmpfs", "/dev/shm",
             "--perms", "0755", "--dir", "/tmp", "--ro-bind", src, SRC_DIR,
             *size, "--perms", "0777", "--tmpfs", WORK_DIR,
             "--remount-ro", "/", "--chdir", WORK_DIR, "--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return args + ["--clearenv"]


def _unshare_prefix() -> list[str]:
    """util-linux unshare: net + pid namespaces; the pid namespace dies with its init,
    and unshare itself dies with us (pdeathsig), so its --kill-child fires."""
    args = ["setpriv", "--pdeathsig=KILL", "unshare", "--net", "--pid", "--fork",
            "--kill-child", "--mount-proc"]
    if os.geteuid() != 0:
        args.insert(4, "--map-root-user")
    return args


# ---------------------------------------------------------------------------------------
# The run's uid

_quarantined: set[int] = set()  # uids whose processes outlived their run: never reused


def _private_dir(path: str) -> bool:
    """Make ``path`` a folder only we can enter; False where it is someone else's."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return False
        if st.st_mode & 0o077:
            os.chmod(path, 0o700)
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def lock_dir() -> str:
    """The folder of uid locks: LOCK_DIR, else a private folder under the temp dir.
    Raises OSError naming both when neither can be made private."""
    fallback = os.path.join(tempfile.gettempdir(), f"vlcohort-sandbox-uids-{os.geteuid()}")
    for path in (LOCK_DIR, fallback):
        if _private_dir(path):
            return path
    raise OSError(f"no private folder for the sandbox's uid locks: {LOCK_DIR} and "
                  f"{fallback} are not creatable as 0700 folders of uid {os.geteuid()}")


def _host_uids() -> set[int]:
    """Every uid (real, effective, saved, fs) of a live host process."""
    uids: set[int] = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"Uid:"):
                            uids.update(int(x) for x in line.split()[1:])
                            break
            except (OSError, ValueError):
                pass
    return uids


def take_uid() -> tuple[int, int]:
    """(uid, lock fd): a uid of UID_RANGE no other run on this machine holds (an
    exclusive flock on ``<uid>.lock``, released by closing the fd) and no live host
    process has. Raises OSError when none is free."""
    folder = lock_dir()
    busy = _host_uids() | _quarantined
    n = len(UID_RANGE)
    start = (os.getpid() * 97) % n  # processes start apart: fewer lock attempts
    for i in range(n):
        uid = UID_RANGE[(start + i) % n]
        if uid in busy:
            continue
        fd = os.open(os.path.join(folder, f"{uid}.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return uid, fd
    raise OSError(f"every sandbox uid {UID_RANGE.start}-{UID_RANGE.stop - 1} is in use "
                  f"(locks in {folder})")


def give_uid(lock_fd: int) -> None:
    """Release a uid taken by take_uid (its processes are gone)."""
    os.close(lock_fd)


_uid_pool: list[tuple[int, int]] = []  # (uid, lock fd): taken, free, still locked by us
_uid_pool_lock = threading.Lock()


def _borrow_uid() -> tuple[int, int]:
    """A uid for one run: one this process already holds and no run of it uses, else a
    new one from :func:`take_uid`. Keeping the lock between runs spares each run the scan
    of every host process's uids (the uid was checked when first taken, and no process
    can gain it since: only root can, through this lock)."""
    with _uid_pool_lock:
        if _uid_pool:
            return _uid_pool.pop()
    return take_uid()


def _forget_pool_in_child() -> None:
    """A forked child must not use its parent's uids (both would run programs as one uid,
    and RLIMIT_NPROC counts per uid): it drops its copies of the lock fds (the parent's
    locks stay held by the parent's fds) and takes its own."""
    for _, fd in _uid_pool:
        with contextlib.suppress(OSError):
            os.close(fd)
    _uid_pool.clear()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _return_uid(uid: int, lock_fd: int) -> None:
    """Back to the pool; a quarantined uid (processes outlived the run) is released."""
    if uid in _quarantined:
        give_uid(lock_fd)
        return
    with _uid_pool_lock:
        _uid_pool.append((uid, lock_fd))


def _limit_args(limits: Limits, uid: int | None, pdeathsig: bool = False) -> list[str]:
    """setpriv (when root) + prlimit: the last two links before the interpreter.
    ``pdeathsig``: set again after the uid change (which clears it), so the program dies
    with its parent (unshare, whose --kill-child uses it)."""
    args: list[str] = []
    if uid is not None:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        if pdeathsig:
            args.append("--pdeathsig=KILL")
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
# The pid namespace

@dataclass
class _Namespace:
    """The sandbox's pid namespace: its inode and a pidfd of its init (bwrap's child)."""

    ino: int
    init_fd: int | None


def _read_info(fd: int, deadline: float) -> dict:
    """bubblewrap's ``--info-fd`` JSON (written once the namespaces exist, then closed);
    {} when bubblewrap failed before that or the deadline passed."""
    data = b""
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        sel.close()
    try:
        return json.loads(data) if data else {}
    except ValueError:
        return {}


def _ns_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _attach(info: dict) -> _Namespace | None:
    """The namespace bubblewrap reported; its init is held by a pidfd, checked to be in
    that namespace after the pidfd pins the pid (so it cannot be a recycled pid)."""
    ino, pid = info.get("pid-namespace"), info.get("child-pid")
    if not isinstance(ino, int) or not isinstance(pid, int):
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return _Namespace(ino, None)  # already gone
    if _ns_of(pid) != ino:
        os.close(fd)
        return _Namespace(ino, None)
    return _Namespace(ino, fd)


def _alive(pid: int) -> bool:
    """Not a zombie: a dead process waiting to be reaped (bwrap's init, reparented to
    the host's init) holds no resources and runs nothing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _ns_pids(ino: int) -> list[int]:
    """Live host pids whose pid namespace is ``ino``."""
    return [int(d) for d in os.listdir("/proc")
            if d.isdigit() and _ns_of(int(d)) == ino and _alive(int(d))]


def _kill_in_ns(pid: int, ino: int) -> None:
    """SIGKILL ``pid`` only if it is in namespace ``ino`` (checked through a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if _ns_of(pid) == ino:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def _kill_init(ns: _Namespace | None) -> None:
    """SIGKILL the namespace's init: the kernel then kills every process in it."""
    if ns is not None and ns.init_fd is not None:
        try:
            signal.pidfd_send_signal(ns.init_fd, signal.SIGKILL)
        except OSError:
            pass


def _init_exited(ns: _Namespace, patience_s: float) -> bool:
    """Did the namespace's init exit (its pidfd readable) within ``patience_s``? The
    kernel lets a pid namespace's init finish exiting only after every other process in
    the namespace is gone and reaped (``zap_pid_ns_processes`` in kernel/pid_namespace.c),
    so then the namespace is empty without a look at /proc."""
    if ns.init_fd is None:
        return False
    try:
        return bool(select.select([ns.init_fd], [], [], patience_s)[0])
    except (OSError, ValueError):
        return False


def _emptied(ns: _Namespace, patience_s: float = 10.0) -> bool:
    """Wait until no host process is in the namespace (killing stragglers found in it,
    never anything outside). False when some outlived ``patience_s``."""
    _kill_init(ns)
    if _init_exited(ns, min(patience_s, 2.0)):
        return True
    end = time.monotonic() + patience_s
    while True:
        pids = _ns_pids(ns.ino)
        if not pids:
            return True
        if time.monotonic() > end:
            return False
        for pid in pids:
            _kill_in_ns(pid, ns.ino)
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------
# Running

def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (bwrap / unshare and what shares their group);
    only called before ``proc`` is reaped, so its pid is still ours."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(proc: subprocess.Popen, side_r: int | None, limits: Limits, deadline: float,
          side_cap: int, oom: Callable[[], bool] | None = None
          ) -> tuple[bytes, bytes, bytes, str]:
    """Read stdout / stderr / the side channel until EOF, the deadline or a cap.

    Returns (stdout, stderr, side, stop) where stop is "", "timeout", "output", "side" or
    "memory" (``oom()`` said the kernel killed one of its processes for the cgroup's limit,
    checked at most every 0.1 s: cgroup v1 kills one process, and the others would go on).
    """
    sel = selectors.DefaultSelector()
    bufs = {"out": bytearray(), "err": bytearray(), "side": bytearray()}
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    if side_r is not None:
        sel.register(side_r, selectors.EVENT_READ, "side")
    stop = ""
    next_look = 0.0
    try:
        while sel.get_map():
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                stop = "timeout"
                break
            if oom is not None and now >= next_look:
                next_look = now + 0.1
                if oom():
                    stop = "memory"
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
    if code == 125 and last.startswith("vlcohort-sandbox:"):
        return "sandbox_error", f"sandbox: {last[:300]}"
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


def _result(stop: str, code: int | None, out: bytes, err: bytes, side: bytes,
            limits: Limits, side_cap: int, wall: float, name: str,
            oom_kills: int = 0) -> RunResult:
    so = out.decode("utf-8", "replace")
    se = err.decode("utf-8", "replace")
    sd = side.decode("utf-8", "replace")
    if stop == "memory" or oom_kills:
        # whatever else happened: one of its processes was killed for the run's memory
        return RunResult("memory", code, so, se,
                         f"memory: the run passed {limits.memory_mb} MB, all its processes "
                         "together (memory cgroup; memfd and tmpfs count), and was killed",
                         wall, sd, name)
    if stop == "timeout" and _last_line(se).startswith("MemoryError"):
        # it ran out of memory and was still unwinding (freeing) at the deadline
        return RunResult("memory", None, so, se,
                         f"memory: RLIMIT_AS {limits.memory_mb} MB (MemoryError)", wall, sd,
                         name)
    if stop == "timeout":
        return RunResult("timeout", None, so, se, f"timeout: wall {limits.wall_s:g} s",
                         wall, sd, name)
    if stop == "output":
        return RunResult("output_limit", None, so, se,
                         f"output over {limits.output_bytes} bytes", wall, sd, name)
    if stop == "side":
        return RunResult("output_limit", None, so, se,
                         f"side channel over {side_cap} bytes", wall, sd, name)
    status, reason = _classify(code, se, limits)
    return RunResult(status, code, so, se, reason, wall, sd, name)


def run_python(source: str, *, stdin: str = "", limits: Limits = Limits(),
               side_channel: bool = False, side_cap: int = 64 << 20,
               pass_fds: Sequence[int] = ()) -> RunResult:
    """Run ``source`` as a Python program in the sandbox, ``stdin`` on its standard input.

    ``side_channel``: a pipe is passed on the fd named by ``$VLCOHORT_SIDE_FD``; what the
    program writes there comes back in ``RunResult.side`` (at most ``side_cap`` bytes).
    ``pass_fds``: host fds (e.g. pipe ends joining two sandboxes) that the program
    inherits under the same numbers, listed in ``$VLCOHORT_PASS_FDS`` (comma-separated).
    The caller keeps ownership: it closes its copies once the program has started.
    The run is over (every process of it gone) when this returns.
    """
    backend, why = _backend()
    name = sandbox_name()
    t0 = time.monotonic()
    if backend == "none":
        return RunResult("sandbox_error", None, "", "", why, 0.0, "", name)
    host = tempfile.mkdtemp(prefix="vlcohort-sbx-")
    src = os.path.join(host, "src")
    os.mkdir(src)
    uid = lock = None
    side_r = side_w = info_r = info_w = sfd = None
    proc = None
    ns: _Namespace | None = None
    base = _cgroup_base()[0]  # bwrap runs only with one (_backend); unshare: where there is
    cg = None
    try:
        if os.geteuid() == 0:
            uid, lock = _borrow_uid()
        with open(os.path.join(src, "main.py"), "w", encoding="utf-8") as f:
            f.write(source)
        with open(os.path.join(host, "stdin"), "w", encoding="utf-8") as f:
            f.write(stdin)
        os.chmod(src, 0o755)
        os.chmod(host, 0o755)
        extra: tuple[int, ...] = ()
        if backend == "bwrap":
            work, script = WORK_DIR, f"{SRC_DIR}/main.py"
            sfd = _seccomp_fd()
            info_r, info_w = os.pipe()
            prefix = _bwrap_prefix(src, limits, sfd, info_w)
            extra = (sfd, info_w)
        else:
            work = os.path.join(host, "work")
            os.mkdir(work)
            if uid is not None:
                os.chown(work, uid, uid)
            script = os.path.join(src, "main.py")
            prefix = _unshare_prefix()
        if side_channel:
            side_r, side_w = os.pipe()
        cmd = prefix + _limit_args(limits, uid, backend != "bwrap") + _python_args(script)
        env = _env(work, side_w, pass_fds)
        if backend == "bwrap":  # bwrap --clearenv: the environment is given by --setenv
            at = cmd.index("--clearenv") + 1
            cmd[at:at] = [a for k, v in env.items() for a in ("--setenv", k, v)]
            env = {"PATH": env["PATH"]}
        if base is not None:
            cg = _new_cgroup(base, limits.memory_mb)
            cmd = _join_cgroup_args(cg) + cmd
        with open(os.path.join(host, "stdin"), "rb") as fin:
            proc = subprocess.Popen(cmd, stdin=fin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env,
                                    cwd=work if backend != "bwrap" else host,
                                    start_new_session=True,
                                    pass_fds=((side_w,) if side_w is not None else ())
                                    + tuple(pass_fds) + extra)
        for fd in (side_w, info_w, sfd):
            if fd is not None:
                os.close(fd)
        side_w = info_w = sfd = None
        deadline = t0 + limits.wall_s
        if info_r is not None:
            ns = _attach(_read_info(info_r, deadline))
        oom = None if cg is None else (lambda: _oom_kills(cg, base.version) > 0)
        out, err, side, stop = _pump(proc, side_r, limits, deadline, side_cap, oom)
        code = None
        if not stop:  # its pipes are closed; it may still be running (closed them itself)
            try:
                code = proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop = "timeout"
        if stop:
            _kill_init(ns)
            _kill_group(proc)
        proc.wait()
        if ns is not None and not _emptied(ns):
            _quarantined.add(uid)  # still busy: never hand this uid to another run
        kills = _oom_kills(cg, base.version) if cg is not None else 0
        result = _result(stop, code, out, err, side, limits, side_cap,
                         time.monotonic() - t0, name, kills)
        if cg is not None:
            result.memory_peak_mb = _peak_mb(cg, base.version)
        return result
    except OSError as e:
        if proc is not None and proc.returncode is None:
            _kill_init(ns)
            _kill_group(proc)
            proc.wait()
            if ns is not None:
                _emptied(ns)
        return RunResult("sandbox_error", None, "", "", f"sandbox: {e}",
                         time.monotonic() - t0, "", name)
    finally:
        for fd in (side_r, side_w, info_r, info_w, sfd):
            if fd is not None:
                os.close(fd)
        if ns is not None and ns.init_fd is not None:
            os.close(ns.init_fd)
        if proc is not None:
            for s in (proc.stdout, proc.stderr):
                if s:
                    s.close()
        if lock is not None:
            _return_uid(uid, lock)
        if cg is not None:  # after the namespace is empty: every page of it is freed
            _remove_cgroup(cg)
        shutil.rmtree(host, ignore_errors=True)
