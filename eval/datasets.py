"""Benchmark loaders: each benchmark's *official* annotation file -> :class:`Problem` records.

Published numbers are hard to compare because every project re-packages the benchmarks
differently, so we read the files the benchmark authors publish, as they publish them:

- MathVista ``testmini.json``: a dict keyed by pid; multiple-choice gold is the option *text*.
- MathVerse ``testmini.json`` (or ``testmini_text_only.json``): a list; options live inside
  the question text ("Choices:\\nA:40°"); multiple-choice gold is a letter; five problem
  versions per problem.
- MATH-Vision ``testmini.jsonl`` / ``test.jsonl``: ``<image1>`` placeholders in the question,
  options ``[]`` or five strings (sometimes just "A".."E": the content is in the image).
- We-Math ``testmini.json``: space-named fields (``knowledge concept``), one ``;``-separated
  option string, several rows (sub-steps and the composite question) per problem ``ID``.
- Text benchmarks for LLM cohorts: GSM8K (``question``, ``answer`` whose gold follows
  ``#### ``; JSONL as in openai/grade-school-math, parquet as in the hub's ``openai/gsm8k``)
  and MATH-500 (``problem``, ``answer``, ``subject``, ``level``, ``unique_id``; JSONL or
  parquet as in ``HuggingFaceH4/MATH-500``). AMC 2023, GPQA Diamond, HumanEval, MBPP,
  LiveCodeBench, MMLU and SciBench are read by :mod:`vlcohort.eval.text_datasets` (registered
  here when ``eval`` is imported; ``text7`` / ``comas7`` name the paper's groups).

The common hub parquet forms load too (``AI4Math/MathVista``, ``AI4Math/MathVerse``,
``MathLLMs/MathVision``, ``We-Math/We-Math``: one parquet file, or a downloaded snapshot
folder whose ``testmini`` files are preferred), through ``datasets`` with the embedded
images (``decoded_image`` / an ``Image`` column / a binary column) kept as bytes; the
loaders are the same, since those files carry the official fields.

Every loader returns the option texts in letter order (the form the grader takes), gold as
the grader takes it, and keeps the benchmark fields the scorers need in ``meta``. An item
whose image cannot be found is skipped, counted and listed (docs/design.md, rule 8), never dropped
silently and never a crash in the middle of a run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from vlcohort import bounded_json
from vlcohort.data.problems import LETTERS, Problem
from vlcohort.errors import json_error_text

__all__ = [
    "BENCHMARKS", "BENCHMARK_GROUPS", "DEFAULT_BENCHMARKS", "TEXT_BENCHMARKS", "BenchmarkData", "BenchmarkError",
    "SkippedItem", "find_benchmark_file",
    "load_benchmark", "parse_benchmark_names", "read_json", "read_jsonl",
]


class BenchmarkError(ValueError):
    """Bad benchmark input: the message names the file, the record and what to do."""


@dataclass(frozen=True)
class SkippedItem:
    """One record a loader could not use, and why (reported at the end of a run)."""

    id: str
    reason: str
    detail: str = ""


@dataclass
class BenchmarkData:
    """The usable problems of one benchmark file, plus what was skipped.

    ``rows`` counts every record in the file, so ``rows == len(problems) + len(skipped)``
    always holds: nothing disappears without a trace.
    """

    name: str
    path: Path
    problems: list[Problem]
    skipped: list[SkippedItem] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.problems) + len(self.skipped)

    def skipped_by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.skipped:
            counts[item.reason] = counts.get(item.reason, 0) + 1
        return counts


# --------------------------------------------------------------------------- file reading


def read_json(path: Path) -> Any:
    """A whole-file JSON document; a syntax error names the file, line and column."""
    raw = read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BenchmarkError(f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at offset "
                             f"{e.start}); save it as UTF-8 or download it again.") from e
    try:
        return bounded_json.loads(text, max_chars=len(text))
    except bounded_json.BadJSON as e:
        why = (f"line {e.syntax.lineno}: malformed JSON ({json_error_text(e.syntax)})"
               if e.syntax else str(e))
        raise BenchmarkError(f"{path}: {why}. Fix the file or download it again.") from None


def unreadable(path: Path, error: OSError) -> BenchmarkError:
    """A one-line error for an input path that cannot be read: missing, a folder where a
    file belongs, no permission, or another OS error (its message named)."""
    if isinstance(error, FileNotFoundError):
        why = "no such file; check the path"
    elif isinstance(error, IsADirectoryError) or Path(path).is_dir():
        why = "is a folder; give the file itself"
    elif isinstance(error, PermissionError):
        why = "permission denied; make it readable"
    else:
        why = f"cannot be read ({error.strerror or error}); check the file"
    return BenchmarkError(f"{path}: {why}.")


def read_bytes(path: Path) -> bytes:
    """The file's bytes; a path that cannot be read is a :class:`BenchmarkError`."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise unreadable(path, e) from e


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a malformed line names file and line.

    Lines are decoded one at a time, so a byte that is not UTF-8 names its line (a byte
    order mark before the first line is allowed); a path that cannot be opened (missing,
    a folder) is a one-line :class:`BenchmarkError` too."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise unreadable(path, e) from e
    with f:
        lines = bounded_json.numbered_lines(f)
        while True:
            try:
                lineno, raw = next(lines)
            except StopIteration:
                return
            except OSError as e:  # a folder opens on some systems and fails on read
                raise unreadable(path, e) from e
            if raw is None:
                raise BenchmarkError(f"{path}: line {lineno}: longer than "
                                     f"{bounded_json.MAX_CHARS} bytes; each line must be one "
                                     "JSON object.")
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise BenchmarkError(f"{path}: line {lineno}: not UTF-8 text (byte "
                                     f"{raw[e.start]:#04x} at column {e.start + 1}); save the "
                                     "file as UTF-8.") from e
            if not line.strip():
                continue
            try:  # without its line end: a line cut mid-string is "Unterminated string", not
                obj = bounded_json.loads(line.rstrip("\r\n"))  # "Invalid control character" (\n)
            except bounded_json.BadJSON as e:
                why = f"malformed JSON ({json_error_text(e.syntax)})" if e.syntax else str(e)
                raise BenchmarkError(f"{path}: line {lineno}: {why}. Each line must be one "
                                     "JSON object.") from None
            if not isinstance(obj, dict):
                raise BenchmarkError(f"{path}: line {lineno}: expected a JSON object, got "
                                     f"{type(obj).__name__}.")
            yield lineno, obj


def read_parquet(path: Path, splits: tuple[str, ...] = ()) -> list[dict]:
    """Rows of a parquet file, or of the parquet files of a folder (a downloaded hub
    snapshot), read through ``datasets`` with every ``Image`` column left undecoded: images
    come back as ``{"bytes": ..., "path": ...}`` dicts, decoded only when a model sees them.

    In a folder the files of the first split in ``splits`` that has any are read (hub
    files are named ``<split>-00000-of-00001.parquet`` or sit in a ``<split>/`` folder);
    with no such file, all parquet files."""
    import datasets

    from vlcohort.data.problems import image_feature_no_decode

    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        chosen: list[Path] = []
        for split in splits:
            chosen = ([f for f in files if f.name.startswith(f"{split}-") or f.stem == split]
                      or [f for f in files if f.parent.name == split])
            if chosen:
                break
        files = chosen or files
        if not files:
            raise BenchmarkError(f"{path}: no parquet files in this folder.")
    else:
        files = [path]
    try:
        ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    except Exception as e:  # broken parquet, mismatched schemas
        raise BenchmarkError(f"{path}: cannot be read as parquet: {e}") from e
    ds = ds.cast(datasets.Features({k: image_feature_no_decode(v) for k, v in ds.features.items()}))
    return [dict(row) for row in ds]


def read_records(path: Path, splits: tuple[str, ...] = ()) -> list[dict]:
    """A JSON list, a JSON dict of records (keyed by id), JSONL, or parquet (a file or a
    folder of files), as a list of dicts."""
    path = Path(path)
    if path.is_dir() or path.suffix == ".parquet":
        return read_parquet(path, splits)
    if path.suffix == ".jsonl":
        return [obj for _, obj in read_jsonl(path)]
    data = read_json(path)
    if isinstance(data, dict):
        return list(data.values())
    if isinstance(data, list):
        return data
    raise BenchmarkError(f"{path}: expected a list or a dict of records, got {type(data).__name__}.")


# --------------------------------------------------------------------------- images


def _image_roots(data_file: Path, extra: tuple[str, ...]) -> list[Path]:
    """Where an annotation's relative image path may live: beside the file (the official
    layout, paths like ``images/1.jpg``), in ``images/`` beside it, or in a named folder
    (the shared data's ``mathvision_images/``)."""
    base = data_file if data_file.is_dir() else data_file.parent  # a parquet folder: itself
    return [base, base / "images", *(base / name for name in extra)]


def resolve_image(rel: str, roots: list[Path]) -> Path | None:
    """The first existing ``root/rel`` or ``root/rel-without-its-first-folder``."""
    rel_path = Path(rel)
    candidates = [rel_path]
    if len(rel_path.parts) > 1:
        candidates.append(Path(*rel_path.parts[1:]))
    for root in roots:
        for cand in candidates:
            p = root / cand
            if p.is_file():
                return p
    return None


def _with_images(problem: Problem, rels: list, roots: list[Path],
                 skipped: list[SkippedItem], need_images: bool) -> Problem | None:
    """Attach resolved image paths; a missing one skips the problem (counted, listed).

    With ``need_images=False`` unresolved images are left out and the problem kept: that is
    for reading annotations alone (scoring saved responses, counting rows)."""
    paths: list = []
    for rel in rels:
        if isinstance(rel, dict):  # an embedded image (parquet): kept as bytes, decoded at render
            paths.append(rel)
            continue
        found = resolve_image(rel, roots)
        if found is None:
            if need_images:
                skipped.append(SkippedItem(problem.id, "missing_image",
                                           f"{rel} (looked in {', '.join(map(str, roots))})"))
                return None
            problem.meta.setdefault("missing_images", []).append(rel)
            continue
        paths.append(str(found))
    problem.images = paths
    return problem


def image_refs(row: dict, *columns: str) -> list:
    """The image of a record, from the first of ``columns`` that holds one.

    Hub parquet files embed the image: an HF ``Image`` column read undecoded gives
    ``{"bytes": ..., "path": ...}`` (MathVista's and MATH-Vision's ``decoded_image``,
    MathVerse's ``image``), and a plain binary column gives raw bytes; both are returned as
    a ``{"bytes", "path"}`` dict, which the adapters decode. Otherwise the first string is a
    path relative to the annotation file (the official JSON layout, or the ``image`` column
    that MathVista's parquet keeps beside ``decoded_image``)."""
    for col in columns:
        v = row.get(col)
        if isinstance(v, dict) and v.get("bytes"):
            return [{"bytes": v["bytes"], "path": v.get("path")}]
        if isinstance(v, (bytes, bytearray)) and v:
            return [{"bytes": bytes(v), "path": None}]
    for col in columns:
        v = row.get(col)
        if isinstance(v, dict) and v.get("path"):
            return [v["path"]]
        if isinstance(v, str) and v.strip():
            return [v]
    return []


# --------------------------------------------------------------------------- option parsing

_CHOICES_BLOCK = re.compile(r"\n\s*(?:Choices?|Options?)\s*:\s*\n", re.IGNORECASE)
_OPTION_LINE = re.compile(r"^\s*\(?([A-H])\s*[:.)]\s*(.*)$")


def split_choices_block(question: str) -> tuple[str, list[str] | None]:
    """``"...()\\nChoices:\\nA:40°\\nB:60°"`` -> (``"...()"``, ``["40°", "60°"]``).

    The stem is returned without the block because adapters list ``Problem.options``
    themselves; keeping both would show the options twice. A block that does not parse as
    consecutive letters A, B, ... is left in the text (options None)."""
    m = None
    for m in _CHOICES_BLOCK.finditer(question):
        pass
    if m is None:
        return question, None
    options: list[str] = []
    for line in question[m.end():].splitlines():
        if not line.strip():
            continue
        om = _OPTION_LINE.match(line)
        if om and len(options) < len(LETTERS) and om.group(1) == LETTERS[len(options)]:
            options.append(om.group(2).strip())
        elif options:
            options[-1] += "\n" + line.strip()  # a continuation line of the previous option
        else:
            return question, None
    if len(options) < 2:
        return question, None
    return question[:m.start()].rstrip(), options


def split_semicolon_options(option: str) -> list[str] | None:
    """We-Math's ``"A. 300, 400;B. 400, 300; E. No correct answer"`` -> option texts.

    Options are found by their letter markers in order (A, then B, ...), not by splitting
    at ';': a few published rows miss a ';' (``"A. 45° B. 60° ;C. 120°"``) or use a
    full-width period (``"B．②"``), and an option text may itself contain ';'."""
    text = option or ""
    starts: list[tuple[int, int]] = []  # (marker start, text start) per letter
    pos = 0
    for letter in LETTERS:
        m = re.compile(rf"(?:^|(?<=[;\s])){letter}\s*[.．:：)]").search(text, pos)
        if m is None:
            break
        starts.append((m.start(), m.end()))
        pos = m.end()
    if not starts:
        return None
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return [text[t:e].strip().rstrip(";").strip() for (_, t), e in zip(starts, ends)]


def _maybe_literal(value: Any) -> Any:
    """The Bard output file stores some fields as stringified Python (``"['a', 'b']"``)."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


# --------------------------------------------------------------------------- loaders

MATHVISION_PROMPT = ("Please solve the problem step by step and put your answer in one "
                     "\"\\boxed{}\". If it is a multiple choice question, only one letter is "
                     "allowed in the \"\\boxed{}\".")
WEMATH_PROMPT = (
    "Now, we require you to solve a multiple-choice math question. Please briefly describe "
    "your thought process and provide the final answer(option).\nQuestion: {question}\n"
    "Option: {option}\nRegarding the format, please answer following the template below, and "
    "be sure to include two <> symbols:\n<Thought process>: <<your thought process>> "
    "<Answer>: <<your option>>")


#: Where MathVista's official prompts (``data/query.json``: pid -> query) may sit, beside
#: the annotation file: the official name, the shared data's name, a ``mathvista/`` folder.
MATHVISTA_QUERY_FILES = ("query.json", "mathvista_query_testmini_and_test.json",
                         "mathvista_query.json", "mathvista/query.json", "data/query.json")


def mathvista_queries(path: Path) -> dict[str, str]:
    """The official queries (pid -> prompt) from the first query file beside ``path``, or
    {} when there is none. The annotation file itself carries no query (the hub parquet
    does, in its ``query`` column, which wins); ``--prompt official`` needs one."""
    base = path if path.is_dir() else path.parent
    for name in MATHVISTA_QUERY_FILES:
        f = base / name
        if f.is_file():
            data = read_json(f)
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise BenchmarkError(f"{f}: expected the official MathVista query file (a dict "
                                     "pid -> query string); move or rename this file.")
            return {str(k): v for k, v in data.items()}
    return {}


def _mathvista(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MathVista: gold of a multiple-choice item is the option text; ``precision`` and
    ``answer_type`` drive the official normalisation, so they are kept in ``meta``, with
    the metadata fields the official score file breaks accuracy down by."""
    roots = _image_roots(path, ("mathvista_images",))
    queries = mathvista_queries(path)
    problems, skipped = [], []
    for row in rows:
        pid = str(row["pid"])
        choices = _maybe_literal(row.get("choices"))
        metadata = _maybe_literal(row.get("metadata")) or {}
        skills = metadata.get("skills")  # a list (a numpy array from parquet)
        p = Problem(
            id=pid, text=row["question"], options=[str(c) for c in choices] if choices else None,
            gold=str(row["answer"]), source="mathvista",
            meta={"question_type": row.get("question_type"), "answer_type": row.get("answer_type"),
                  "precision": row.get("precision"), "unit": row.get("unit"),
                  "category": metadata.get("category"), "task": metadata.get("task"),
                  "context": metadata.get("context"), "grade": metadata.get("grade"),
                  "skills": [str(x) for x in (skills if skills is not None else [])],
                  "language": metadata.get("language"), "source_dataset": metadata.get("source"),
                  "official_query": row.get("query") or queries.get(pid)})
        rels = image_refs(row, "decoded_image", "image")
        if (p := _with_images(p, rels, roots, skipped, need_images)) is not None:
            problems.append(p)
    return BenchmarkData("mathvista", path, problems, skipped)


def _mathverse(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MathVerse: one record per (problem, version); ids are ``sample_index`` (unique over
    versions). Options are parsed out of the question text; gold is kept as published
    (messy: ``(C)``, ``2191.7 metres``) because the grader already reads those forms."""
    roots = _image_roots(path, ("mathverse_images",))
    problems, skipped = [], []
    for row in rows:
        question = row.get("question") or ""  # "" in every Vision Only record: it is in the image
        stem, options = split_choices_block(question)
        is_mc = row.get("question_type") == "multi-choice"
        p = Problem(
            id=str(row["sample_index"]), text=stem if (options and is_mc) else question,
            options=options if is_mc else None, gold=str(row["answer"]).strip(),
            source="mathverse",
            meta={"problem_index": str(row.get("problem_index")),
                  "problem_version": row.get("problem_version"),
                  "question_type": row.get("question_type"),
                  "subject": (row.get("metadata") or {}).get("subject"),
                  "subfield": (row.get("metadata") or {}).get("subfield"),
                  # the official judge prompt quotes the published question and answer as is
                  "official_question": question,
                  "official_answer": str(row["answer"]),
                  "official_query": row.get("query_cot")})
        rels = image_refs(row, "image")
        if (p := _with_images(p, rels, roots, skipped, need_images)) is not None:
            problems.append(p)
    return BenchmarkData("mathverse", path, problems, skipped)


def _mathvision(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MATH-Vision: ``<image1>`` stays in the text (adapters place the image there); gold
    is the letter for multiple choice, which the grader maps to the option."""
    roots = _image_roots(path, ("mathvision_images",))
    problems, skipped = [], []
    for row in rows:
        options = [str(o) for o in row.get("options") or []] or None
        official = row["question"] + (
            "\n" + "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options)) if options else "")
        p = Problem(
            id=str(row["id"]), text=row["question"], options=options, gold=str(row["answer"]),
            source="mathvision",
            meta={"level": row.get("level"), "subject": row.get("subject"),
                  "official_query": official + "\n" + MATHVISION_PROMPT})
        rels = image_refs(row, "decoded_image", "image")
        if (p := _with_images(p, rels, roots, skipped, need_images)) is not None:
            problems.append(p)
    return BenchmarkData("mathvision", path, problems, skipped)


def _wemath(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """We-Math: a row is one question of a problem (``ID``) at one step (``key``), so the
    item id is ``ID/key``; ``ID`` and ``key`` stay in ``meta`` for the four-dimensional
    metrics, which need every step of a problem."""
    roots = _image_roots(path, ("wemath_images",))
    problems, skipped = [], []
    for row in rows:
        pid = f"{row['ID']}/{row['key']}"
        options = split_semicolon_options(row.get("option", ""))
        p = Problem(
            id=pid, text=row["question"], options=options, gold=str(row["answer"]).strip(),
            source="wemath",
            meta={"ID": row["ID"], "key": row["key"],
                  "knowledge_concept": row.get("knowledge concept"),
                  "question_number": row.get("question number"),
                  "official_query": WEMATH_PROMPT.format(question=row["question"],
                                                         option=row.get("option", ""))})
        rels = image_refs(row, "image_path", "image")
        if (p := _with_images(p, rels, roots, skipped, need_images)) is not None:
            problems.append(p)
    return BenchmarkData("wemath", path, problems, skipped)


_GSM8K_GOLD = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def gsm8k_gold(answer: str) -> str | None:
    """The final answer of a GSM8K solution: the text after ``#### ``, thousands
    separators removed (``"...\\n#### 1,200"`` -> ``"1200"``); None when there is no ``####``."""
    m = _GSM8K_GOLD.search(answer or "")
    if m is None:
        return None
    gold = m.group(1).strip()
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", gold)


def _gsm8k(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """GSM8K: no ids in the files, so an item's id is its row number (0-based, counted
    over the whole file); the worked solution stays in ``meta["solution"]``."""
    problems, skipped = [], []
    for row in rows:
        pid = str(row.get("id", row["_row"]))
        gold = gsm8k_gold(str(row["answer"]))
        if gold is None:
            skipped.append(SkippedItem(pid, "no_gold", f"{path}: row {row['_row']}: the answer "
                                       "has no '#### <final answer>' line"))
            continue
        problems.append(Problem(id=pid, text=row["question"], gold=gold, source="gsm8k",
                                meta={"solution": row["answer"]}))
    return BenchmarkData("gsm8k", path, problems, skipped)


def _math500(rows: list[dict], path: Path, need_images: bool) -> BenchmarkData:
    """MATH-500: ids are ``unique_id`` (``test/precalculus/807.json``); gold is the
    ``answer`` column (LaTeX, as the grader reads it); subject and level for the tables."""
    problems = [Problem(id=str(row["unique_id"]), text=row["problem"], gold=str(row["answer"]),
                        source="math500",
                        meta={"subject": row.get("subject"), "level": row.get("level"),
                              "solution": row.get("solution")})
                for row in rows]
    return BenchmarkData("math500", path, problems, [])


@dataclass(frozen=True)
class BenchmarkSpec:
    """How to find and read one benchmark; ``files`` are tried in order inside a data dir."""

    name: str
    loader: Callable[[list[dict], Path, bool], BenchmarkData]
    files: tuple[str, ...]  # glob patterns allowed (first match in sorted order)
    required: tuple[str, ...]  # fields every record must have
    splits: tuple[str, ...] = ("testmini", "test")  # preferred split in a parquet folder
    folders: tuple[str, ...] = ()  # folders (in a data dir) that may hold a hub snapshot
    reader: Callable[[Path, tuple[str, ...]], list[dict]] | None = None
    """Reads the found file / folder into records when :func:`read_records` cannot (gzip
    JSONL, CSV, a folder of release files: :func:`vlcohort.eval.text_datasets.read_text_records`).
    A pattern in ``files`` ending in ``/`` names such a folder."""


BENCHMARKS: dict[str, BenchmarkSpec] = {
    "mathvista": BenchmarkSpec("mathvista", _mathvista, (
        "mathvista_testmini.json", "mathvista/testmini.json", "mathvista/data/testmini.json",
        "testmini.json", "mathvista_testmini.parquet", "mathvista/data/testmini-*.parquet",
        "MathVista/data/testmini-*.parquet"), ("pid", "question", "answer"),
        folders=("mathvista", "MathVista")),
    "mathverse": BenchmarkSpec("mathverse", _mathverse, (
        "mathverse_testmini.json", "mathverse/testmini.json", "mathverse/data/testmini.json",
        "mathverse_testmini_text_only.json", "mathverse/testmini_text_only.json",
        "mathverse_testmini.parquet"), ("sample_index", "answer"),  # Vision Only: question ""
        folders=("mathverse", "MathVerse")),
    "mathvision": BenchmarkSpec("mathvision", _mathvision, (
        "mathvision_testmini.jsonl", "mathvision/testmini.jsonl", "mathvision/data/testmini.jsonl",
        "mathvision_test.jsonl", "mathvision/test.jsonl", "mathvision_testmini.parquet",
        "mathvision/data/testmini-*.parquet", "MathVision/data/testmini-*.parquet"),
        ("id", "question", "answer"), folders=("mathvision", "MathVision", "MATH-V")),
    "wemath": BenchmarkSpec("wemath", _wemath, (
        "wemath_testmini.json", "wemath/testmini.json", "wemath/data/testmini.json",
        "wemath_testmini.parquet"), ("ID", "key", "question", "answer"),
        folders=("wemath", "We-Math")),
    "gsm8k": BenchmarkSpec("gsm8k", _gsm8k, (
        "gsm8k_test.jsonl", "gsm8k/test.jsonl", "gsm8k/grade_school_math/data/test.jsonl",
        "grade_school_math/data/test.jsonl", "gsm8k_test.parquet", "gsm8k/main/test-*.parquet",
        "gsm8k/test-*.parquet"), ("question", "answer"), ("test",), ("gsm8k",)),
    "math500": BenchmarkSpec("math500", _math500, (
        "math500_test.jsonl", "math500/test.jsonl", "MATH-500/test.jsonl", "math500.jsonl",
        "math500_test.parquet", "math500/test-*.parquet", "math500/data/test-*.parquet",
        "MATH-500/test-*.parquet"), ("problem", "answer", "unique_id"), ("test",),
        ("math500", "MATH-500")),
}
#: The four vision-language benchmarks the paper reports (the CLI default).
DEFAULT_BENCHMARKS = ("mathvista", "mathverse", "mathvision", "wemath")
#: Text-only benchmarks, for cohorts of language models (all but GSM8K and MATH-500 are
#: registered by :mod:`vlcohort.eval.text_datasets`, which ``eval/__init__.py`` imports).
TEXT_BENCHMARKS = ("gsm8k", "math500", "amc", "gpqa", "humaneval", "mbpp", "livecodebench",
                   "mmlu", "scibench")
#: Names that stand for several benchmarks on the command line, in their table's column
#: order (``text7``, ``comas7``: registered by :mod:`vlcohort.eval.text_datasets`).
BENCHMARK_GROUPS: dict[str, tuple[str, ...]] = {}


def parse_benchmark_names(spec: str | list[str]) -> list[str]:
    """``"mathvista,wemath"`` -> names; an unknown name lists the known ones."""
    names = [n.strip().lower() for n in (spec.split(",") if isinstance(spec, str) else spec)]
    # a group (text7, comas7) stands for its benchmarks, in the group's column order
    names = [m for n in names if n for m in BENCHMARK_GROUPS.get(n, (n,))]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise BenchmarkError(f"unknown benchmark {', '.join(map(repr, unknown)) or '(none given)'}; "
                             f"known: {', '.join(BENCHMARKS)} (groups: text7, comas7)")
    return list(dict.fromkeys(names))


def find_benchmark_file(name: str, data_dir: Path) -> Path:
    """The annotation file of ``name`` in ``data_dir`` (or ``data_dir`` itself, a file).

    Tried in order: the spec's file names and patterns; then a folder of parquet files
    (a hub snapshot such as ``AI4Math/MathVista`` downloaded into ``data_dir/mathvista``, or
    ``data_dir`` itself), read by :func:`read_parquet`."""
    data_dir = Path(data_dir)
    if data_dir.is_file():
        return data_dir
    for pattern in BENCHMARKS[name].files:
        if any(c in pattern for c in "*?["):
            hits = sorted(p for p in data_dir.glob(pattern) if p.is_file())
            if hits:
                return hits[0]
        elif (data_dir / pattern).is_file():
            return data_dir / pattern
        elif pattern.endswith("/") and (data_dir / pattern).is_dir():
            return data_dir / pattern.rstrip("/")
    # a downloaded hub snapshot: a folder of parquet files (the split is chosen on reading)
    for folder in (data_dir / f for f in BENCHMARKS[name].folders):
        if folder.is_dir() and next(folder.rglob("*.parquet"), None) is not None:
            return folder
    # data_dir itself a snapshot: parquet files in it, in data/ or in a split folder
    if any(next(d.glob("*.parquet"), None) for d in
           (data_dir, data_dir / "data", *(data_dir / s for s in BENCHMARKS[name].splits))):
        return data_dir
    raise BenchmarkError(f"{name}: no annotation file in {data_dir}; looked for "
                         f"{', '.join(BENCHMARKS[name].files)} (or a folder of parquet files). "
                         "Put the benchmark's official file there (images in an images/ "
                         "folder beside it), or its hub parquet files.")


def load_benchmark(name: str, path: Path, need_images: bool = True) -> BenchmarkData:
    """Read one benchmark's official annotation file (``path``: the file or a data dir).

    A record missing a required field is skipped and listed (reason ``missing_field``);
    a duplicate id is skipped and listed (reason ``duplicate_id``)."""
    name = parse_benchmark_names(name)[0]
    spec = BENCHMARKS[name]
    path = find_benchmark_file(name, Path(path))
    good, bad = [], []
    rows = spec.reader(path, spec.splits) if spec.reader is not None else read_records(path, spec.splits)
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            row = {**row, "_row": i}
        missing = [f for f in spec.required if row.get(f) in (None, "")] if isinstance(row, dict) else ["*"]
        if missing:
            bad.append(SkippedItem(f"record {i}", "missing_field",
                                   f"{path}: record {i} lacks {', '.join(missing)}"))
        else:
            good.append(row)
    data = spec.loader(good, path, need_images)
    seen: set[str] = set()
    unique = []
    for p in data.problems:
        if p.id in seen:
            bad.append(SkippedItem(p.id, "duplicate_id", f"{path}: id {p.id!r} appears twice"))
            continue
        seen.add(p.id)
        unique.append(p)
    data.problems = unique
    data.skipped = [*data.skipped, *bad]
    return data
