"""The evaluation runner behind ``vlcohort eval``: generate, extract, grade, summarise.

Flow: load each benchmark's official file -> for each model, generate ``samples``
completions per item through the model's adapter (greedy when ``samples == 1``) ->
append one JSON line per (benchmark, item, model, sample) to ``items.jsonl`` -> score ->
``summary.json`` and ``summary.md``.

Why the per-item file is the source of truth: a run killed after hours resumes where it
stopped (lines already there are not generated again), and ``vlcohort eval score`` can
re-score saved responses with another scorer without a model.

Reported numbers: ``mean@k`` (average correctness over samples) and ``maj@k`` (the
majority vote over the k extracted answers, through the one grader); with several models,
``ensemble`` pools all models' samples into one vote (the matched-budget comparison).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from vlcohort.answers.extract import extract_answer
from vlcohort.answers.grading import get_grader
from vlcohort.data.problems import Problem
from vlcohort.answers.voting import majority_vote

from .benchmarks import (BenchmarkData, BenchmarkError, load_benchmark, parse_benchmark_names,
                         read_jsonl)
from .official import JudgeNeeded, official_verdict, protocol_note
from .scoring import group_accuracy

PROMPTS = {
    "boxed": "Please reason step by step, and put your final answer within \\boxed{}.",
    "answer_tag": ("Think step by step, then give your final answer inside <answer></answer>, "
                   "e.g. <answer>C</answer> or <answer>12</answer>."),
    "official": None,  # the benchmark's own query replaces the question
}
#: What each benchmark is grouped by in the tables.
GROUP_BY = {"mathvista": ("task",), "mathverse": ("problem_version",),
            "mathvision": ("subject", "level"), "wemath": ("key",),
            "gsm8k": (), "math500": ("subject", "level")}
JUDGE_NOTES = {
    "mathvista": "official extraction is a GPT call: scorer 'official' applies the official "
                 "normalisation (letter->option, nearest option, int/float/precision) to our "
                 "extracted answer",
    "mathverse": "official judge is GPT: numbers use our extraction and grader",
    "mathvision": "our extraction and grader; scorer 'official' reproduces MATH-Vision's "
                  "rule-based scorer (answer phrase / \\boxed extraction, latex/sympy equality "
                  "at 2 decimals, gold letter or option text)",
    "wemath": "four-dimensional metrics (IK, IG, CM, RM) from our per-question verdicts",
    "gsm8k": "our extraction and grader; gold is the number after '####'",
    "math500": "our extraction and grader (per subject and level)",
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
    """The vLLM engine's weights dtype (``rollout.vllm.dtype``'s choices)."""
    answer_style: str = "auto"
    """How answers are extracted (:data:`vlcohort.answers.extract.STYLES`): ``direct`` or
    ``last_line`` for a model that answers without a marker (a direct-answer prompt)."""


# --------------------------------------------------------------------------- prompts


def prompt_view(problem: Problem, style: str) -> tuple[Problem, str | None]:
    """(the problem as the model sees it, the instruction). ``official`` swaps the text for
    the benchmark's own query, which already lists the options, so options are not added."""
    if style not in PROMPTS:
        raise BenchmarkError(f"unknown prompt style {style!r}; known: {', '.join(PROMPTS)}")
    if style == "official" and problem.meta.get("official_query"):
        query = problem.meta["official_query"]
        if problem.images and "<image" not in query and "<image" in problem.text:
            query = "<image1>\n" + query if len(problem.images) == 1 else query
        view = Problem(id=problem.id, text=query, images=problem.images, options=None,
                       gold=None, source=problem.source, meta=problem.meta)
        return view, None
    return problem, PROMPTS[style] if style != "official" else PROMPTS["boxed"]


# --------------------------------------------------------------------------- records


def score_record(problem: Problem, response: str | None, grader,
                 answer_style: str = "auto", judged: dict[str, str] | None = None,
                 use_judge: bool = False) -> dict[str, Any]:
    """The verdict fields of one response: extracted span (by ``answer_style``), canonical
    key, correct (our grader) and, where the benchmark has an official protocol, its
    ``official_*`` fields (:func:`eval.official.official_verdict`). A protocol step that
    still needs the judge leaves ``official_pending`` (the step) instead."""
    extracted = extract_answer(response or "", style=answer_style)
    canonical = grader.canonical(extracted, problem.options) if extracted is not None else None
    correct = extracted is not None and grader.is_equivalent(extracted, problem.gold, problem.options)
    out = {"extracted": extracted, "canonical": canonical, "correct": bool(correct),
           "rule": "grader" if extracted is not None else "no_extraction"}
    official = official_verdict(problem, response, extracted, judged, use_judge)
    if isinstance(official, JudgeNeeded):
        out["official_pending"] = official.step
    elif official is not None:
        out.update(official)
    return out


def read_items(path: Path) -> list[dict]:
    """The per-item JSONL written so far (empty when absent); bad lines name the line."""
    return [obj for _, obj in read_jsonl(path)] if Path(path).is_file() else []


def _key(rec: dict) -> tuple:
    return rec["benchmark"], str(rec["id"]), rec["model"], int(rec.get("sample", 0))


# --------------------------------------------------------------------------- summary


def _item_verdicts(recs: list[dict], problem: Problem, grader, official: bool) -> dict[str, float]:
    """mean@k and maj@k of one item's samples (from one model, or pooled)."""
    field_ = ("official_correct" if official and any("official_correct" in r for r in recs)
              else "correct")
    mean = sum(bool(r.get(field_, r["correct"])) for r in recs) / len(recs)
    if len(recs) == 1:
        return {"mean": mean, "maj": mean}
    if field_ == "official_correct":
        # the official protocols have no vote: the most common official prediction (first
        # on a tie), right when the official rules accept it
        answers = [str(r.get("official_prediction") or "") for r in recs]
        top = max(answers, key=lambda a: (answers.count(a), -answers.index(a)))
        return {"mean": mean, "maj": float(bool(recs[answers.index(top)].get(field_)))}
    vote = majority_vote([r.get("extracted") for r in recs], problem.options, tie="first",
                         grader=grader)
    maj = vote.label is not None and grader.is_equivalent(vote.label, problem.gold, problem.options)
    return {"mean": mean, "maj": float(maj)}


def _groups(problem: Problem, name: str) -> list[str]:
    return [f"{g}={problem.meta.get(g)}" for g in GROUP_BY.get(name, ())]


def benchmark_report(name: str, rows: list[tuple[Problem, dict[str, float]]],
                     accuracy: float) -> dict[str, Any]:
    """The number papers report for ``name`` (``headline``, named by ``headline_name``) and
    the benchmark's own tables, from the protocol module's ``report(rows)`` hook; without
    one, the headline is the overall accuracy (maj@k)."""
    from .official import protocol_module

    mod = protocol_module(name)
    hook = getattr(mod, "report", None) if mod is not None else None
    out = {"headline": accuracy, "headline_name": "accuracy"}
    if hook is not None:
        out.update(hook(rows))
    return out


def summarize(data: dict[str, BenchmarkData], records: Iterable[dict], models: Sequence[str],
              scorer: str = "vlcohort") -> dict[str, Any]:
    """The summary JSON: per benchmark, per model (and ``ensemble``), overall and per group
    accuracy (maj@k; mean@k beside it), We-Math's four-dimensional metrics, and the
    average of the benchmarks' overall numbers."""
    grader = get_grader()
    official = scorer == "official"
    by_item: dict[tuple, list[dict]] = {}
    for r in records:
        by_item.setdefault((r["benchmark"], str(r["id"]), r["model"]), []).append(r)
    summary: dict[str, Any] = {"scorer": scorer, "benchmarks": {}, "notes": {}}
    columns = list(models) + (["ensemble"] if len(models) > 1 else [])
    for name, d in data.items():
        summary["notes"][name] = (protocol_note(name) if official else "") or JUDGE_NOTES.get(name, "")
        bench: dict[str, Any] = {"n_items": len(d.problems), "skipped": d.skipped_by_reason(),
                                 "skipped_ids": [s.id for s in d.skipped][:50], "models": {}}
        for col in columns:
            rows: list[tuple[Problem, dict[str, float]]] = []
            for p in d.problems:
                recs = ([r for m in models for r in by_item.get((name, p.id, m), [])]
                        if col == "ensemble" else by_item.get((name, p.id, col), []))
                if recs:
                    rows.append((p, _item_verdicts(recs, p, grader, official)))
            if not rows:
                continue
            res: dict[str, Any] = {
                "n_scored": len(rows),
                "maj": sum(v["maj"] for _, v in rows) / len(rows),
                "mean": sum(v["mean"] for _, v in rows) / len(rows),
                "groups": group_accuracy((g, v["maj"] >= 0.5) for p, v in rows for g in _groups(p, name)),
            }
            res.update(benchmark_report(name, rows, res["maj"]))
            bench["models"][col] = res
        summary["benchmarks"][name] = bench
    summary["average"] = {
        col: sum(b["models"][col]["headline"] for b in summary["benchmarks"].values())
        / len(summary["benchmarks"])
        for col in columns
        if summary["benchmarks"] and all(col in b["models"] for b in summary["benchmarks"].values())
    }
    return summary


def markdown_table(summary: dict[str, Any]) -> str:
    """Benchmark x model table (maj@k, mean@k in brackets), the per-group rows under each
    benchmark, and the average over benchmarks."""
    cols: list[str] = []
    for b in summary["benchmarks"].values():
        cols += [c for c in b["models"] if c not in cols]
    head = "| benchmark | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    lines = []
    for name, b in summary["benchmarks"].items():
        cell = lambda c: (f"{100 * b['models'][c]['maj']:.1f} ({100 * b['models'][c]['mean']:.1f})"
                          if c in b["models"] else "-")
        lines.append(f"| **{name}** | " + " | ".join(cell(c) for c in cols) + " |")
        groups = sorted({g for m in b["models"].values() for g in m["groups"]})
        for g in groups:
            vals = [f"{100 * b['models'][c]['groups'][g]['acc']:.1f}"
                    if c in b["models"] and g in b["models"][c]["groups"] else "-" for c in cols]
            lines.append(f"| &nbsp; {name} {g} | " + " | ".join(vals) + " |")
        for metric in ("score_strict", "score_loose"):
            if any("wemath" in m for m in b["models"].values()):
                vals = [f"{100 * b['models'][c]['wemath'][metric]:.1f}" if c in b["models"] else "-"
                        for c in cols]
                lines.append(f"| &nbsp; {name} {metric} | " + " | ".join(vals) + " |")
    avg = summary.get("average", {})
    lines.append("| **average** | " + " | ".join(
        f"{100 * avg[c]:.1f}" if c in avg else "-" for c in cols) + " |")
    notes = "\n".join(f"- {k}: {v}" for k, v in summary.get("notes", {}).items())
    return (f"Scorer: {summary['scorer']}. Cells: maj@k (mean@k); groups: maj@k.\n\n"
            + head + "\n".join(lines) + "\n\n" + notes + "\n")


def write_outputs(out: Path, summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(markdown_table(summary))


# --------------------------------------------------------------------------- entry points


def load_all(names: Sequence[str], data_dir: Path, limit: int | None,
             need_images: bool = True) -> dict[str, BenchmarkData]:
    data = {}
    for name in names:
        d = load_benchmark(name, data_dir, need_images=need_images)
        if limit is not None:
            d.problems = d.problems[:limit]
        data[name] = d
    return data


def run(settings: EvalSettings) -> dict[str, Any]:
    """Generate (resuming), score and write the outputs; returns the summary."""
    names = parse_benchmark_names(settings.benchmarks)
    if settings.samples < 1:
        raise BenchmarkError(f"--samples must be >= 1, got {settings.samples}")
    data = load_all(names, settings.data_dir, settings.limit)
    for d in data.values():
        if d.skipped:
            print(f"{d.name}: skipped {len(d.skipped)} of {d.rows} items "
                  f"({', '.join(f'{k}: {v}' for k, v in d.skipped_by_reason().items())}); "
                  f"first: {d.skipped[0].id} ({d.skipped[0].detail})", file=sys.stderr)
    settings.out.mkdir(parents=True, exist_ok=True)
    items_path = settings.out / "items.jsonl"
    from .generation import run_generation

    written = run_generation(settings, data, items_path)
    print(f"generated {written} new responses -> {items_path}", file=sys.stderr)
    summary = summarize(data, read_items(items_path), settings.models, settings.scorer)
    write_outputs(settings.out, summary)
    return summary


def score_responses(benchmark: str, data_path: Path, responses: Path, scorer: str = "vlcohort",
                    model: str = "responses", answer_style: str = "auto") -> dict[str, Any]:
    """Score saved responses (one JSON object per line: ``id``, ``response``) without a
    model. Ids that the benchmark does not hold are an error that lists them."""
    name = parse_benchmark_names(benchmark)[0]
    data = load_all([name], data_path, None, need_images=False)
    problems = {p.id: p for p in data[name].problems}
    grader = get_grader()
    records, unknown = [], []
    for lineno, obj in read_jsonl(responses):
        pid = str(obj.get("id", obj.get("pid", "")))
        if pid not in problems:
            unknown.append(pid)
            continue
        if "response" not in obj:
            raise BenchmarkError(f"{responses}: line {lineno}: no 'response' field.")
        records.append({"benchmark": name, "id": pid, "model": model,
                        "sample": int(obj.get("sample", 0)), "response": obj["response"],
                        **score_record(problems[pid], obj["response"], grader, answer_style)})
    if unknown:
        shown = ", ".join(map(repr, unknown[:20])) + (" ..." if len(unknown) > 20 else "")
        raise BenchmarkError(f"{responses}: {len(unknown)} id(s) not in {name} "
                             f"({data[name].path}): {shown}")
    answered = {r["id"] for r in records}
    data[name].problems = [p for p in data[name].problems if p.id in answered]
    return summarize(data, records, [model], scorer)
