"""The sandbox against hostile programs: each is contained, says why, and the machine is
unharmed afterwards (no stray processes, no files outside its folder, no connection).

Runs for real through bubblewrap (``apt-get install -y bubblewrap``; ``.ci/run``
installs it); where bubblewrap does not work these tests skip with that line
(``VLCOHORT_REQUIRE_SANDBOX=1``: fail). The refusals without bubblewrap are in
``test_sandbox_refusal.py``, the attacks on the sandbox in ``test_sandbox_attacks.py``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

import pytest

from vlcohort.code import sandbox
from vlcohort.code.sandbox import Limits, run_python

pytestmark = pytest.mark.sandbox
QUICK = Limits(cpu_s=3, wall_s=6)
PROJECT = Path(__file__).resolve().parents[1]


def _unlocked_sandbox_processes() -> list[int]:
    """Host pids running under a sandbox uid that no run holds (its lock is free): a
    program that outlived its run. Other processes' live runs hold their uids' locks."""
    lock_dir = sandbox.lock_dir()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                uid = int(next(ln for ln in f if ln.startswith("Uid:")).split()[1])
            state = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0]
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        if uid not in sandbox.UID_RANGE or state == "Z":
            continue
        fd = os.open(os.path.join(lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            pids.append(int(d))  # nobody holds it
        except OSError:
            pass
        finally:
            os.close(fd)
    return pids


def _descendants() -> list[int]:
    """Live descendants of this test process (children, their children, ...)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parent[int(d)] = int(fields[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return sorted(found)


@pytest.fixture(autouse=True)
def machine_unharmed():
    """After every test: no sandbox process left on the host, no child of ours left that
    the test started (children of earlier tests in the session, e.g. a judge server or a
    worker pool, were there before and are not this test's)."""
    before = set(_descendants())
    yield
    time.sleep(0.2)
    assert _unlocked_sandbox_processes() == [], "a sandboxed process outlived its run"
    assert sorted(set(_descendants()) - before) == [], "a child process of the test outlived its run"


def test_mechanism_is_bubblewrap_with_namespaces():
    m = sandbox.mechanism()
    assert m.startswith("bubblewrap: net+pid"), m


def test_normal_program_gets_its_stdin_and_passes():
    r = run_python("import sys\nname = sys.stdin.readline().strip()\nprint('hi', name)\n",
                   stdin="ada\n", limits=QUICK)
    assert (r.status, r.exit_code, r.stdout, r.reason) == ("ok", 0, "hi ada\n", "")


def test_nonzero_exit_is_an_error_with_the_traceback_line():
    r = run_python("raise ValueError('bad input')\n", limits=QUICK)
    assert r.status == "error" and r.exit_code == 1
    assert "ValueError: bad input" in r.reason
    r = run_python("import sys; sys.exit(3)\n", limits=QUICK)
    assert (r.status, r.exit_code, r.reason) == ("error", 3, "exit 3")


def test_infinite_loop_stops_at_the_cpu_limit():
    r = run_python("while True:\n    pass\n", limits=Limits(cpu_s=1, wall_s=10))
    assert r.status == "timeout" and r.reason == "timeout: cpu 1 s (RLIMIT_CPU)"
    assert r.wall_s < 5


def test_sleeping_forever_stops_at_the_wall_limit():
    r = run_python("import time\ntime.sleep(1000)\n", limits=Limits(cpu_s=5, wall_s=1.5))
    assert (r.status, r.reason) == ("timeout", "timeout: wall 1.5 s")
    assert r.wall_s < 4


def test_closing_its_pipes_does_not_end_the_run_early():
    r = run_python("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(100)\n",
                   limits=Limits(cpu_s=5, wall_s=2))
    assert (r.status, r.reason) == ("timeout", "timeout: wall 2 s")


def test_fork_bomb_is_capped_at_the_process_limit():
    """os.fork in a loop: the uid's RLIMIT_NPROC refuses forks past `processes`; the
    bomb spins until the wall limit, then the whole pid namespace is killed."""
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n")
    host_before = sum(d.isdigit() for d in os.listdir("/proc"))
    r = run_python(bomb, limits=Limits(cpu_s=3, wall_s=3, processes=32))
    assert r.status == "timeout" and r.reason == "timeout: wall 3 s"
    assert _unlocked_sandbox_processes() == []  # every process of the bomb is gone
    host_after = sum(d.isdigit() for d in os.listdir("/proc"))
    assert host_after < host_before + 16  # other jobs share this machine: slack, not 0
    counter = ("import subprocess\nps = []\nwhile True:\n    try:\n"
               "        ps.append(subprocess.Popen(['sleep', '100']))\n"
               "    except OSError as e:\n        print(len(ps), e.errno)\n        break\n")
    r = run_python(counter, limits=Limits(cpu_s=3, wall_s=6, processes=16))
    assert r.status == "ok"
    assert r.stdout.split() == ["15", "11"]  # 15 children + itself = 16; EAGAIN


def test_fork_bomb_does_not_starve_a_concurrent_run():
    """Each concurrent run has a uid of its own, so the bomb's RLIMIT_NPROC count is
    its own: a sibling that forks runs normally meanwhile."""
    import threading
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n")
    out = {}
    t = threading.Thread(target=lambda: out.update(
        bomb=run_python(bomb, limits=Limits(cpu_s=3, wall_s=4, processes=32))))
    t.start()
    time.sleep(1.0)
    sibling = run_python("import subprocess\nprint(subprocess.run(['echo', 'ok'], "
                         "capture_output=True, text=True).stdout.strip())\n", limits=QUICK)
    t.join()
    assert out["bomb"].status == "timeout"
    assert (sibling.status, sibling.stdout) == ("ok", "ok\n")


def test_allocating_10_gb_is_refused_by_rlimit_as():
    r = run_python("x = bytearray(10 * 1024 ** 3)\nprint('allocated')\n", limits=QUICK)
    assert r.status == "memory" and r.reason.startswith("memory: RLIMIT_AS 1024 MB")
    assert "allocated" not in r.stdout
    # step by step (pages touched): stopped at the limit, here 256 MB
    r = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
                   limits=Limits(cpu_s=10, wall_s=15, memory_mb=256))
    assert r.status == "memory" and r.reason.startswith("memory: RLIMIT_AS 256 MB")


def test_writing_outside_its_folder_fails_and_changes_nothing(tmp_path):
    targets = ["/tmp/outside-xyz", str(PROJECT / "outside-xyz"), "/work/outside-xyz",
               "/etc/outside-xyz", str(tmp_path / "outside-xyz"), "/root/outside-xyz"]
    listing = sorted(os.listdir(PROJECT))
    prog = ("import os\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n"
            "        print('WROTE', p)\n    except OSError as e:\n"
            "        print('refused', p, type(e).__name__)\n"
            "open('inside.txt', 'w').write('mine')\nprint(os.getcwd(), open('inside.txt').read())\n"
            % targets)
    r = run_python(prog, limits=QUICK)
    assert r.status == "ok", r.reason
    assert "WROTE" not in r.stdout
    assert r.stdout.count("refused") == len(targets)
    assert r.stdout.strip().endswith("/tmp/work mine")  # its own folder is writable
    for p in targets:
        assert not os.path.exists(p), p
    assert sorted(os.listdir(PROJECT)) == listing


def test_a_file_past_the_size_limit_is_stopped():
    r = run_python("f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n",
                   limits=Limits(cpu_s=5, wall_s=10, file_mb=2))
    assert r.status == "error" and r.reason.startswith("file over 2 MB (RLIMIT_FSIZE)")


def test_filling_the_working_folder_stops_at_its_size():
    """Many files each under RLIMIT_FSIZE: the working folder is a tmpfs of disk_mb."""
    prog = ("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
            "    i += 1\n")
    r = run_python(prog, limits=Limits(cpu_s=5, wall_s=10, disk_mb=4))
    assert r.status == "error" and r.reason.startswith("disk: working folder over 4 MB")


def test_opening_a_socket_reaches_nothing():
    """A host listener on 127.0.0.1: an AF_INET socket cannot even be made (the syscall
    filter allows AF_UNIX only: EAFNOSUPPORT), and the listener never sees a connection
    (were one made, the sandbox's loopback is another network namespace's)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        prog = ("import socket\ntry:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "    print('CONNECTED')\nexcept OSError as e:\n"
                "    print('refused', type(e).__name__, e.errno)\ntry:\n"
                "    socket.getaddrinfo('pypi.org', 443)\n    print('RESOLVED')\n"
                "except OSError as e:\n    print('no dns', type(e).__name__)\n")
        r = run_python(prog, limits=QUICK)
        assert r.status == "ok", r.reason
        assert "CONNECTED" not in r.stdout and "RESOLVED" not in r.stdout
        assert f"refused OSError {errno.EAFNOSUPPORT}" in r.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_printing_1_gb_stops_at_the_output_cap():
    prog = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    r = run_python(prog, limits=QUICK)
    assert (r.status, r.reason) == ("output_limit", "output over 1000000 bytes")
    assert len(r.stdout) <= 1_000_000 + (1 << 16)
    assert r.wall_s < 5


def test_the_hosts_environment_is_not_visible(monkeypatch):
    secret = "vlcohort-secret-5f2c"
    monkeypatch.setenv("VLCOHORT_TEST_SECRET", secret)
    prog = ("import os\nprint(dict(os.environ))\n"
            "for p in ['/proc/self/environ', '/proc/1/environ', '/proc/%d/environ' % os.getppid()]:\n"
            "    try:\n        print(open(p, 'rb').read())\n    except OSError as e:\n"
            "        print(p, type(e).__name__)\n"
            "print(sorted(d for d in os.listdir('/proc') if d.isdigit()))\n")
    r = run_python(prog, limits=QUICK)
    assert r.status == "ok", r.reason
    assert secret not in r.stdout and "VLCOHORT_TEST_SECRET" not in r.stdout
    assert str(os.getpid()) not in r.stdout.splitlines()[-1]  # host pids are not visible


def test_it_cannot_signal_host_processes():
    """Its pid namespace shows it only itself; a host pid (ours) is not there, and
    bubblewrap's init (pid 1, root) refuses it."""
    prog = ("import os, signal\nfor pid in (%d, 1):\n    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n        print('KILLED', pid)\n"
            "    except OSError as e:\n        print(pid, type(e).__name__)\n" % os.getpid())
    r = run_python(prog, limits=QUICK)
    assert r.status == "ok" and "KILLED" not in r.stdout
    assert r.stdout.splitlines() == [f"{os.getpid()} ProcessLookupError", "1 PermissionError"]


def test_side_channel_returns_what_the_program_writes():
    r = run_python("import os\nos.write(int(os.environ['VLCOHORT_SIDE_FD']), b'{\"a\": 1}')\n",
                   limits=QUICK, side_channel=True)
    assert (r.status, r.side) == ("ok", '{"a": 1}')
