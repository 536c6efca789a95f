"""Check a program against a code benchmark's tests, as each benchmark's harness does.

Protocols (each read from the benchmark's own evaluation code, reimplemented here):

* **HumanEval** (openai/human-eval ``execution.py``): ``prompt + completion``, the test
  code, then ``check(entry_point)``. When the completion defines ``entry_point`` itself
  (a model that rewrote the whole function), the prompt's body is not prepended again:
  the prompt's imports and its other top-level definitions (helpers such as
  ``encode_cyclic``) come first, then the completion.
* **MBPP** (google-research ``mbpp``; the sanitized split): ``test_setup_code`` +
  program, then the asserts; each top-level statement of the asserts is one case.
* **LiveCodeBench stdin** (``lcb_runner/evaluation/testing_util.py``, ``grade_stdio``):
  the program, after LiveCodeBench's prelude of imports, runs once per input; output and
  expected are each ``.strip()``-ed, split on newlines, each line stripped; the line
  counts must agree and each line must be equal, or else be whitespace-separated tokens
  that all parse as ``Decimal`` with equal values.
* **LiveCodeBench functional** (``grade_call_based``): the prelude + program loaded
  once, ``Solution().<entry_point>`` (or a bare function when there is no ``class
  Solution``) called with one JSON value per input line; a tuple counts as a list; the
  result must ``==`` the JSON-decoded expected output. Per-case timeout 6 s, as there.

All cases of one program run in one sandboxed process (``_driver.py``), which reports
each case on the sandbox's side channel as soon as it is done.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Sequence

from vlcohort.code.sandbox import Limits, RunResult, run_python

KINDS = ("humaneval", "mbpp", "stdin", "functional")
#: LiveCodeBench's per-test timeout (``run_test(..., timeout=6)``).
CASE_S = 6.0
#: Per-case output kept (stdout of a stdin case, repr of a value).
CASE_OUTPUT_CAP = 1 << 20


@dataclass(frozen=True)
class CodeTests:
    """What a program is checked against. JSON round-trip: to_dict() / from_dict()."""

    kind: str                       # "humaneval" | "mbpp" | "stdin" | "functional"
    prompt: str = ""                # humaneval: the function signature + docstring
    entry_point: str = ""           # humaneval: function name; functional: method name
    test_code: str = ""             # humaneval: `check(candidate)`; mbpp: asserts
    setup_code: str = ""            # mbpp test_setup_code / test_imports joined
    cases: tuple[tuple[str, str], ...] = ()   # stdin / functional: (input, expected)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"CodeTests.kind: {self.kind!r} is not one of {KINDS}")
        # a JSON round trip gives lists: keep the record hashable and comparable
        object.__setattr__(self, "cases", tuple((str(i), str(o)) for i, o in self.cases))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cases"] = [list(c) for c in self.cases]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CodeTests":
        known = {"kind", "prompt", "entry_point", "test_code", "setup_code", "cases"}
        extra = set(d) - known
        if extra:
            raise ValueError(f"CodeTests.from_dict: unknown field(s) {sorted(extra)}; "
                             f"expected {sorted(known)}")
        if "kind" not in d:
            raise ValueError("CodeTests.from_dict: the field 'kind' is missing")
        return cls(**{**d, "cases": tuple(tuple(c) for c in d.get("cases", ()))})


@dataclass
class Verdict:
    """passed: every test passed. status: RunResult.status, "failed" or "no_code"."""

    passed: bool
    status: str
    reason: str


# ---------------------------------------------------------------------------------------
# Programs


def _defines(code: str, name: str) -> bool:
    """True when ``code`` defines ``name`` at top level (def / class / assignment)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        # a body-only completion is indented and does not parse alone: only a def at
        # column 0 is a definition of the entry point itself
        return re.search(rf"^(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name == name:
            return True
    return False


def _prompt_context(prompt: str, entry_point: str) -> str:
    """The prompt less the entry point's own def: its imports and helper definitions."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return "\n".join(ln for ln in prompt.splitlines()
                         if ln.startswith(("import ", "from ")))
    keep = [n for n in tree.body
            if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.name == entry_point)]
    lines = prompt.splitlines()

    def start(n: ast.stmt) -> int:  # a decorated def starts at its first decorator
        return min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])

    return "\n".join("\n".join(lines[start(n) - 1:n.end_lineno]) for n in keep)


def humaneval_program(completion: str, tests: CodeTests) -> str:
    """The program HumanEval runs: prompt + completion, or the completion when it
    defines the entry point itself (after the prompt's imports and helpers)."""
    if tests.entry_point and _defines(completion, tests.entry_point):
        return _prompt_context(tests.prompt, tests.entry_point) + "\n" + completion
    return tests.prompt + completion


def split_statements(test_code: str) -> list[str]:
    """Top-level statements of an assert block, each a case (a multi-line assert
    stays whole); the whole text as one case when it does not parse."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return [test_code]
    return [ast.get_source_segment(test_code, n) or ast.unparse(n) for n in tree.body]


@functools.lru_cache(maxsize=1)
def _driver_text() -> str:
    return (Path(__file__).with_name("_driver.py")).read_text(encoding="utf-8")


def driver_source(mode: str, program: str, tests: CodeTests, inputs: Sequence[str],
                  case_s: float = CASE_S) -> tuple[str, str]:
    """(the sandboxed driver's source, its result-line nonce) for one program."""
    nonce = secrets.token_hex(8)
    payload = {"mode": mode, "program": program, "entry_point": tests.entry_point,
               "test_code": tests.test_code, "setup": tests.setup_code,
               "inputs": list(inputs), "case_s": case_s, "cap": CASE_OUTPUT_CAP,
               "nonce": nonce}
    tail = (f"\nPAYLOAD = {json.dumps(payload)!r}\nmain(json.loads(PAYLOAD))\n"
            "sys.stdout.flush()\nos._exit(0)\n")
    return _driver_text() + tail, nonce


def parse_side(side: str, nonce: str) -> tuple[dict | None, list[dict]]:
    """(the load line, the case lines in order) from the driver's side channel."""
    load, cases = None, []
    for line in side.splitlines():
        if not line.startswith(nonce):
            continue
        try:
            d = json.loads(line[len(nonce):])
        except json.JSONDecodeError:
            continue
        if "load" in d:
            load = d
        elif "i" in d:
            cases.append(d)
    return load, cases


def scaled_limits(limits: Limits, n_cases: int, case_s: float = CASE_S) -> Limits:
    """LiveCodeBench's global budget for n cases, ``(timeout + 1) * n + 5`` seconds,
    when it is larger than the given limits."""
    budget = (case_s + 1) * n_cases + 5
    return replace(limits, wall_s=max(limits.wall_s, budget),
                   cpu_s=max(limits.cpu_s, budget))


def run_driver(mode: str, program: str, tests: CodeTests, inputs: Sequence[str],
               limits: Limits, case_s: float = CASE_S
               ) -> tuple[RunResult, dict | None, list[dict]]:
    """Run the driver in the sandbox: (the run, its load line, its case lines)."""
    source, nonce = driver_source(mode, program, tests, inputs, case_s)
    if mode in ("stdin", "functional", "calls"):  # LiveCodeBench's budget for its cases
        limits = scaled_limits(limits, len(inputs), case_s)
    run = run_python(source, limits=limits, side_channel=True)
    load, cases = parse_side(run.side, nonce)
    return run, load, cases


# ---------------------------------------------------------------------------------------
# Comparison (LiveCodeBench's rules)


def _stripped_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdin_output_matches(got: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdin compare; (match, why not)."""
    g, e = _stripped_lines(got), _stripped_lines(expected)
    if len(g) != len(e):
        return False, f"wrong answer: {len(g)} output lines, expected {len(e)}"
    for k, (a, b) in enumerate(zip(g, e)):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        if da is None or db is None or da != db:
            return False, f"wrong answer at line {k}: {a[:80]!r} != {b[:80]!r}"
    return True, ""


def functional_output_matches(case: dict, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's call-based compare: prediction (tuples as lists) == json(expected)."""
    try:
        want = json.loads(expected)
    except json.JSONDecodeError as e:
        return False, f"expected output is not JSON ({e}); fix the benchmark record"
    if not case.get("json"):
        return False, f"wrong answer: {case['out'][:80]} (not a JSON value) != {expected[:80]}"
    got = json.loads(case["out"])
    if got == want:
        return True, ""
    return False, f"wrong answer: {case['out'][:80]} != {expected[:80]}"


# ---------------------------------------------------------------------------------------
# Verdicts


def _missing(run: RunResult, k: int) -> Verdict:
    """A case that never reported: the run's own reason (timeout, memory, ...)."""
    if run.status == "ok":
        return Verdict(False, "failed", f"case {k}: no result (the program ended the "
                                        "process before its test finished)")
    return Verdict(False, run.status, f"case {k}: {run.reason}")


def check_program(code: str, tests: CodeTests, limits: Limits = Limits(),
                  case_s: float = CASE_S) -> Verdict:
    """Run ``code`` against ``tests`` in the sandbox, as the benchmark's harness does.

    ``case_s``: the per-case time limit of stdin / functional / mbpp cases (LiveCodeBench's
    6 s); the run's own wall and CPU limits grow to LiveCodeBench's global budget for
    the number of cases when that is larger than ``limits``."""
    if not code or not code.strip():
        return Verdict(False, "no_code", "empty program")
    if tests.kind == "humaneval":
        mode, program, inputs = "humaneval", humaneval_program(code, tests), ["check"]
    elif tests.kind == "mbpp":
        mode, program, inputs = "mbpp", code, split_statements(tests.test_code)
    else:
        if not tests.cases:
            raise ValueError(f"CodeTests(kind={tests.kind!r}) has no cases: a {tests.kind} "
                             "check needs (input, expected output) pairs")
        mode, program, inputs = tests.kind, code, [i for i, _ in tests.cases]
    run, load, cases = run_driver(mode, program, tests, inputs, limits, case_s)
    if run.status == "sandbox_error":
        return Verdict(False, run.status, run.reason)
    if load is None:
        return Verdict(False, run.status if run.status != "ok" else "error",
                       f"did not load: {run.reason or 'no result'}")
    if not load["load"]:
        return Verdict(False, "failed", f"did not load: {load['error']}")
    for k in range(len(inputs)):
        if k >= len(cases):
            return _missing(run, k)
        case = cases[k]
        if not case["ok"]:
            status = "timeout" if case["error"].startswith("timeout") else "failed"
            return Verdict(False, status, f"case {k}: {case['error']}")
        if mode == "stdin":
            ok, why = stdin_output_matches(case["out"], tests.cases[k][1])
        elif mode == "functional":
            ok, why = functional_output_matches(case, tests.cases[k][1])
        else:
            ok, why = True, ""
        if not ok:
            return Verdict(False, "failed", f"case {k}: {why}")
    return Verdict(True, "ok", "")


def default_workers() -> int:
    return os.cpu_count() or 1


def check_many(jobs: Sequence[tuple[str, CodeTests]], workers: int | None = None,
               limits: Limits = Limits()) -> list[Verdict]:
    """check_program over many (code, tests), a bounded pool of threads each driving
    one sandboxed process; verdicts in the order of ``jobs``."""
    workers = workers or default_workers()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda j: check_program(j[0], j[1], limits), jobs))
