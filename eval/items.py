"""One evaluation item: the run's settings, the prompt an item is asked with, and the
verdict fields of one response (the lines of ``items.jsonl``).

Kept below :mod:`vlcohort.eval.runner` (summaries, judge pass) and :mod:`vlcohort.eval.generation`
(engines), which both build on it, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from vlcohort.answers.extract import extract_answer
from vlcohort.data.problems import Problem

from .datasets import BenchmarkError, read_jsonl
from .official import JudgeNeeded, official_verdict
from .safe_text import first_surrogate, without_surrogates
from .text_scoring import grader_for, is_code_problem, pending_code_fields, text_official

PROMPTS = {
    "boxed": "Please reason step by step, and put your final answer within \\boxed{}.",
    "answer_tag": ("Think step by step, then give your final answer inside <answer></answer>, "
                   "e.g. <answer>C</answer> or <answer>12</answer>."),
    "official": None,  # the benchmark's own query replaces the question
}


@dataclass
class EvalSettings:
    """Everything one ``vlcohort eval`` run needs (the CLI fills it)."""

    models: list[str]
    benchmarks: list[str]
    data_dir: Path
    out: Path
    samples: int = 1
    limit: int | None = None
    prompt: str = "boxed"
    max_new_tokens: int = 1024
    max_prompt_tokens: int = 4096
    """An item whose prompt is longer, in the model's tokens (image tokens included), is
    skipped as ``prompt_too_long`` and counted; 0: no limit. As ``data.max_prompt_tokens``."""
    temperature: float = 1.0
    batch_size: int = 8
    scorer: str = "vlcohort"
    system_prompt: str | None = "You are a helpful assistant."
    seed: int = 0
    progress: bool = True
    instruction: str | None = None
    """When set, replaces the prompt style's answer instruction (e.g. the training
    config's ``prompt.instruction``, so a checkpoint is asked the way it was trained)."""
    engine: str = "hf"
    """hf: transformers ``generate``; vllm: a vLLM engine (CUDA build or the CPU build)."""
    vllm_dtype: str = "auto"
    """Deprecated alias of ``dtype`` (read when ``dtype`` is ``auto``)."""
    device: str = "auto"
    """auto (cuda when a GPU is visible, else cpu) | cpu | cuda | cuda:N."""
    dtype: str = "auto"
    """Weights dtype, both engines: auto (hf: the checkpoint's on a GPU, float32 on CPU;
    vllm: the checkpoint's) | bfloat16 | float16 | float32."""
    data_parallel: int | str = 1
    """Worker processes, each with its own device and a shard of the items (``auto``: one
    per visible GPU); their part files are merged into ``items.jsonl``."""
    length_sorted: bool = True
    """Batch items by prompt length, longest first (less padding; same greedy texts)."""
    since: str | None = None
    """LiveCodeBench: the first contest date kept (YYYY-MM-DD; None: the default window
    :data:`vlcohort.eval.text_datasets.LCB_DEFAULT_WINDOW`)."""
    until: str | None = None
    """LiveCodeBench: the contest date the window ends before (YYYY-MM-DD; None: default)."""
    answer_style: str = "auto"
    """How answers are extracted (:data:`vlcohort.answers.extract.STYLES`): ``direct`` or
    ``last_line`` for a model that answers without a marker (a direct-answer prompt)."""


# --------------------------------------------------------------------------- prompts


def prompt_view(problem: Problem, style: str) -> tuple[Problem, str | None]:
    """(the problem as the model sees it, the instruction). ``official`` swaps the text for
    the benchmark's own query, which already lists the options, so options are not added."""
    if style not in PROMPTS:
        raise BenchmarkError(f"unknown prompt style {style!r}; known: {', '.join(PROMPTS)}")
    if style == "official" and not problem.meta.get("official_query"):
        raise BenchmarkError(
            f"{problem.source} item {problem.id}: --prompt official needs the benchmark's own "
            "query, and this item has none (MathVista: put the official query.json beside "
            "the annotation file); or choose --prompt boxed / answer_tag")
    if style == "official":
        query = problem.meta["official_query"]
        if problem.images and "<image" not in query and "<image" in problem.text:
            query = "<image1>\n" + query if len(problem.images) == 1 else query
        view = Problem(id=problem.id, text=query, images=problem.images, options=None,
                       gold=None, source=problem.source, meta=problem.meta)
        return view, None
    if is_code_problem(problem):  # a program is asked for, not a boxed answer
        return problem, problem.meta.get("instruction") or PROMPTS[style]
    return problem, PROMPTS[style]


# --------------------------------------------------------------------------- records


def score_record(problem: Problem, response: str | None, grader,
                 answer_style: str = "auto", judged: dict[str, str] | None = None,
                 use_judge: bool = False, scorer: str = "vlcohort") -> dict[str, Any]:
    """The verdict fields of one response: extracted span (by ``answer_style``), canonical
    key, ``grader_correct`` (our grader) and, where the benchmark has an official protocol,
    its ``official_*`` fields (:func:`vlcohort.eval.official.official_verdict`). A protocol
    step that still needs the judge leaves ``official_pending`` (the step) instead.
    ``correct`` is the verdict the summary under ``scorer`` counts (:func:`counted_verdict`).

    A code item's response is not graded here: it is marked ``pending`` and run with the
    others of the run (:func:`vlcohort.eval.text_scoring.check_code_records`). A benchmark with
    its own tolerance (SciBench) is graded at that tolerance."""
    if is_code_problem(problem):
        return pending_code_fields(problem, response)
    grader = grader_for(problem, grader)
    extracted = extract_answer(response or "", style=answer_style)
    canonical = grader.canonical(extracted, problem.options) if extracted is not None else None
    correct = extracted is not None and grader.is_equivalent(extracted, problem.gold, problem.options)
    out = {"extracted": extracted, "canonical": canonical, "correct": bool(correct),
           "grader_correct": bool(correct), "rule": "grader" if extracted is not None else "no_extraction"}
    official = official_verdict(problem, response, extracted, judged, use_judge)
    if official is None:
        official = text_official(problem, response, extracted)
    if isinstance(official, JudgeNeeded):
        out["official_pending"] = official.step
    elif official is not None:
        out.update(official)
    out["correct"] = counted_verdict(out, scorer)
    return out


def counted_verdict(rec: dict, scorer: str) -> bool:
    """The verdict of one record that a summary under ``scorer`` counts: the official one
    under ``official`` where the benchmark has one (and no judge step is pending), else
    our grader's (``grader_correct``; a record without that field holds it in ``correct``).
    A code record's verdict is whether its program passed (``correct``)."""
    if "passed" in rec:
        return bool(rec.get("correct"))
    if scorer == "official" and "official_correct" in rec:
        return bool(rec["official_correct"])
    return bool(rec.get("grader_correct", rec.get("correct")))


def set_counted_verdicts(records: Iterable[dict], scorer: str) -> int:
    """Make each record's ``correct`` the verdict the summary under ``scorer`` counts
    (:func:`counted_verdict`), and give a record without ``grader_correct`` that field (from
    its ``correct``); returns how many records changed."""
    changed = 0
    for rec in records:
        before = (rec.get("correct"), rec.get("grader_correct"))
        if "passed" not in rec and "grader_correct" not in rec and "correct" in rec:
            rec["grader_correct"] = bool(rec["correct"])
        rec["correct"] = counted_verdict(rec, scorer)
        changed += (rec.get("correct"), rec.get("grader_correct")) != before
    return changed


def json_kind(value: Any) -> str:
    """What a JSON value is, in the file's terms (for messages)."""
    if isinstance(value, bool):
        return "true/false"
    return {list: "a list", dict: "an object", int: "a number", float: "a number"}.get(
        type(value), f"a {type(value).__name__}")


def response_fields(value: Any, where: str) -> dict[str, Any]:
    """The ``response`` a record is graded on, from a responses file's or an
    ``items.jsonl``'s ``response`` value (``where`` names the file and line).

    A value that is not a string (a list, a number, an object) is the file's mistake, made
    on every line alike by whatever wrote it: a :class:`BenchmarkError` that says so. A
    string holding a lone surrogate (valid JSON, not valid Unicode) is one broken answer:
    it is graded as the empty response, so it counts as wrong and stays in the
    denominator (skipping it would raise the score of a model whose text breaks), and
    the record says why (``invalid_response``) and keeps the text, each surrogate
    replaced by U+FFFD (``invalid_response_text``). ``null`` is no response (wrong)."""
    if value is not None and not isinstance(value, str):
        raise BenchmarkError(
            f"{where}: 'response' is {json_kind(value)}, not a string. Each line holds "
            "one response as a JSON string (several samples of an item: one line each, "
            "with \"sample\": 0, 1, ...).")
    at = first_surrogate(value) if value is not None else -1
    if at < 0:
        return {"response": value}
    return {"response": "",
            "invalid_response": f"lone surrogate \\u{ord(value[at]):04x} at character {at}: "
                                "not valid Unicode text, scored as wrong",
            "invalid_response_text": without_surrogates(value)}


def sample_number(value: Any, where: str) -> int:
    """A record's ``sample`` (default 0): a whole number >= 0, else a one-line error."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        raise BenchmarkError(f"{where}: 'sample' must be a whole number >= 0 (the sample's "
                             f"index within its item), got {value!r}.")
    return int(value)


def item_id(obj: dict, where: str) -> str:
    """A record's ``id`` (or ``pid``) as text: a string or a whole number, else an error."""
    value = obj.get("id", obj.get("pid"))
    if value is None:
        raise BenchmarkError(f"{where}: no 'id' field; each line needs the benchmark item's "
                             "id and its response.")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BenchmarkError(f"{where}: 'id' is {json_kind(value)}, not a string or "
                             "number; give the benchmark item's id.")
    return str(value)


def read_items(path: Path) -> list[dict]:
    """The per-item JSONL written so far (empty when absent); bad lines name the line."""
    return [obj for _, obj in read_jsonl(path)] if Path(path).is_file() else []


def record_key(rec: dict) -> tuple:
    """What names one response: benchmark, item id, model and sample number."""
    return rec["benchmark"], str(rec["id"]), rec["model"], int(rec.get("sample", 0))


# --------------------------------------------------------------------------- judge pass

#: The most judge steps one protocol chains (MathVerse: extract, then score), plus room.
