"""A long-lived harness sandbox serving many checks (``vlcohort/code/harness_pool.py``):
one check's candidate (or tests) cannot change another check's verdict on that worker.

Every check here runs on one ``HarnessServer`` (one worker of ``check_many``), and each
test asserts that it was the same server throughout (``starts``), so check k + 1 really
shares check k's harness process. The attacks are those of ``test_code_forgery.py``.
"""

from __future__ import annotations

import pytest

from tests.helpers.forgery import CHANNEL, DOUBLE, MBPP, PATCHES, UNIVERSAL, value_program
from vlcohort.code.checks import CodeTests, check_many, check_program
from vlcohort.code.harness_pool import HarnessServer
from vlcohort.code.sandbox import Limits

pytestmark = pytest.mark.sandbox

LIMITS = Limits(cpu_s=4, wall_s=5)
CASE_S = 1.0
HONEST = {"humaneval": "    return x * 2\n",
          "mbpp": "def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n"}
WRONG = {"humaneval": "    return x + 2\n",
         "mbpp": "def hyp(a, b):\n    return a + b\n"}
TESTS = {"humaneval": DOUBLE, "mbpp": MBPP}

#: Candidates that try to outlive or poison their check, beyond test_code_forgery's.
LINGERING = {
    # a daemon that survives its check, then writes forged lines to every fd it can
    "setsid_daemon": '''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.5)
        for fd in range(3, 256):
            try:
                os.write(fd, b'{"load": true}\\n{"i": 0, "ok": true, "error": ""}\\n')
            except OSError:
                pass
        time.sleep(30)
    os._exit(0)
''',
    "memory_hog": "x = bytearray(4 << 30)\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                 "        pass\n",
    "busy_forever": "while True:\n    pass\n",
    "huge_answer": "_BIG = 'x' * (15 << 20)\n",
}


def _program(kind: str, code: str) -> str:
    """``code`` at load time, then a wrong function: only a forgery could pass it."""
    return code + ("def double(x):\n    return x + 2\n" if kind == "humaneval"
                   else WRONG["mbpp"])


def _hostile() -> list[tuple[str, str, str]]:
    """(name, kind, program) for every attack, on both protocols that use the harness."""
    out = []
    for kind in ("humaneval", "mbpp"):
        for name, code in {**UNIVERSAL, **PATCHES, **LINGERING}.items():
            out.append((name, kind, _program(kind, code)))
        for name in ("always_equal", "int_subclass_eq", "generator", "del_raises",
                     "recursion_bomb"):
            out.append((name, kind, value_program(kind, name)))
        sleeper = "_sleep() if '_sleep' in globals() else "
        for name, code in CHANNEL.items():
            body = ("    return " + sleeper + "x * 2\n" + code if kind == "humaneval" else
                    code + "def hyp(a, b):\n    return " + sleeper + "math.hypot(a, b)\n")
            out.append((name, kind, body))
    return out


@pytest.fixture(scope="module")
def server():
    s = HarnessServer()
    yield s
    s.close()


def _same(a, b) -> bool:
    return (a.passed, a.status, a.reason) == (b.passed, b.status, b.reason)


def test_one_server_serves_many_checks_with_a_fresh_pairs_verdicts(server):
    """The verdicts through the fork server are those of two fresh sandboxes."""
    starts = server.starts
    for kind in ("humaneval", "mbpp"):
        for code in (HONEST[kind], WRONG[kind]):
            got = check_program(code, TESTS[kind], LIMITS, CASE_S, harness=server)
            want = check_program(code, TESTS[kind], LIMITS, CASE_S)
            assert _same(got, want), (kind, code, got, want)
            assert got.passed == (code == HONEST[kind])
    assert server.starts == max(starts, 1)


@pytest.mark.parametrize("name,kind,program", _hostile(), ids=lambda v: v if len(v) < 40
                         else "prog")
def test_a_hostile_check_does_not_change_the_next_checks_verdict(server, name, kind, program):
    """Check k: the hostile program fails (as it does with two fresh sandboxes); on the
    same harness process, check k + 1 with a wrong program fails with the reason a
    fresh pair gives, and check k + 2 with the honest program passes."""
    hostile = check_program(program, TESTS[kind], LIMITS, CASE_S, harness=server)
    assert not hostile.passed, (name, kind, hostile)
    starts = server.starts
    wrong = check_program(WRONG[kind], TESTS[kind], LIMITS, CASE_S, harness=server)
    fresh = check_program(WRONG[kind], TESTS[kind], LIMITS, CASE_S)
    assert _same(wrong, fresh), (name, kind, wrong, fresh)
    honest = check_program(HONEST[kind], TESTS[kind], LIMITS, CASE_S, harness=server)
    assert (honest.passed, honest.status) == (True, "ok"), (name, kind, honest)
    assert server.starts == starts  # k + 1 and k + 2 shared k's harness process


def test_the_tests_own_state_is_reset_between_checks(server):
    """Whatever check k's tests do to the harness's interpreter and folders (patched
    modules and builtins, files in /tmp/work and /dev/shm, a process left running) is
    gone in check k + 1 (a fresh fork of the server)."""
    dirty = CodeTests("mbpp", setup_code="import math", test_code="\n".join([
        "import builtins, subprocess",
        "math.isclose = lambda *a, **k: True",
        "builtins.LEFT_BEHIND = 1",
        "open('/tmp/work/left', 'w').write('x')",
        "open('/dev/shm/left', 'w').write('x')",
        "subprocess.Popen(['sleep', '1000'])",
        "assert math.isclose(hyp(3, 4), 5.0)"]))
    v = check_program(WRONG["mbpp"], dirty, LIMITS, CASE_S, harness=server)
    assert v.passed, v  # the patched isclose passed the wrong program, in check k only
    starts = server.starts
    probe = CodeTests("mbpp", setup_code="import math", test_code="\n".join([
        "import builtins, os",
        "assert not hasattr(builtins, 'LEFT_BEHIND')",
        "assert not os.path.exists('/tmp/work/left')",
        "assert not os.path.exists('/dev/shm/left')",
        "assert not [p for p in os.listdir('/proc') if p.isdigit() and "
        "b'sleep' in open(f'/proc/{p}/cmdline', 'rb').read()]",
        "assert math.isclose(hyp(3, 4), 5.0)"]))
    v = check_program(WRONG["mbpp"], probe, LIMITS, CASE_S, harness=server)
    assert (v.passed, v.reason.split(":")[0]) == (False, "case 5"), v
    assert server.starts == starts


def test_a_harness_that_overruns_is_killed_and_the_server_goes_on(server):
    limits = Limits(cpu_s=3, wall_s=2)
    stuck = CodeTests("mbpp", setup_code="import math",
                      test_code="while True:\n    pass\nassert hyp(3, 4) == 5.0")
    v = check_program(HONEST["mbpp"], stuck, limits, CASE_S, harness=server)
    assert (v.passed, v.status) == (False, "timeout"), v
    starts = server.starts
    v = check_program(HONEST["mbpp"], MBPP, limits, CASE_S, harness=server)
    assert (v.passed, v.status) == (True, "ok"), v
    assert server.starts == starts


def test_a_dead_server_fails_its_check_and_is_replaced(server):
    killer = CodeTests("mbpp", setup_code="import math",
                       test_code="import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                 "assert hyp(3, 4) == 5.0")
    assert check_program(HONEST["mbpp"], MBPP, LIMITS, CASE_S, harness=server).passed
    starts = server.starts
    v = check_program(WRONG["mbpp"], killer, LIMITS, CASE_S, harness=server)
    assert not v.passed and v.reason, v
    v = check_program(HONEST["mbpp"], MBPP, LIMITS, CASE_S, harness=server)
    assert (v.passed, v.status) == (True, "ok"), v
    assert server.starts == starts + 1


def test_a_server_is_replaced_after_its_quota_of_checks():
    s = HarnessServer(max_checks=2)
    try:
        for _ in range(5):
            assert check_program(HONEST["humaneval"], DOUBLE, LIMITS, CASE_S, harness=s).passed
        assert s.starts == 3
    finally:
        s.close()


def test_check_many_interleaved_hostile_and_honest_at_one_worker():
    """One worker, so one harness process for all: each verdict is the program's own."""
    hostile = [(_program(k, code), TESTS[k]) for k in ("humaneval", "mbpp")
               for code in list(UNIVERSAL.values())[::2]]
    jobs = []
    for h in hostile:
        jobs += [h, (HONEST["humaneval"], DOUBLE), (WRONG["mbpp"], MBPP)]
    verdicts = check_many(jobs, workers=1, limits=LIMITS)
    assert [v.passed for v in verdicts] == [False, True, False] * len(hostile)
