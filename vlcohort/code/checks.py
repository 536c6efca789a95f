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

Where the verdict is decided, so that the program cannot write it:

* HumanEval / MBPP: the tests run in a sandbox of their own (``pair.py``, ``_harness.py``)
  and call the program's functions through proxies; the program runs in another sandbox
  (``_server.py``) and answers each call with plain data (``_wire.py``) or an exception's
  name. The harness reports the verdict on its own side channel (``check_many``: each
  worker keeps one harness sandbox, a fork server that runs each check in a fresh child,
  ``harness_pool.py``; the program still gets a fresh sandbox per check). The prompt's helper
  definitions (HumanEval) and the setup code (MBPP) are the benchmark's, run on the
  harness's side.
* stdin / functional: the program and its cases run in one sandboxed process
  (``_driver.py``), which reports each case's *output* as soon as it is done; the host
  compares it with the expected output, which never enters the sandbox, and believes
  only the exact sequence of result lines (:func:`parse_side`).

Where this differs from the official harnesses (which run the program, the tests and the
reporting in one interpreter): answers are compared as plain data, so a returned value
that is not plain data fails its call, a subclass of a plain type is its base value,
arguments are copies (in-place changes to list / dict / set / bytearray positional
arguments are copied back after the call), a candidate exception is the builtin of its
name, and a completion cannot redefine the prompt's helpers for the tests.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Iterator, Sequence

from vlcohort import bounded_json
from vlcohort.code.harness_pool import HarnessPool
from vlcohort.code.pair import run_pair
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
    """passed: every test passed. status: RunResult.status, "failed" or "no_code".
    sandbox: the isolation the runs had (``RunResult.sandbox``, e.g. "bwrap"); not part
    of the verdict's equality, which is about the program."""

    passed: bool
    status: str
    reason: str
    sandbox: str = field(default="", compare=False)


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
                  case_s: float = CASE_S) -> str:
    """The sandboxed driver's source for one stdin / functional program."""
    payload = {"mode": mode, "program": program, "entry_point": tests.entry_point,
               "inputs": list(inputs), "case_s": case_s, "cap": CASE_OUTPUT_CAP}
    return (_driver_text() + f"\nPAYLOAD = {json.dumps(payload)!r}\n"
            "main(json.loads(PAYLOAD))\nsys.stdout.flush()\nos._exit(0)\n")


_CASE_FIELDS = {"i": int, "ok": bool, "out": str, "error": str}


def _case_line_problem(d: object, k: int) -> str:
    """Why ``d`` is not the driver's line for case ``k`` ("" when it is)."""
    if not isinstance(d, dict):
        return "a result line that is not a JSON object"
    for key, typ in _CASE_FIELDS.items():
        if type(d.get(key)) is not typ:
            return f"a result line without a {typ.__name__} {key!r}"
    if d["i"] != k:
        return f"a result line for case {d['i']} where case {k} was due"
    if type(d.get("json", False)) is not bool or type(d.get("exc", "")) is not str:
        return "a result line with a malformed 'json' / 'exc'"
    return ""


def _complete_lines(text: str) -> Iterator[str]:
    """The newline-ended lines of ``text`` one at a time (a last line without its newline,
    cut off mid-write, is left out). Lazily: a program can write 64 MiB of newlines, and
    ``split`` would build 64 million strings before the first is looked at."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1


def parse_side(side: str) -> tuple[dict | None, list[dict], str]:
    """(the load line, the case lines, why reading stopped early) from the driver's side
    channel. The program shares the driver's process and may write there too, so only
    one exact sequence is believed: the load line, then case 0, 1, 2, ... each once, in
    order. Anything else (garbage, a skipped, repeated or reordered case) stops the
    reading with the reason; the cases before it stand, the next one fails. A last line
    cut off mid-write (the process was killed) is ignored."""
    load: dict | None = None
    cases: list[dict] = []
    for n, line in enumerate(_complete_lines(side)):
        try:
            d = bounded_json.loads(line)
        except bounded_json.BadJSON as e:
            return load, cases, f"side channel: line {n + 1}: {e}"
        if load is None:
            if not (isinstance(d, dict) and type(d.get("load")) is bool
                    and type(d.get("error", "")) is str):
                return None, [], "side channel: the first line is not the load line"
            load = d
            continue
        why = _case_line_problem(d, len(cases))
        if why:
            return load, cases, f"side channel: {why}"
        cases.append(d)
    return load, cases, ""


def scaled_limits(limits: Limits, n_cases: int, case_s: float = CASE_S) -> Limits:
    """LiveCodeBench's global budget for n cases, ``(timeout + 1) * n + 5`` seconds,
    when it is larger than the given limits."""
    budget = (case_s + 1) * n_cases + 5
    return replace(limits, wall_s=max(limits.wall_s, budget),
                   cpu_s=max(limits.cpu_s, budget))


@dataclass
class Outcome:
    """What a check's processes reported. ``cases``: one dict per case that has a
    result, in order (``ok``, ``error``, ``out``; ``kind`` "gone" / "timeout" / "bad" / "";
    ``exc`` the exception's name). ``stop``: why the results stop before the last
    case, when the reporting itself was faulty. ``judge``: the run that reported;
    ``candidate``: the run of the program (the same run for stdin / functional)."""

    load: dict | None
    cases: list[dict]
    stop: str
    judge: RunResult
    candidate: RunResult

    @property
    def sandbox(self) -> str:
        return getattr(self.judge, "sandbox", "") or getattr(self.candidate, "sandbox", "")


def run_driver(mode: str, program: str, tests: CodeTests, inputs: Sequence[str],
               limits: Limits, case_s: float = CASE_S) -> Outcome:
    """stdin / functional: the program and its cases in one sandboxed process; the host
    compares the outputs with the expected ones, which never enter the sandbox."""
    source = driver_source(mode, program, tests, inputs, case_s)
    run = run_python(source, limits=scaled_limits(limits, len(inputs), case_s),
                     side_channel=True)
    load, cases, stop = parse_side(run.side)
    return Outcome(load, cases, stop, run, run)


def _names_used(codes: Sequence[str]) -> list[str]:
    """Names the test code reads (not builtins): those the candidate may have to supply."""
    names: set[str] = set()
    for code in codes:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        names.update(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Load) and not hasattr(builtins, n.id))
    return sorted(names)


def harness_payload(mode: str, tests: CodeTests, cases: Sequence[str]) -> dict:
    """What the judging sandbox runs: ``context`` (HumanEval: the prompt's imports and
    helpers; MBPP: the setup code), the test code or statements, and the names the
    tests read that the candidate may define (bound to proxies there)."""
    if tests.kind == "humaneval":
        context = _prompt_context(tests.prompt, tests.entry_point)
        wanted = _names_used([tests.test_code, *([] if mode == "humaneval" else cases)])
        wanted = sorted(set(wanted) | {tests.entry_point})
    else:
        context = tests.setup_code
        wanted = _names_used(cases)
    return {"mode": mode, "context": context, "test_code": tests.test_code,
            "entry_point": tests.entry_point, "cases": list(cases), "wanted": wanted}


def _harness_lines(side: str) -> tuple[dict | None, list[dict]]:
    """The harness's verdict lines (its own side channel: only it writes there)."""
    load, cases = None, []
    for line in _complete_lines(side):
        try:
            d = bounded_json.loads(line)
        except bounded_json.BadJSON:
            break
        if not isinstance(d, dict):
            break
        if load is None:
            load = d
        elif d.get("i") == len(cases):
            cases.append(d)
    return load, cases


def run_tests(mode: str, program: str, tests: CodeTests, inputs: Sequence[str],
              limits: Limits, case_s: float = CASE_S, harness=None) -> Outcome:
    """humaneval / mbpp / calls: the program in one sandbox, the tests in another: a
    sandbox of their own (``pair.run_pair``), or a fresh child of ``harness``, a
    long-lived fork-server harness (``harness_pool.HarnessServer`` / ``HarnessPool``)."""
    run = run_pair if harness is None else harness.run
    runs = run(program, harness_payload(mode, tests, inputs), limits, case_s)
    load, cases = _harness_lines(runs.harness.side)
    return Outcome(load, cases, "", runs.harness, runs.candidate)


def run_cases(mode: str, program: str, tests: CodeTests, inputs: Sequence[str],
              limits: Limits, case_s: float = CASE_S, harness=None) -> Outcome:
    """The right runner for ``mode`` (``harness``: see :func:`run_tests`)."""
    if mode in ("stdin", "functional"):
        return run_driver(mode, program, tests, inputs, limits, case_s)
    return run_tests(mode, program, tests, inputs, limits, case_s, harness)


def load_failure(o: Outcome) -> tuple[str, str] | None:
    """(status, reason) when the program did not load (or nothing ran); else None."""
    for run in (o.judge, o.candidate):
        if run.status == "sandbox_error":
            return run.status, run.reason
    if o.load is None and o.stop:
        return "failed", f"did not load: {o.stop}"
    if o.load is None:
        run = o.judge if o.judge.status != "ok" else o.candidate
        return (run.status if run.status != "ok" else "error",
                f"did not load: {run.reason or o.stop or 'no result'}")
    if o.load.get("load") is True:
        return None
    if o.load.get("kind") == "gone" and o.candidate.status != "ok":
        return o.candidate.status, f"did not load: {o.candidate.reason}"
    status = "timeout" if o.load.get("kind") == "timeout" else "failed"
    return status, f"did not load: {o.load.get('error', '')}"


def case_failure(o: Outcome, k: int) -> tuple[str, str] | None:
    """(status, reason) when case ``k`` did not run to a result; None when it did (its
    output may still be wrong)."""
    if k >= len(o.cases):
        if o.stop:
            return "failed", f"case {k}: {o.stop}"
        if o.judge.status != "ok":
            return o.judge.status, f"case {k}: {o.judge.reason}"
        if o.candidate.status != "ok":
            return o.candidate.status, f"case {k}: {o.candidate.reason}"
        return "failed", (f"case {k}: no result (the program ended the process before its "
                          "test finished)")
    case = o.cases[k]
    if case.get("ok") is True:
        return None
    error = str(case.get("error", ""))
    if case.get("kind") == "gone" and o.candidate.status != "ok":
        return o.candidate.status, f"case {k}: {o.candidate.reason}"
    status = "timeout" if case.get("kind") == "timeout" or error.startswith("timeout") \
        else "failed"
    return status, f"case {k}: {error}"


# ---------------------------------------------------------------------------------------
# Comparison (LiveCodeBench's rules)


def stripped_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    """The line's tokens as numbers, or None when one is not a number. A NaN is not one:
    LiveCodeBench's ``==`` never holds for it, and a signalling ``sNaN`` (which a program
    can print) makes Decimal's comparison raise ``InvalidOperation``."""
    try:
        values = [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None
    return None if any(v.is_nan() for v in values) else values


def stdin_output_matches(got: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdin compare; (match, why not)."""
    g, e = stripped_lines(got), stripped_lines(expected)
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
        want = bounded_json.loads(expected)
    except bounded_json.BadJSON as e:
        return False, f"expected output: {e}; fix the benchmark record"
    if not case.get("json"):
        return False, f"wrong answer: {case['out'][:80]} (not a JSON value) != {expected[:80]}"
    try:
        got = bounded_json.loads(case["out"])
    except bounded_json.BadJSON as e:
        return False, f"wrong answer: {case['out'][:80]} ({e}) != {expected[:80]}"
    if got == want:
        return True, ""
    return False, f"wrong answer: {case['out'][:80]} != {expected[:80]}"


# ---------------------------------------------------------------------------------------
# Verdicts


def check_program(code: str, tests: CodeTests, limits: Limits = Limits(),
                  case_s: float = CASE_S, harness=None) -> Verdict:
    """Run ``code`` against ``tests`` in the sandbox, as the benchmark's harness does.

    ``case_s``: the per-case time limit of stdin / functional cases and of each call of
    the candidate from HumanEval / MBPP tests (LiveCodeBench's 6 s); the run's own wall
    and CPU limits grow to LiveCodeBench's global budget for the number of stdin /
    functional cases when that is larger than ``limits``.

    ``harness``: HumanEval / MBPP tests run in a fresh child of this long-lived harness
    sandbox (a ``harness_pool.HarnessServer`` or ``HarnessPool``) instead of a sandbox
    of their own; the program's sandbox is fresh either way."""
    if not code or not code.strip():
        return Verdict(False, "no_code", "empty program")
    if tests.kind == "humaneval":
        mode, program, inputs = "humaneval", humaneval_program(code, tests), ["check"]
    elif tests.kind == "mbpp":
        mode, inputs = "mbpp", split_statements(tests.test_code)
        program = tests.setup_code + "\n" + code
    else:
        if not tests.cases:
            raise ValueError(f"CodeTests(kind={tests.kind!r}) has no cases: a {tests.kind} "
                             "check needs (input, expected output) pairs")
        mode, program, inputs = tests.kind, code, [i for i, _ in tests.cases]
    o = run_cases(mode, program, tests, inputs, limits, case_s, harness)
    return replace(_verdict(o, mode, tests, len(inputs)), sandbox=o.sandbox)


def _verdict(o: Outcome, mode: str, tests: CodeTests, n: int) -> Verdict:
    bad = load_failure(o)
    if bad:
        return Verdict(False, *bad)
    for k in range(n):
        bad = case_failure(o, k)
        if bad:
            return Verdict(False, *bad)
        if mode == "stdin":
            ok, why = stdin_output_matches(o.cases[k]["out"], tests.cases[k][1])
        elif mode == "functional":
            ok, why = functional_output_matches(o.cases[k], tests.cases[k][1])
        else:
            ok, why = True, ""
        if not ok:
            return Verdict(False, "failed", f"case {k}: {why}")
    return Verdict(True, "ok", "")


def default_workers() -> int:
    return os.cpu_count() or 1


def check_many(jobs: Sequence[tuple[str, CodeTests]], workers: int | None = None,
               limits: Limits = Limits()) -> list[Verdict]:
    """check_program over many (code, tests), a bounded pool of threads, each with a
    long-lived harness sandbox of its own (``harness_pool``: a fresh forked child per
    check; each program in a fresh sandbox); verdicts in the order of ``jobs``."""
    workers = workers or default_workers()
    with HarnessPool() as harnesses, ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda j: check_program(j[0], j[1], limits,
                                                     harness=harnesses), jobs))
