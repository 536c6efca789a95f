"""Without bubblewrap code is never run, unless the user says so explicitly.

``VLCOHORT_SANDBOX=unshare`` (not a mode: the unsafe one is ``unshare-unsafe``), an unknown
value, or no ``bwrap`` on the PATH: every run is refused (status ``sandbox_error``) with one
line naming ``apt-get install -y bubblewrap``. ``VLCOHORT_SANDBOX=unshare-unsafe`` runs through
util-linux unshare, and every result says ``sandbox="unshare-UNSAFE"``. These tests
need no working bubblewrap, so they run (and matter most) where it is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vlcohort.code import sandbox
from vlcohort.code.sandbox import INSTALL_BWRAP, run_python

SANDBOX_PY = Path(sandbox.__file__).resolve()


@pytest.fixture
def fresh_backend():
    """The mechanism is chosen once per process (cached): re-chosen around the test."""
    sandbox._backend.cache_clear()
    yield
    sandbox._backend.cache_clear()


def _assert_refused(r) -> None:
    assert r.status == "sandbox_error" and r.stdout == "" and r.exit_code is None
    assert r.reason.startswith("refused") and INSTALL_BWRAP in r.reason, r.reason
    assert "\n" not in r.reason
    assert r.sandbox == "none" and sandbox.sandbox_name() == "none"


def test_the_old_unshare_switch_is_refused_with_the_install_line(monkeypatch, fresh_backend):
    monkeypatch.setenv("VLCOHORT_SANDBOX", "unshare")
    _assert_refused(run_python("print('ran')\n"))
    assert sandbox.mechanism().startswith("none: refused")


def test_an_unknown_switch_is_refused(monkeypatch, fresh_backend):
    monkeypatch.setenv("VLCOHORT_SANDBOX", "off")
    r = run_python("print('ran')\n")
    _assert_refused(r)
    assert "VLCOHORT_SANDBOX='off'" in r.reason


def test_without_bwrap_on_the_path_runs_are_refused(monkeypatch, tmp_path, fresh_backend):
    """A PATH with util-linux (unshare, setpriv, prlimit) but no bubblewrap: refused, not
    silently run through the weaker unshare."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("unshare", "setpriv", "prlimit"):
        if shutil.which(name):
            (bindir / name).symlink_to(shutil.which(name))
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("VLCOHORT_SANDBOX", raising=False)
    r = run_python("print('ran')\n")
    _assert_refused(r)
    assert "bubblewrap (bwrap) not found" in r.reason


def _reachable_interpreter() -> str | None:
    """An interpreter any uid can run (the unsafe fallback drops to an unprivileged uid
    and cannot re-bind a root-only one, e.g. under /root): this one or the system's."""
    for exe in (sys.executable, "/usr/bin/python3"):
        path, ok = os.path.realpath(exe), os.path.exists(exe)
        while ok and path != "/":
            ok = os.stat(path).st_mode & 0o001 == 0o001
            path = os.path.dirname(path)
        if ok:
            return exe
    return None


DRIVER = """
import dataclasses, importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1])
sandbox = sys.modules["sandbox"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sandbox)
r = sandbox.run_python(sys.argv[2], limits=sandbox.Limits(cpu_s=3, wall_s=int(sys.argv[3])),
                       pass_fds=[int(x) for x in sys.argv[4:]])
print(json.dumps(dict(dataclasses.asdict(r), mechanism=sandbox.mechanism())))
"""


def _unsafe(program: str, wall_s: int = 6, pass_fds=(), **kw) -> subprocess.Popen:
    exe = _reachable_interpreter()
    if exe is None or not shutil.which("unshare"):
        pytest.skip("no interpreter another uid can run, or no util-linux unshare: the "
                    "unsafe fallback refuses here (checked by the test below)")
    env = dict(os.environ, VLCOHORT_SANDBOX="unshare-unsafe")
    return subprocess.Popen([exe, "-c", DRIVER, str(SANDBOX_PY), program, str(wall_s),
                             *map(str, pass_fds)], env=env, stdout=subprocess.PIPE,
                            text=True, pass_fds=tuple(pass_fds), **kw)


def test_the_unsafe_switch_runs_and_every_result_says_so():
    p = _unsafe("import os, socket\nprint('VLCOHORT_TEST_SECRET' in os.environ)\n"
                "socket.create_connection(('1.1.1.1', 53), timeout=2)\n")
    out, _ = p.communicate(timeout=60)
    r = json.loads(out)
    assert r["sandbox"] == "unshare-UNSAFE"
    assert r["mechanism"].startswith("UNSAFE util-linux unshare")
    assert r["status"] == "error" and r["stdout"] == "False\n"
    assert "Network is unreachable" in r["reason"]


def test_the_unsafe_switch_refuses_a_root_only_interpreter(monkeypatch, fresh_backend):
    """As root with an interpreter no other uid can reach, unshare would run the program
    as root with the host's files writable: refused."""
    if os.geteuid() != 0 or _reachable_interpreter() == sys.executable:
        pytest.skip("this interpreter is reachable by other uids (or we are not root)")
    monkeypatch.setenv("VLCOHORT_SANDBOX", "unshare-unsafe")
    _assert_refused(run_python("print('ran')\n"))


def test_the_unsafe_program_dies_when_its_host_process_is_killed():
    """SIGKILL the host process mid-run: the program (which holds a pipe's write end)
    is gone too, so the pipe reads EOF."""
    r, w = os.pipe()
    try:
        p = _unsafe("import os, time\nos.write(int(os.environ['VLCOHORT_PASS_FDS']), b'x')\n"
                    "time.sleep(60)\n", wall_s=60, pass_fds=(w,))
        os.close(w)
        w = None
        assert os.read(r, 1) == b"x"  # the program runs
        p.kill()
        p.wait()
        import select
        ready, _, _ = select.select([r], [], [], 10)
        assert ready and os.read(r, 1) == b"", "the program outlived its host process"
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_without_the_seccomp_library_runs_are_refused():
    """pyseccomp not importable (as on a machine without it): refused with the line that
    names it, never run without the syscall filter."""
    probe = ("import sys\nsys.modules['pyseccomp'] = None  # import fails: ImportError\n"
             f"sys.path.insert(0, {str(SANDBOX_PY.parents[2])!r})\n"
             "from vlcohort.code import sandbox\n"
             "r = sandbox.run_python(\"open('/tmp/work/ran', 'w')\\nprint('ran')\\n\")\n"
             "print(r.status, r.sandbox, '|', r.reason)\n")
    env = {k: v for k, v in os.environ.items() if k != "VLCOHORT_SANDBOX"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=120).stdout
    assert out.startswith("sandbox_error none | refused: the seccomp filter cannot be built")
    assert "pip install pyseccomp" in out and out.count("\n") == 1
