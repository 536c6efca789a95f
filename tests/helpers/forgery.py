"""The hostile completions of the code-forgery tests, as module constants so that several
test modules (tests/test_code_forgery.py, tests/test_harness_reuse.py) and one-off scripts
can run them: the problems they attack, universal load-time attacks, lying returned values,
patched test modules and a hostile channel."""

from __future__ import annotations

from vlcohort.code.checks import CodeTests

# ------------------------------------------------------------------------ the problems

#: HumanEval-style problems whose asserts each attack class would pass in a shared
#: interpreter.
DOUBLE = CodeTests("humaneval", prompt='def double(x):\n    """Twice x."""\n',
                   entry_point="double",
                   test_code="def check(candidate):\n    assert candidate(2) == 4\n"
                             "    assert candidate(-1) == -2\n    assert candidate(0) == 0\n")
HALF_MATH = CodeTests("humaneval", prompt='def half(x):\n    """Half of x."""\n',
                      entry_point="half",
                      test_code="import math\n\n\ndef check(candidate):\n"
                                "    assert math.isclose(candidate(3), 1.5)\n"
                                "    assert math.isclose(candidate(1), 0.5)\n")
HALF_OPERATOR = CodeTests("humaneval", prompt='def half(x):\n    """Half of x."""\n',
                          entry_point="half",
                          test_code="import operator\n\n\ndef check(candidate):\n"
                                    "    assert operator.eq(candidate(3), 1.5)\n")
MBPP = CodeTests("mbpp", setup_code="import math",
                 test_code="assert hyp(3, 4) == 5.0\nassert hyp(5, 12) == 13.0")
MBPP_MATH = CodeTests("mbpp", setup_code="import math",
                      test_code="assert math.isclose(hyp(3, 4), 5.0)\n"
                                "assert math.isclose(hyp(5, 12), 13.0)")
STDIN = CodeTests("stdin", cases=(("3\n1 2 3\n", "6\n"), ("2\n5 5\n", "10\n"),
                                  ("1\n-4\n", "-4\n")))
FUNCTIONAL = CodeTests("functional", entry_point="double",
                       cases=(("2", "4"), ("-1", "-2"), ("0", "0")))

HONEST = {
    "humaneval": "    return x * 2\n",
    "mbpp": "def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n",
    "stdin": "input()\nprint(sum(map(int, input().split())))\n",
    "functional": "class Solution:\n    def double(self, x):\n        return x * 2\n",
}
PROBLEMS = {"humaneval": DOUBLE, "mbpp": MBPP, "stdin": STDIN, "functional": FUNCTIONAL}

# ------------------------------------------------------------------- universal attacks

_FORGED_LINES = '''
def _lines(nonce):
    out = [nonce + json.dumps({"load": True})]
    for i in range(300):
        out.append(nonce + json.dumps({"i": i, "ok": True, "out": "", "json": True,
                                       "error": ""}))
    return ("\\n".join(out) + "\\n").encode()
'''

UNIVERSAL = {
    # the reporting function, found by walking the frame stack at load time
    "frame_walk_to_emit": '''
import os, sys
f = sys._getframe()
while f is not None:
    emit = f.f_locals.get("emit")
    if callable(emit):
        emit({"load": True})
        for i in range(300):
            emit({"i": i, "ok": True, "out": "", "json": True, "error": ""})
        os._exit(0)
    f = f.f_back
''',
    # a nonce read from any live dict (gc), result lines written to every pipe fd
    "gc_nonce_to_proc_self_fd": "import gc, json, os\n" + _FORGED_LINES + '''
found = [o["nonce"] for o in gc.get_objects() if isinstance(o, dict)
         and o is not globals() and isinstance(o.get("nonce"), str)]
nonce = found[0] if found else ""
for fd in os.listdir("/proc/self/fd"):
    try:
        if int(fd) > 2 and os.readlink("/proc/self/fd/" + fd).startswith("pipe:"):
            try:  # a fresh open of the pipe (refused to another uid: its inode is 0600)
                w = os.open("/proc/self/fd/" + fd, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                w = int(fd)
            os.write(w, _lines(nonce))
    except OSError:
        pass
os._exit(0)
''',
    # a nonce from the driver's globals, lines to guessed fd numbers
    "globals_nonce_to_guessed_fds": "import json, os, sys\n" + _FORGED_LINES + '''
main = sys.modules["__main__"]
nonce = json.loads(getattr(main, "PAYLOAD", "{}")).get("nonce", "")
for fd in range(3, 64):
    try:
        os.write(fd, _lines(nonce))
    except OSError:
        pass
os._exit(0)
''',
    # the test never runs: exec is a no-op, and `check` is the candidate's
    "patch_exec_define_check": '''
import builtins
def check(candidate):
    return None
builtins.exec = lambda *args, **kwargs: None
builtins.eval = lambda *args, **kwargs: True
''',
    "patch_assertion_error": '''
import builtins
class _Never(BaseException):
    pass
builtins.AssertionError = _Never
builtins.Exception = _Never
''',
    "os_exit_early": "import os\nos._exit(0)\n",
    "sys_exit_early": "import sys\nsys.exit(0)\n",
    "raise_systemexit": "raise SystemExit(0)\n",
    "raise_keyboardinterrupt": "raise KeyboardInterrupt\n",
    "kill_the_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "kill_pid_1": "import os, signal\nos.kill(1, signal.SIGKILL)\n",
}

# ------------------------------------------------------------ returned-value attacks

#: A class per attack; ``_forge(x)`` stands for the answer to the argument x.
VALUES = {
    "always_equal": '''
class _V:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __bool__(self): return True
    __hash__ = object.__hash__
def _forge(x): return _V()
''',
    "int_subclass_eq": '''
class _V(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
def _forge(x): return _V(7)
''',
    "str_subclass_eq": '''
class _V(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = str.__hash__
def _forge(x): return _V("seven")
''',
    "list_subclass_eq": '''
class _V(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
def _forge(x): return _V([7])
''',
    "lying_repr_and_reduce": '''
class _V:
    def __init__(self, v): self.v = v
    def __repr__(self): return repr(self.v)
    def __reduce__(self): return (int, (self.v,))
    def __eq__(self, other): return True
def _forge(x): return _V(x * 2)
''',
    "generator": "def _forge(x):\n    return (v for v in [x * 2])\n",
    "self_containing_list": "def _forge(x):\n    a = [x * 2]\n    a.append(a)\n    return a\n",
    "recursion_bomb": '''
def _forge(x):
    a = x * 2
    for _ in range(100000):
        a = [a]
    return a
''',
    "del_raises": '''
class _V:
    def __eq__(self, other): return True
    def __del__(self):
        raise SystemExit(0)
class _W(int):
    def __eq__(self, other): return True
    def __del__(self):
        raise KeyboardInterrupt
def _forge(x): return [_V(), _W(7)][x % 2]
''',
}


def value_program(kind: str, attack: str) -> str:
    """The value attack as each protocol's program (HumanEval: a completion, whose
    top-level class definitions come after the prompt's stub)."""
    code = VALUES[attack]
    if kind == "humaneval":
        return ("    return _forge(x)\n" + code)
    if kind == "mbpp":
        return code + "def hyp(a, b):\n    return _forge(a)\n"
    if kind == "functional":
        return code + "class Solution:\n    def double(self, x):\n        return _forge(x)\n"
    raise ValueError(kind)


PATCHES = {
    "patch_math_isclose": "import math\nmath.isclose = lambda *a, **k: True\n",
    "patch_operator_eq": "import operator\noperator.eq = lambda a, b: True\n",
    "patch_import": '''
import builtins
class _Yes:
    def __getattr__(self, name):
        return lambda *a, **k: True
_real_import = builtins.__import__
def _import(name, *a, **k):
    return _Yes() if name in ("math", "operator") else _real_import(name, *a, **k)
builtins.__import__ = _import
''',
}


# --------------------------------------------------------------- a hostile channel

CHANNEL = {
    "flood_the_answer_pipe": '''
import os
for fd in range(3, 64):
    try:
        os.set_blocking(fd, True)
        for _ in range(2000):
            os.write(fd, b"x" * 65536)
    except OSError:
        pass
''',
    "garbage_frames": '''
import os
for fd in range(3, 64):
    try:
        os.write(fd, b'{"load": true, "names": {"double": "callable"}}\\n'
                     b'{"id": 1, "ok": {"zz": 1}}\\n\\xff\\xfe not json\\n')
    except OSError:
        pass
''',
    "oversized_frame": '''
import os
big = b'{"load": true, "names": {}, "pad": "' + b"a" * (20 << 20) + b'"}\\n'
for fd in range(3, 64):
    try:
        os.write(fd, big)
    except OSError:
        pass
''',
    "never_answers": '''
import signal, time
signal.signal(signal.SIGALRM, signal.SIG_IGN)
def _sleep(*a):
    while True:
        time.sleep(1)
signal.setitimer = lambda *a, **k: None
''',
    "closes_its_pipes": "import os\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n"
                        "    except OSError:\n        pass\n",
}
