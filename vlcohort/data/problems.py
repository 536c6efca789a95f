"""The Problem record: one unlabeled (or labelled) question, as every part of vlcohort sees it.

Adapters render it, engines generate for it, the grader and the vote read its options, and
metrics read its gold. Gold is never shown to a model: adapters render only ``text``,
``images`` and ``options``.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from vlcohort import bounded_json

LETTERS = "ABCDEFGH"


@dataclass
class Problem:
    """One question.

    Attributes:
        id: unique within a dataset; error messages and outputs are keyed by it.
        text: the question as shown to the model. It may hold image placeholders
            (``<image>`` or ``<image1>``, ``<image2>``...) marking where each image goes; when
            it holds none, images are placed before the text.
        images: 0..n images, each a path (str / Path), raw bytes, a PIL image, or a
            ``{"bytes": ..., "path": ...}`` dict as HF ``datasets`` Image features yield.
        options: the option texts in letter order (A, B, ...) for multiple choice, else None.
            This is the form the grader takes, so that "C" and the text of option C are one
            answer.
        gold: the reference answer, if known. Used for metrics and the ``ground_truth``
            reward only; never rendered.
        source: where the record came from (dataset name, file), for messages and metrics.
        meta: anything else a loader wants to keep (benchmark fields, versions).
    """

    id: str
    text: str
    images: list[Any] = field(default_factory=list)
    options: list[str] | None = None
    gold: str | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.options is not None and len(self.options) > len(LETTERS):
            raise ValueError(
                f"problem {self.id!r}: {len(self.options)} options, at most {len(LETTERS)} "
                f"(letters {LETTERS[0]}-{LETTERS[-1]}) are supported"
            )


# ============================================================================ options in text

# A header that introduces a list of options ("Choices:", "Options:", "Answer Choices:").
_HEADER = re.compile(r"(?im)(?:^|(?<=\s))(?:answer\s+)?(?:choices|options)\s*[:：]\s*")
# Option markers: "(A)" or a bare "A." / "A:" / "A)" not glued to a word before it.
_PAREN = re.compile(r"\(([A-H])\)\s*")
_BARE = re.compile(r"(?<![A-Za-z0-9(])([A-H])\s*[.:：)]\s*")


def _chain(text: str, pattern: re.Pattern, strict: bool) -> tuple[int, list[str], str] | None:
    """The last run of markers A, B, C... in ``text`` reaching its end.

    Returns (start of the "A" marker, option texts, trailing text) or None. ``strict``
    (no "Choices:" header before the list) demands that bare markers after "A" start a
    line or follow a ";", so that prose such as "point A. Then B. ..." is not read as options.
    """
    marks = list(pattern.finditer(text))
    for ai in range(len(marks) - 1, -1, -1):
        if marks[ai].group(1) != "A":
            continue
        chain = [marks[ai]]
        for m in marks[ai + 1:]:
            if m.group(1) == LETTERS[len(chain)]:
                if strict and pattern is _BARE:
                    before = text[chain[-1].end():m.start()].rstrip(" \t")
                    if not (before.endswith(";") or before.endswith("\n") or before.endswith("；")):
                        continue
                chain.append(m)
                if len(chain) == len(LETTERS):
                    break
        if len(chain) < 2:
            continue
        if strict and pattern is _BARE:
            head = text[:chain[0].start()]
            if head and not head[-1].isspace() and head[-1] not in ";:":
                continue
        opts = [text[m.end():n.start()] for m, n in zip(chain, chain[1:])]
        last = text[chain[-1].end():]
        trailing = ""
        newline_list = all("\n" in text[m.end():n.start()] for m, n in zip(chain, chain[1:]))
        if newline_list and "\n" in last.strip():  # one option per line: later lines are prose
            last, trailing = last.strip().split("\n", 1)
        opts.append(last)
        opts = [o.strip().rstrip(";；,").strip() for o in opts]
        if any(not o for o in opts):
            continue
        return chain[0].start(), opts, trailing.strip()
    return None


def split_options(text: str) -> tuple[str, list[str] | None]:
    """Find a list of lettered options at the end of a question.

    Recognised: a "Choices:" / "Options:" header followed by options in any of the forms
    below; without a header, "(A) x (B) y" anywhere at the end, or bare "A. x;B. y" /
    one-per-line "A: x" lists. Returns (question without the options block, option texts in
    letter order), or (text, None) when there is no such list.

    The block is removed from the question on purpose: adapters append
    ``Choices:\\nA. ...`` themselves whenever ``Problem.options`` is set, so keeping it
    would show every option twice (and in two formats). Prose after a one-per-line list
    (an instruction line, say) is kept after the question.
    """
    if not text:
        return text, None
    headers = list(_HEADER.finditer(text))
    if headers:
        h = headers[-1]
        body = text[h.end():]
        for pattern in (_PAREN, _BARE):
            found = _chain(body, pattern, strict=False)
            if found and not body[:found[0]].strip():
                _, opts, trailing = found
                stem = text[:h.start()].rstrip()
                return (stem + ("\n" + trailing if trailing else "")), opts
    for pattern in (_PAREN, _BARE):
        found = _chain(text, pattern, strict=True)
        if found:
            start, opts, trailing = found
            stem = text[:start].rstrip()
            return (stem + ("\n" + trailing if trailing else "")), opts
    return text, None


def parse_options_field(value: Any) -> list[str] | None:
    """An options column: a list of texts, a JSON list, or a lettered string ("A. x;B. y")."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        opts = [str(v).strip() for v in value if v is not None and str(v).strip()]
        return opts or None
    text = str(value).strip()
    if not text:
        return None
    if text.startswith("["):
        try:
            parsed = bounded_json.loads(text)
        except bounded_json.BadJSON:
            parsed = None
        if isinstance(parsed, list):
            return parse_options_field(parsed)
    for pattern in (_PAREN, _BARE):
        found = _chain(text, pattern, strict=False)
        if found and not text[:found[0]].strip():
            return found[1]
    return None


# ============================================================================ loading

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


def answer_from_solution(solution: Any) -> str | None:
    """The gold inside a ``<think>...</think><answer>X</answer>`` solution (the last tag)."""
    if solution is None:
        return None
    found = _ANSWER_TAG.findall(str(solution))
    if found and found[-1].strip():
        return found[-1].strip()
    return None


def answer_from_boxed(solution: Any) -> str | None:
    """The gold of a worked solution: the content of its last ``\\boxed{...}`` (MATH-style
    data, where the solution column ends in the boxed final answer)."""
    if solution is None:
        return None
    from vlcohort.answers.extract import extract_answer

    return extract_answer(str(solution), style="boxed")


@dataclass
class Columns:
    """Which column holds which field. ``images`` may hold one image or a list; a column
    that a dataset lacks is treated as empty, except ``question`` (an error)."""

    id: str = "id"
    question: str = "question"
    images: str = "images"
    options: str = "options"
    answer: str = "answer"
    answer_is_solution: bool = False  # the answer column holds <answer>X</answer> somewhere
    answer_is_boxed: bool = False  # the answer column is a worked solution ending in \boxed{X}
    task: str = "task"  # the record's task family (meta["task"]): held-out accuracy per family


PRESETS: dict[str, Columns] = {
    # MMR1/MMR1-Math-RL-Data-v0: images (list), problem, answer
    "mmr1": Columns(question="problem", images="images", answer="answer"),
    # lmms-lab/multimodal-open-r1-8k-verified: image, problem, solution (<answer> tag)
    "open_r1": Columns(question="problem", images="image", answer="solution",
                       answer_is_solution=True),
    # MATH (e.g. DigitalLearningGmbH/MATH-lighteval): problem, solution (gold in its last
    # \boxed{}), level, type; text only
    "math": Columns(question="problem", images="images", answer="solution",
                    answer_is_boxed=True, task="type"),
    "generic": Columns(),
}


class DataError(ValueError):
    """A dataset that cannot be used at all (missing file, missing question column, no
    usable record). Bad single records are not errors: they are skipped and counted."""


@dataclass
class LoadReport:
    """What a loader read, kept and skipped (by reason), with the first few skipped records
    named by file, row and field so that a user can find and fix them."""

    source: str
    rows: int = 0
    loaded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    max_examples: int = 5
    filtered: int = 0  # rows left out on purpose by data.where (not bad records)

    def skip(self, reason: str, row: int, fld: str, message: str, unit: str = "row") -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples) < self.max_examples:
            where = f"field {fld!r}: " if fld != "*" else ""
            self.examples.append(f"{self.source}, {unit} {row}, {where}{message}")

    @property
    def bad_fraction(self) -> float:
        return sum(self.skipped.values()) / self.rows if self.rows else 0.0

    def summary(self) -> str:
        lines = [f"{self.source}: {self.rows} rows read, {self.loaded} problems loaded"]
        if self.filtered:
            lines.append(f"  {self.filtered} rows left out by data.where")
        if self.skipped:
            total = sum(self.skipped.values())
            by = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items()))
            lines.append(f"  skipped {total} ({by}); first ones:")
            lines += [f"    {e}" for e in self.examples]
        return "\n".join(lines)


def image_feature_no_decode(ft):
    """The same feature with every HF ``Image`` left undecoded: dicts of bytes/path, so
    that nothing is decoded at load and a broken image fails (and is counted) at render.

    Public: ``eval/datasets.py`` reads benchmark parquet files the same way."""
    from datasets import Image, List, Sequence

    if isinstance(ft, Image):
        return Image(decode=False)
    if isinstance(ft, List):
        return List(image_feature_no_decode(ft.feature), length=ft.length)
    if isinstance(ft, Sequence):
        return Sequence(image_feature_no_decode(ft.feature), length=ft.length)
    return ft


def open_dataset(path: str, *, source: str = "file", split: str = "train",
                 bad_lines: list[tuple[int, str]] | None = None):
    """A ``datasets.Dataset`` and the folder relative image paths are resolved against.

    A JSONL file's lines that are not JSON objects are skipped and listed in ``bad_lines``.

    ``source=file``: a parquet / JSON / JSONL file, a saved dataset folder
    (``save_to_disk``), or a folder of data files (e.g. a downloaded hub snapshot).
    ``source=hub``: a hub id (needs the network).
    """
    import datasets

    if source == "hub":
        try:
            ds = datasets.load_dataset(path, split=split)
        except Exception as e:  # the hub's errors are many; name the key
            raise DataError(f"data.path={path!r} (data.source=hub): could not load split "
                            f"{split!r}: {e}. Is the hub reachable? Otherwise download the "
                            "files and use data.source=file.") from e
        return ds, None
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"data.path: {p} does not exist; give a parquet/JSON/JSONL file or a "
                        "dataset folder")
    if p.is_dir():
        base = p
        if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() \
                or (p / "state.json").exists():
            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise DataError(f"data.split: {split!r} is not in {p} (splits: "
                                    f"{', '.join(ds)})")
                ds = ds[split]
        else:
            try:
                ds = datasets.load_dataset(str(p), split=split)
            except ValueError as e:
                raise DataError(f"data.path={p}: could not read split {split!r} from the "
                                f"folder: {e}") from e
    else:
        base = p.parent
        kind = {".parquet": "parquet", ".json": "json", ".jsonl": "json"}.get(p.suffix.lower())
        if kind is None:
            raise DataError(f"data.path: {p}: unknown file type {p.suffix!r}; use .parquet, "
                            ".json or .jsonl (or a dataset folder)")
        if p.suffix.lower() == ".jsonl":
            ds = _jsonl_dataset(p, bad_lines)
        else:
            try:
                ds = datasets.load_dataset(kind, data_files=str(p), split="train")
            except Exception as e:  # malformed JSON, broken parquet
                raise DataError(f"data.path: {p}: cannot be read as {kind}: {e}") from e
    ds = ds.cast(datasets.Features({k: image_feature_no_decode(v)
                                    for k, v in ds.features.items()}))
    return ds, base


def _jsonl_record(line: str | None) -> tuple[dict | None, str]:
    """One JSONL line as (record, "") or (None, why it is not one); ``None`` is a line
    past the length bound."""
    if line is None:
        return None, f"a line of more than {bounded_json.MAX_CHARS} characters"
    try:  # without its line end: a line cut mid-string is "Unterminated string", not
        obj = bounded_json.loads(line.rstrip("\r\n"))  # "Invalid control character" (\n)
    except bounded_json.BadJSON as e:
        return None, str(e)
    if not isinstance(obj, dict):
        return None, f"a JSON {type(obj).__name__}, not an object"
    return obj, ""


def _jsonl_dataset(path: Path, bad_lines: list[tuple[int, str]] | None):
    """A JSONL file as a dataset, a line that is not one JSON object skipped and recorded
    in ``bad_lines`` as ``(line number, why)`` (docs/design.md, rule 8: one bad record never costs
    the file). ``datasets``' own JSON reader refuses the whole file for one bad line."""
    import datasets

    rows: list[dict] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in bounded_json.numbered_lines(f):
            if line is not None and not line.strip():
                continue
            obj, why = _jsonl_record(line)
            if obj is not None:
                rows.append(obj)
            elif bad_lines is not None:
                bad_lines.append((lineno, why))
    if not rows:
        raise DataError(f"data.path: {path}: no line is a JSON object"
                        + (f" (line {bad_lines[0][0]}: {bad_lines[0][1]})" if bad_lines else "")
                        + "; each line must be one record")
    try:
        return datasets.Dataset.from_list(rows)
    except Exception as e:  # columns of mixed types across lines
        raise DataError(f"data.path: {path}: the records do not share one schema ({e}); "
                        "give each column one type in every line") from e


def _is_blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _images_of(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v for v in value if v is not None]
    return [value]


#: PIL's own decompression-bomb threshold (``Image.MAX_IMAGE_PIXELS``), the default of
#: ``data.max_image_pixels``.
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485


def _check_image(src: Any, base: Path | None,
                 max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[str, str] | None:
    """Load-time checks, header only (nothing is decoded): (reason, message) or None.

    Reasons: ``image_missing`` (no path, no bytes), ``image_not_found``,
    ``image_unreadable`` (not an image PIL can identify: a truncated download, an HTML
    error page saved as .png), ``image_too_large`` (over ``max_pixels``: decoding it would
    take gigabytes before the processor shrinks it; 0: no limit). A header that reads but
    pixels that do not decode still fail at render, where the step skips and counts them."""
    if isinstance(src, dict):
        if src.get("bytes"):
            src = src["bytes"]
        elif not src.get("path"):
            return "image_missing", "image has neither bytes nor a path"
        else:
            src = src["path"]
    where = "image bytes"
    if isinstance(src, (str, Path)):
        if not str(src).strip():
            return "image_missing", "empty image path"
        p = Path(src)
        if not p.is_absolute() and base is not None:
            p = base / p
        if not p.is_file():
            return "image_not_found", f"image file not found: {p}"
        src, where = p, str(p)
    elif isinstance(src, (bytes, bytearray)):
        if len(src) == 0:
            return "image_unreadable", "image bytes are empty"
        src = io.BytesIO(src)
    else:
        return None  # a PIL image, or another object a processor takes: nothing to read
    return _image_header_problem(src, where, max_pixels)


def _image_header_problem(src, where: str, max_pixels: int) -> tuple[str, str] | None:
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(src) as im:  # reads the header only
                w, h = im.size
    except Image.DecompressionBombError:  # over twice PIL's own limit
        return "image_too_large", (f"{where}: over twice PIL's {Image.MAX_IMAGE_PIXELS} "
                                   "pixel limit; downscale it")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        return "image_unreadable", f"{where}: not a readable image ({type(e).__name__}: {e})"
    if max_pixels and w * h > max_pixels:
        return "image_too_large", (f"{where}: {w}x{h} = {w * h} pixels, over "
                                   f"data.max_image_pixels={max_pixels}; downscale the image "
                                   "or raise the limit")
    return None


#: ``meta`` field -> the record fields it is read from, first present wins: a code prompt's
#: public inputs (the vote runs programs on them, ``reward.answer_kind=code``) and its
#: tests (the ``ground_truth`` reward), each one ``code.checks.CodeTests`` dict (or that
#: dict as a JSON string), e.g. ``{"kind": "stdin", "cases": [["1 2\\n", "3\\n"]]}``.
CODE_FIELDS: dict[str, tuple[str, ...]] = {
    "code_public": ("code_public", "public_tests"),
    "code_tests": ("code_tests", "tests"),
}


@dataclass(frozen=True)
class RecordNeeds:
    """What a training record must carry for one ``reward.answer_kind``: whether its answers
    compare with the record's gold (then a run graded against gold needs one), and the
    :data:`CODE_FIELDS` its meta needs, with and without a ``ground_truth`` grading."""

    has_gold: bool
    fields_graded: tuple[str, ...] = ()
    fields_voted: tuple[str, ...] = ()

    def required_fields(self, gold_needed: bool) -> tuple[str, ...]:
        return self.fields_graded if gold_needed else self.fields_voted


#: ``reward.answer_kind`` -> what its records carry. The data layer reads it when loading;
#: ``training/rewards.py``'s answer kinds (one per name here) read it too, so the facts are
#: written once, below both.
ANSWER_KIND_NEEDS: dict[str, RecordNeeds] = {
    "math": RecordNeeds(has_gold=True),
    "code": RecordNeeds(has_gold=False, fields_graded=("code_public", "code_tests"),
                        fields_voted=("code_public",)),
}


def code_tests_field(value: Any) -> dict | None:
    """A record's code-tests field as a checked, JSON-able ``CodeTests`` dict (None when
    blank). Raises ValueError saying what is wrong; the loader skips and counts the record."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = bounded_json.loads(value)
        except bounded_json.BadJSON as e:
            raise ValueError(str(e)) from None
    if not isinstance(value, dict):
        raise ValueError(f"a {type(value).__name__}, not a CodeTests dict with a 'kind'")
    from vlcohort.code.checks import CodeTests

    # a dataset's shared schema fills keys a record lacks with None: leave them to defaults
    present = {k: v for k, v in value.items() if v is not None}
    try:
        tests = CodeTests.from_dict(present)
    except Exception as e:  # whatever from_dict refuses, named per record
        raise ValueError(f"not a CodeTests dict: {e}") from None
    return tests.to_dict()


def _code_meta(rec: dict, names: set[str]) -> tuple[dict[str, dict], tuple[str, str, str] | None]:
    """The ``meta`` entries of :data:`CODE_FIELDS` a record carries, or the first bad one
    as (meta field, record field, why)."""
    out: dict[str, dict] = {}
    for meta_key, fields in CODE_FIELDS.items():
        fld = next((f for f in fields if f in names and rec.get(f) is not None), None)
        if fld is None:
            continue
        try:
            d = code_tests_field(rec.get(fld))
        except ValueError as e:
            return out, (meta_key, fld, str(e))
        if d is not None:
            out[meta_key] = d
    return out, None


def keep_where(ds, where: dict[str, list[Any]], where_text: str):
    """The rows of ``ds`` whose column ``c`` holds one of ``where[c]`` for every ``c``
    (compared as stripped text, so ``3`` matches a column value 3 or "3"), and how many were
    left out. Reads only the named columns (images are not touched)."""
    if not where:
        return ds, 0
    names = set(ds.column_names)
    for column in where:
        if column not in names:
            raise DataError(f"data.where.{column}: column {column!r} is not in {where_text} "
                            f"(columns: {', '.join(sorted(names))})")
    keys = list(where)
    allowed = [{str(v).strip() for v in where[k]} for k in keys]

    def keep(*values) -> bool:
        return all(v is not None and str(v).strip() in ok for v, ok in zip(values, allowed))

    kept = ds.filter(keep, input_columns=keys)
    return kept, len(ds) - len(kept)


def load_problems_from(path: str, *, source: str = "file", preset: str = "generic",
                       columns: Columns | None = None, split: str = "train",
                       limit: int = 0, require_answer: bool = False,
                       extra_columns: Sequence[str] = (),
                       where: dict[str, list[Any]] | None = None,
                       require_code: Sequence[str] = (),
                       max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                       ) -> tuple[list[Problem], LoadReport]:
    """Read problems from a dataset file/folder/hub id; bad records skipped and counted.

    ``columns`` overrides the preset's (``None``: the preset's own). ``limit`` reads at
    most that many rows (0: all), counted after ``where`` (``{column: [values]}``, see
    :func:`keep_where`) has left out the rows it does not want. ``extra_columns`` are text
    columns kept in
    ``meta["columns"]`` (per-agent views read their prompt from them). Images are checked
    only cheaply here (a path that does not exist, an image with neither bytes nor path);
    decoding is left to rendering, which skips and counts a broken image.

    ``require_code`` (``reward.answer_kind=code``): the :data:`CODE_FIELDS` meta entries
    every record must carry (``code_public``; with a ``ground_truth`` agent also
    ``code_tests``); a record without one, or with one that is not a CodeTests dict, is
    skipped and counted (``missing_code_public``, ``bad_code_tests``...). Code fields are
    read only when asked for, so a math run never trips over a ``tests`` column.
    """
    if preset not in PRESETS:
        raise DataError(f"data.preset: {preset!r} is not one of: {', '.join(PRESETS)}")
    bad_lines: list[tuple[int, str]] = []
    ds, base = open_dataset(path, source=source, split=split, bad_lines=bad_lines)
    names = set(ds.column_names)
    where_text = f"{path}" + (f" [{split}]" if source == "hub" or (base is not None and Path(path).is_dir()) else "")
    cols = checked_columns(columns or PRESETS[preset], names, extra_columns, where_text)
    ds, filtered = keep_where(ds, where or {}, where_text)
    if limit and limit < len(ds):
        ds = ds.select(range(limit))
    report = LoadReport(source=where_text, filtered=filtered)
    for lineno, why in bad_lines:
        report.rows += 1
        report.skip("malformed_line", lineno, "*", why, unit="line")
    reading = RecordReading(cols=cols, names=frozenset(names), base=base,
                            name=Path(path).stem if source == "file" else path,
                            require_answer=require_answer, require_code=tuple(require_code),
                            extra_columns=tuple(extra_columns), max_image_pixels=max_image_pixels)
    seen: set[str] = set()
    problems: list[Problem] = []
    for row, rec in enumerate(ds):
        report.rows += 1
        pid = rec.get(cols.id) if cols.id in names else None
        pid = f"{reading.name}:{row}" if _is_blank(pid) else str(pid).strip()
        q = rec.get(cols.question)
        if _is_blank(q):
            report.skip("empty_question", row, cols.question, f"problem {pid!r}: empty question")
            continue
        if pid in seen:
            report.skip("duplicate_id", row, cols.id, f"id {pid!r} seen before (first kept)")
            continue
        got = reading.problem(rec, row, pid, str(q).strip())
        if isinstance(got, RecordSkip):
            report.skip(got.reason, row, got.field, f"problem {pid!r}: {got.why}")
            continue
        seen.add(pid)
        problems.append(got)
    report.loaded = len(problems)
    return problems, report


def checked_columns(cols: Columns, names: set[str], extra_columns: Sequence[str],
                    where_text: str) -> Columns:
    """The columns to read from a dataset with columns ``names``: a lone ``image`` column
    stands in for ``images``; a missing question column or view column is a
    :class:`DataError` naming the dataset, the key and the columns there are."""
    if cols.images not in names and cols.images == "images" and "image" in names:
        cols = replace(cols, images="image")  # one image per record, as many files name it
    if cols.question not in names:
        raise DataError(f"data.columns.question: column {cols.question!r} is not in {where_text} "
                        f"(columns: {', '.join(sorted(names))}); set data.columns.question or "
                        "data.preset")
    for key in extra_columns:
        if key not in names:
            raise DataError(f"agents.*.view.column: column {key!r} is not in {where_text} "
                            f"(columns: {', '.join(sorted(names))})")
    return cols


@dataclass(frozen=True)
class RecordSkip:
    """Why one record is skipped: the reason counted, the field named, the message."""

    reason: str
    field: str
    why: str


@dataclass(frozen=True)
class RecordReading:
    """How :func:`load_problems_from` turns one record into a :class:`Problem`: the columns,
    the dataset's column names, the folder relative image paths resolve against (None: no
    local folder), the source name, and what the run requires of a record."""

    cols: Columns
    names: frozenset[str]
    base: Path | None
    name: str
    require_answer: bool = False
    require_code: tuple[str, ...] = ()
    extra_columns: tuple[str, ...] = ()
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    def problem(self, rec: dict, row: int, pid: str, question: str) -> Problem | RecordSkip:
        """Record ``rec`` (row ``row``, id ``pid``, non-empty ``question``) as a problem, or
        the first reason it cannot be one: an image, the answer, the options, the code fields."""
        cols, names = self.cols, self.names
        images = _images_of(rec.get(cols.images)) if cols.images in names else []
        for i, src in enumerate(images):
            bad = _check_image(src, self.base, self.max_image_pixels)
            if bad:
                return RecordSkip(bad[0], f"{cols.images}[{i}]", bad[1])
        gold = gold_of(rec.get(cols.answer) if cols.answer in names else None, cols)
        if gold is None and self.require_answer:
            return RecordSkip("missing_answer", cols.answer,
                              "no answer (the ground_truth reward and held-out scores need one)")
        text, options = split_options(question)
        from_column = parse_options_field(rec.get(cols.options)) if cols.options in names else None
        if from_column:
            options = from_column  # the column wins; a block in the text was still removed
        if not text.strip():
            text = question  # the question *was* its options: keep it as written
        if options and len(options) > len(LETTERS):
            return RecordSkip("too_many_options", cols.options,
                              f"{len(options)} options, at most {len(LETTERS)}")
        meta: dict[str, Any] = {"row": row}
        task = rec.get(cols.task) if cols.task in names else None
        if not _is_blank(task):
            meta["task"] = str(task).strip()
        if self.require_code:
            code = self.code_meta(rec)
            if isinstance(code, RecordSkip):
                return code
            meta.update(code)
        if self.base is not None:
            meta["base_dir"] = str(self.base)
        if self.extra_columns:
            meta["columns"] = {k: rec.get(k) for k in self.extra_columns}
        return Problem(id=pid, text=text, images=images, options=options, gold=gold,
                       source=self.name, meta=meta)

    def code_meta(self, rec: dict) -> dict[str, Any] | RecordSkip:
        """The record's code fields (``reward.answer_kind=code``), or why it lacks one."""
        code, bad_code = _code_meta(rec, self.names)
        if bad_code:
            meta_key, fld, why = bad_code
            return RecordSkip("bad_" + meta_key, fld, why)
        lacking = next((k for k in self.require_code if k not in code), None)
        if lacking:
            return RecordSkip("missing_" + lacking, "/".join(CODE_FIELDS[lacking]),
                              f"no {' or '.join(CODE_FIELDS[lacking])} field "
                              "(reward.answer_kind=code needs it)")
        return code


def gold_of(raw_answer: Any, cols: Columns) -> str | None:
    """The gold answer of a record's answer cell: the last ``\\boxed{}`` of a boxed column,
    the final answer of a worked solution, else the stripped text (None: blank)."""
    if cols.answer_is_boxed:
        return answer_from_boxed(raw_answer)
    if cols.answer_is_solution:
        return answer_from_solution(raw_answer)
    return None if _is_blank(raw_answer) else str(raw_answer).strip()
