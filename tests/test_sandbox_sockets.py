"""Socket families inside the sandbox: AF_UNIX only, an allow-list in the seccomp filter.

The network namespace leaves families it does not cover: AF_VSOCK binds and listens
(a way to the hypervisor), AF_ALG / AF_PACKET / AF_NETLINK are kernel attack surface.
Every family but AF_UNIX must answer EAFNOSUPPORT from ``socket`` and ``socketpair``;
AF_UNIX (and what the standard library builds on it) must keep working.
Runs for real through bubblewrap (skipped without it, see conftest.py).
"""

from __future__ import annotations

import errno
import json
import socket
import textwrap

import pytest

from vlcohort.code.sandbox import ALLOWED_SOCKET_FAMILY, Limits, run_python

pytestmark = pytest.mark.sandbox

QUICK = Limits(cpu_s=5, wall_s=15)
#: Past the highest family Linux knows (AF_MCTP = 45 in 6.x; AF_MAX 46).
FAMILIES = range(0, 64)


def run(program: str):
    r = run_python(textwrap.dedent(program), limits=QUICK)
    assert r.sandbox == "bwrap"
    assert r.status == "ok", (r.reason, r.stderr[-2000:])
    return r


def test_af_unix_is_the_allowed_family():
    assert ALLOWED_SOCKET_FAMILY == socket.AF_UNIX


@pytest.mark.parametrize("family, kind", [
    ("AF_INET", "SOCK_STREAM"), ("AF_INET", "SOCK_DGRAM"), ("AF_INET6", "SOCK_STREAM"),
    ("AF_VSOCK", "SOCK_STREAM"), ("AF_ALG", "SOCK_SEQPACKET"), ("AF_PACKET", "SOCK_RAW"),
    ("AF_NETLINK", "SOCK_RAW"), ("AF_NETLINK", "SOCK_DGRAM")])
def test_a_named_family_is_refused(family, kind):
    """The attacker's own code: make the socket, and for vsock bind and listen as it
    could before (the network namespace does not cover vsock)."""
    r = run(f"""
        import socket
        try:
            s = socket.socket(socket.{family}, socket.{kind})
        except OSError as e:
            print("refused", e.errno)
        else:
            if socket.{family} == socket.AF_VSOCK:
                s.bind((socket.VMADDR_CID_ANY, 5000))
                s.listen()
                print("LISTENING", s.getsockname())
            print("CREATED")
        """)
    assert r.stdout.split() == ["refused", str(errno.EAFNOSUPPORT)], r.stdout


def test_every_family_but_af_unix_is_refused_by_socket_and_socketpair():
    """A sweep over every family number, each with four socket types and raw syscalls
    (the family in the whole 64-bit register, high bits set too): all EAFNOSUPPORT."""
    r = run(f"""
        import ctypes, json, os, socket
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        SYS_socket, SYS_socketpair = 41, 53  # x86_64
        import platform
        raw = platform.machine() == "x86_64"
        out = {{}}
        for fam in {list(FAMILIES)!r}:
            if fam == socket.AF_UNIX:
                continue
            seen = set()
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW,
                         socket.SOCK_SEQPACKET):
                try:
                    socket.socket(fam, kind, 0).close()
                    seen.add("created")
                except OSError as e:
                    seen.add(e.errno)
                try:
                    a, b = socket.socketpair(fam, kind, 0)
                    a.close(); b.close()
                    seen.add("pair")
                except OSError as e:
                    seen.add(e.errno)
                if raw:
                    fds = (ctypes.c_int * 2)()
                    for nr, args in ((SYS_socket, (fam | (1 << 32), kind, 0)),
                                     (SYS_socketpair, (fam, kind, 0, fds))):
                        rc = libc.syscall(ctypes.c_long(nr), *[
                            ctypes.c_long(a) if isinstance(a, int) else a for a in args])
                        seen.add(ctypes.get_errno() if rc < 0 else "raw-created")
            out[fam] = sorted(map(str, seen))
        # AF_UNIX with high bits set is not AF_UNIX to the filter: refused as well
        if raw:
            rc = libc.syscall(ctypes.c_long(SYS_socket),
                              ctypes.c_long(socket.AF_UNIX | (1 << 32)),
                              ctypes.c_long(socket.SOCK_STREAM), ctypes.c_long(0))
            out["unix-high-bits"] = [str(ctypes.get_errno()) if rc < 0 else "raw-created"]
        print(json.dumps(out))
        """)
    seen = json.loads(r.stdout)
    assert len(seen) >= len(FAMILIES) - 1
    wrong = {f: v for f, v in seen.items() if v != [str(errno.EAFNOSUPPORT)]}
    assert not wrong, wrong


def test_af_unix_and_what_builds_on_it_still_work():
    """socketpair, a named AF_UNIX socket in the working folder, an abstract one,
    multiprocessing (a Pool: AF_UNIX pairs, semaphores in /dev/shm) and subprocess."""
    r = run("""
        import multiprocessing as mp, os, socket, subprocess, sys
        a, b = socket.socketpair()
        a.sendall(b"ping"); print(b.recv(4).decode())
        a2, b2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a2.send(b"dgram"); print(b2.recv(5).decode())
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(os.path.join(os.getcwd(), "s.sock")); srv.listen()
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        cli.connect(os.path.join(os.getcwd(), "s.sock"))
        conn, _ = srv.accept(); cli.sendall(b"named"); print(conn.recv(5).decode())
        ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ab.bind("\\0vlcohort-test"); ab.listen(); print("abstract")
        def sq(x):
            return x * x
        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                print(sum(pool.map(sq, range(10))))
            print(subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True,
                                 text=True).stdout.strip())
        """)
    assert r.stdout.split() == ["ping", "dgram", "named", "abstract", "285", "7"], r.stdout
