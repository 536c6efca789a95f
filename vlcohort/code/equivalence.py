"""Behavioural equivalence of programs, so that a cohort can vote on code without gold.

Two programs are one answer when they behave alike on the benchmark's *public inputs*:
the key is a hash of what the program produces on each input, never of the expected
outputs (which the vote must not see). What is run:

* stdin cases: each case's input; the stdout, compared as LiveCodeBench compares
  (stripped, line by line), so trailing spaces do not split a vote.
* functional cases: each call; the returned value (JSON, else repr).
* humaneval / mbpp: the calls ``candidate(<literals>)`` / ``f(<literals>)`` found in the
  test asserts, made from a separate sandbox to the program's (``pair.py``), so each
  value comes back as plain data (``_wire.py``, set members and dict items in a fixed
  order), never as a repr the program wrote. Asserts do not separate into inputs in
  general (loops, random inputs, helper variables); when no such call is found, the key
  is the vector of test outcomes (each assert: pass / the exception).

An exception is recorded as its type name, a case past its time as "timeout". The key is
None when the program does not even load (a syntax error, a failing import), or when one
of its answers is not plain data (an object of its own class, a generator): such a
sample abstains from the vote, so that programs cannot agree on values nobody compares.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from vlcohort.code.checks import (
    CodeTests,
    case_failure,
    default_workers,
    humaneval_program,
    load_failure,
    run_cases,
    split_statements,
    stripped_lines,
)
from vlcohort.code.sandbox import Limits

KEY_CHARS = 16


def _called_name(test_code: str) -> str:
    """MBPP records without an entry point: the function the first assert calls."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) \
                        and not hasattr(builtins, sub.func.id):
                    return sub.func.id
    return ""


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def assert_calls(test_code: str, entry_point: str) -> list[str]:
    """``entry_point(<literal args>)`` for each call of ``candidate`` / ``entry_point``
    with literal arguments inside the asserts of ``test_code``; first-seen order, no
    repeats. [] when none (or the test does not parse)."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return []
    names = {"candidate", entry_point} - {""}
    calls: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for sub in ast.walk(node.test):
            if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
                    and sub.func.id in names):
                continue
            if not all(_literal(a) for a in sub.args) or \
                    not all(k.arg and _literal(k.value) for k in sub.keywords):
                continue
            args = [ast.unparse(a) for a in sub.args]
            args += [f"{k.arg}={ast.unparse(k.value)}" for k in sub.keywords]
            text = f"{entry_point}({', '.join(args)})"
            if text not in calls:
                calls.append(text)
    return calls


def _outputs(code: str, tests: CodeTests, limits: Limits) -> list[str] | None:
    """What the program produces on each public input; None when it does not load."""
    if not code or not code.strip():
        return None
    if tests.kind in ("stdin", "functional"):
        mode, program, inputs = tests.kind, code, [i for i, _ in tests.cases]
    else:
        entry = tests.entry_point or _called_name(tests.test_code)
        program = (humaneval_program(code, tests) if tests.kind == "humaneval"
                   else tests.setup_code + "\n" + code)
        inputs = assert_calls(tests.test_code, entry) if entry else []
        if inputs:
            mode = "calls"
        elif tests.kind == "humaneval":
            mode, inputs = "humaneval", ["check"]
        else:
            mode, inputs = "mbpp", split_statements(tests.test_code)
    if not inputs:
        return None
    o = run_cases(mode, program, tests, inputs, limits)
    if load_failure(o) is not None:
        return None
    if any(c.get("kind") == "bad" for c in o.cases):
        return None  # an answer that is not plain data cannot be compared: no vote
    outs: list[str] = []
    for k in range(len(inputs)):
        bad = case_failure(o, k)
        if bad is not None and k >= len(o.cases):  # the run stopped here: its reason
            outs.append(f"!{bad[0]}")
        elif bad is not None:
            c = o.cases[k]
            outs.append("!timeout" if bad[0] == "timeout" else
                        "!" + str(c.get("exc") or str(c.get("error", "")).split(":", 1)[0]))
        elif mode == "stdin":
            outs.append("\n".join(stripped_lines(o.cases[k]["out"])))
        elif mode in ("humaneval", "mbpp"):
            outs.append("pass")
        else:
            outs.append(str(o.cases[k]["out"]))
    return outs


def behaviour_key(code: str, tests: CodeTests, limits: Limits = Limits()) -> str | None:
    """A short hash of the program's outputs on the public inputs of ``tests``; None
    when the program does not run. Equal keys: one answer for the vote."""
    outs = _outputs(code, tests, limits)
    if outs is None:
        return None
    blob = json.dumps([tests.kind, outs], ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_CHARS]


def behaviour_keys(codes: Sequence[str], tests: CodeTests, workers: int | None = None,
                   limits: Limits = Limits()) -> list[str | None]:
    """behaviour_key for each program (one problem's samples), a bounded pool, in order."""
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda c: behaviour_key(c, tests, limits), codes))
