"""The evaluation runner behind ``vlcohort eval``: generate, extract, grade, summarise.

Flow: load each benchmark's official file -> for each model, generate ``samples``
completions per item through the model's adapter (greedy when ``samples == 1``) ->
append one JSON line per (benchmark, item, model, sample) to ``items.jsonl`` -> score ->
``summary.json`` and ``summary.md``.

Why the per-item file is the source of truth: a run killed after hours resumes where it
stopped (lines already there are not generated again), and ``vlcohort eval score`` can
re-score saved responses with another scorer without a model.

With a judge (``--judge``, :mod:`vlcohort.eval.judge`), the steps the official pipelines run
through GPT (MathVista's extraction, MathVerse's extraction and scoring) are asked of it
after generation (:func:`judge_pass`); each output is cached in its record under the
prompt's hash and the judge's id, so re-scoring asks only what the cache lacks. Records
keep the rule-based ``official_*`` verdicts beside the judged ``judged_*`` ones, and the
summary reports both.

Reported numbers: ``mean@k`` (average correctness over samples) and ``maj@k`` (the
majority vote over the k extracted answers, through the one grader); with several models,
``ensemble`` pools all models' samples into one vote (the matched-budget comparison).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from vlcohort.answers.grading import get_grader
from vlcohort.answers.voting import majority_vote
from vlcohort.data.problems import Problem

from .datasets import (
    BENCHMARK_GROUPS,
    BenchmarkData,
    BenchmarkError,
    load_benchmark,
    parse_benchmark_names,
    read_jsonl,
)
from .items import (  # noqa: F401 - PROMPTS and prompt_view are re-exported: the runner is the eval API
    PROMPTS,
    EvalSettings,
    item_id,
    prompt_view,
    read_items,
    record_key,
    response_fields,
    sample_number,
    score_record,
    set_counted_verdicts,
)
from .judge import JudgeError
from .official import JudgeNeeded, official_verdict, protocol_note
from .scoring import group_accuracy
from .text_datasets import CODE_BENCHMARKS, LCB_DEFAULT_WINDOW, TEXT_GROUP_BY, TEXT_NOTES, select_window
from .text_scoring import (
    check_code_records,
    code_item_verdicts,
    code_report,
    grader_for,
    is_code_problem,
    text_benchmark_info,
)

#: What each benchmark is grouped by in the tables.
GROUP_BY = {"mathvista": ("task",), "mathverse": ("problem_version",),
            "mathvision": ("subject", "level"), "wemath": ("key",),
            "gsm8k": (), "math500": ("subject", "level")}
JUDGE_NOTES = {
    "mathvista": "official extraction is a GPT call: scorer 'official' applies the official "
                 "normalisation (letter->option, nearest option, int/float/precision) to our "
                 "extracted answer",
    "mathverse": "our extraction and grader, per version; headline = the five testmini "
                 "versions pooled (Text Only apart, as an ablation); the official extraction "
                 "and 0/1 scoring are GPT calls: scorer 'official' with a judge sends the "
                 "official prompts",
    "mathvision": "our extraction and grader; scorer 'official' reproduces MATH-Vision's "
                  "rule-based scorer (answer phrase / \\boxed extraction, latex/sympy equality "
                  "at 2 decimals, gold letter or option text)",
    "wemath": "our grader per question; headline = the strict four-dimensional score "
              "(IK, IG, CM, RM; S1/S2/S3 beside); scorer 'official' uses the official "
              "'Answer' string match instead of our grader",
    "gsm8k": "our extraction and grader; gold is the number after '####'",
    "math500": "our extraction and grader (per subject and level)",
}
GROUP_BY.update(TEXT_GROUP_BY)
JUDGE_NOTES.update(TEXT_NOTES)


JUDGE_STAGES = 4
#: Prompts per judge call: outputs are stored in the records chunk by chunk, so a judge
#: that fails mid-pass loses at most one chunk (the caller still writes the records).
JUDGE_CHUNK = 64


def prompt_sha256(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def judged_verdict(problem: Problem, rec: dict, judge_id: str):
    """The protocol's verdict with the judge, from ``rec["judge"]`` alone: a cached step
    output is used only when the protocol asks that step with the same prompt (its
    SHA-256) and the same judge wrote it, so a changed prompt or judge asks again.
    Returns the verdict dict, None (no protocol) or the :class:`JudgeNeeded` still open."""
    cache = rec.get("judge") or {}
    judged: dict[str, str] = {}
    for _ in range(JUDGE_STAGES + 1):
        out = official_verdict(problem, rec.get("response"), rec.get("extracted"), judged,
                               use_judge=True)
        if not isinstance(out, JudgeNeeded):
            return out
        hit = cache.get(out.step)
        if (out.step in judged or not isinstance(hit, dict) or hit.get("judge") != judge_id
                or hit.get("prompt_sha256") != prompt_sha256(out.prompt)):
            return out
        judged[out.step] = str(hit.get("output", ""))
    return out


def _set_judged(rec: dict, verdict) -> None:
    """``judged_*`` fields from a verdict's ``official_*`` ones (none without a protocol)."""
    for k in [k for k in rec if k.startswith("judged_")]:
        del rec[k]
    if isinstance(verdict, JudgeNeeded):
        rec.update(judged_prediction=None, judged_correct=False, judged_rule="error",
                   judged_error=f"judge step {verdict.step!r} still pending after "
                                f"{JUDGE_STAGES} stages")
    elif verdict is not None:
        rec.update({"judged_" + k[len("official_"):]: v for k, v in verdict.items()
                    if k.startswith("official_")})


def judge_pass(records: list[dict], problems: dict[tuple[str, str], Problem], judge,
               log=None) -> int:
    """Fill every record's judged verdict (``judged_*``), asking ``judge`` only for steps
    its cache lacks: each stage gathers the open steps of all records, asks the judge
    once per chunk of distinct prompts, and stores each output in the record's cache
    ``rec["judge"][step] = {prompt_sha256, judge, output}``; a protocol with two steps
    (MathVerse) takes two stages. Records of benchmarks not in ``problems`` are left as
    they are. Returns the number of prompts sent (0 when the cache had everything)."""
    todo = []
    for rec in records:
        if (rec["benchmark"], str(rec["id"])) not in problems:
            continue
        if rec.get("invalid_response"):  # not text: wrong with the judge too, never sent
            _set_judged(rec, None)
            rec.update(judged_prediction=None, judged_correct=False,
                       judged_rule="invalid_response")
            continue
        todo.append((rec, problems[(rec["benchmark"], str(rec["id"]))]))
    sent = 0
    for stage in range(JUDGE_STAGES + 1):
        pending = []
        for rec, p in todo:
            v = judged_verdict(p, rec, judge.id)
            if isinstance(v, JudgeNeeded) and stage < JUDGE_STAGES:
                pending.append((rec, p, v))
            else:
                _set_judged(rec, v)
        if not pending:
            break
        by_prompt: dict[str, list[tuple[dict, str]]] = {}
        for rec, _, v in pending:
            by_prompt.setdefault(v.prompt, []).append((rec, v.step))
        prompts = list(by_prompt)
        if log is not None:
            log(f"judge {judge.id}: stage {stage + 1}: {len(prompts)} prompt(s) for "
                f"{len(pending)} record(s)")
        for start in range(0, len(prompts), JUDGE_CHUNK):
            chunk = prompts[start:start + JUDGE_CHUNK]
            outputs = judge.complete(chunk)
            if len(outputs) != len(chunk):
                raise JudgeError(f"judge {judge.id}: {len(outputs)} outputs for "
                                   f"{len(chunk)} prompts")
            sent += len(chunk)
            for prompt, output in zip(chunk, outputs):
                entry = {"prompt_sha256": prompt_sha256(prompt), "judge": judge.id,
                         "output": output}
                for rec, step in by_prompt[prompt]:
                    rec.setdefault("judge", {})[step] = dict(entry)
        todo = [(rec, p) for rec, p, _ in pending]
    return sent


def _json_line(rec: dict) -> str:
    """One record as a JSON line, readable UTF-8; a record still holding a string that
    UTF-8 cannot encode (a lone surrogate anywhere) is written with JSON escapes, which
    read back the same, rather than stopping the write of every record."""
    line = json.dumps(rec, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(rec, ensure_ascii=True)
    return line


def report_invalid(path: Path, records: list[dict]) -> int:
    """One stderr line when some responses were not valid text (scored as wrong)."""
    bad = [r for r in records if r.get("invalid_response")]
    if bad:
        print(f"{path}: {len(bad)} response(s) not valid Unicode text, scored as wrong "
              f"(field invalid_response); first: id {bad[0]['id']!r}: "
              f"{bad[0]['invalid_response']}", file=sys.stderr)
    return len(bad)


def write_items(path: Path, records: Iterable[dict]) -> None:
    """Rewrite ``items.jsonl`` atomically (a temporary sibling, then ``os.replace``), so
    a crash mid-write never leaves a half file where hours of responses were."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(_json_line(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def judge_and_save(records: list[dict], data: dict[str, BenchmarkData], judge,
                   items_path: Path | None, all_records: list[dict] | None = None) -> int:
    """:func:`judge_pass` over ``records`` (those of ``data``'s problems), then
    ``items.jsonl`` rewritten with ``all_records`` (default: ``records``; the same dicts,
    updated in place), also when the judge fails midway: what it answered is kept, so
    the rerun asks only the rest."""
    problems = {(name, p.id): p for name, d in data.items() for p in d.problems}
    try:
        return judge_pass(records, problems, judge, log=lambda m: print(m, file=sys.stderr))
    finally:
        if items_path is not None:
            write_items(items_path, records if all_records is None else all_records)


# --------------------------------------------------------------------------- summary


#: Which record fields a summary counts, by verdict kind: (correct, prediction). A record's
#: ``correct`` is the one its summary counted (:func:`vlcohort.eval.items.counted_verdict`).
VERDICT_FIELDS = {"grader": ("grader_correct", None),
                  "official": ("official_correct", "official_prediction"),
                  "judged": ("judged_correct", "judged_prediction")}


def _item_verdicts(recs: list[dict], problem: Problem, grader, official: bool | str) -> dict[str, float]:
    """mean@k and maj@k of one item's samples (from one model, or pooled). ``official``:
    True / "official" counts the rule-based official verdicts (our grader's where the
    benchmark has none), "judged" the verdicts with the judge, False our grader's."""
    if is_code_problem(problem):  # programs: passed or not, pass@k from n and c
        return code_item_verdicts(recs)
    grader = grader_for(problem, grader)  # SciBench: its own relative tolerance
    kind = {True: "official", False: "grader"}.get(official, official)
    field_, pred = VERDICT_FIELDS[kind]
    if kind == "official" and not any(field_ in r for r in recs):
        field_, pred = VERDICT_FIELDS["grader"]
    mean = sum(bool(r.get(field_, _grader_verdict(r))) for r in recs) / len(recs)
    if len(recs) == 1:
        return {"mean": mean, "maj": mean}
    if pred is not None:
        # the official protocols have no vote: the most common official prediction (first
        # on a tie), right when the official rules accept it
        answers = [str(r.get(pred) or "") for r in recs]
        top = max(answers, key=lambda a: (answers.count(a), -answers.index(a)))
        return {"mean": mean, "maj": float(bool(recs[answers.index(top)].get(field_)))}
    vote = majority_vote([r.get("extracted") for r in recs], problem.options, tie="first",
                         grader=grader)
    maj = vote.label is not None and grader.is_equivalent(vote.label, problem.gold, problem.options)
    return {"mean": mean, "maj": float(maj)}


def _grader_verdict(rec: dict) -> bool:
    """Our grader's verdict (a record without ``grader_correct`` holds it in ``correct``)."""
    return bool(rec.get("grader_correct", rec["correct"]))


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


def _column_result(name: str, rows: list[tuple[Problem, dict[str, float]]]) -> dict[str, Any]:
    """One model column of one benchmark: overall maj@k / mean@k, groups, the report."""
    res: dict[str, Any] = {
        "n_scored": len(rows),
        "maj": sum(v["maj"] for _, v in rows) / len(rows),
        "mean": sum(v["mean"] for _, v in rows) / len(rows),
        "groups": group_accuracy((g, v["maj"] >= 0.5) for p, v in rows for g in _groups(p, name)),
    }
    res.update(benchmark_report(name, rows, res["maj"]))
    if name in CODE_BENCHMARKS:  # headline pass@1, pass@k, LiveCodeBench per difficulty
        res.update(code_report(name, rows))
    return res


def _average(benchmarks: dict[str, Any], columns: Sequence[str], judged: bool) -> dict[str, float]:
    """Per column, the mean of the benchmarks' headlines (only where every benchmark has
    that column; ``judged``: the judged blocks' headlines)."""
    pick = (lambda b, c: b["models"].get(c, {}).get("judged")) if judged else (
        lambda b, c: b["models"].get(c))
    return {c: sum(pick(b, c)["headline"] for b in benchmarks.values()) / len(benchmarks)
            for c in columns
            if benchmarks and all(pick(b, c) is not None for b in benchmarks.values())}


def summarize(data: dict[str, BenchmarkData], records: Iterable[dict], models: Sequence[str],
              scorer: str = "vlcohort", judge_id: str | None = None) -> dict[str, Any]:
    """The summary JSON: per benchmark, per model (and ``ensemble``), overall and per group
    accuracy (maj@k; mean@k beside it), We-Math's four-dimensional metrics, and the
    average of the benchmarks' overall numbers. Where records carry verdicts with the
    judge (``judged_*``), each column has a ``judged`` block beside the rule-based one
    (same shape) and ``judged_average`` the average of those; ``judge`` names the judge."""
    grader = get_grader()
    official = scorer == "official"
    by_item: dict[tuple, list[dict]] = {}
    for r in records:
        by_item.setdefault((r["benchmark"], str(r["id"]), r["model"]), []).append(r)
    summary: dict[str, Any] = {"scorer": scorer, "judge": judge_id, "benchmarks": {}, "notes": {}}
    columns = list(models) + (["ensemble"] if len(models) > 1 else [])
    for name, d in data.items():
        summary["notes"][name] = (protocol_note(name) if official else "") or JUDGE_NOTES.get(name, "")
        bench: dict[str, Any] = {"n_items": len(d.problems), "skipped": d.skipped_by_reason(),
                                 "skipped_ids": [s.id for s in d.skipped][:50], "models": {}}
        bench.update(text_benchmark_info(name, d.problems))  # GPQA's option orders, LCB's window
        invalid = sum(1 for r in by_item_records(by_item, name) if r.get("invalid_response"))
        if invalid:  # responses that were not valid text, counted wrong
            bench["invalid_responses"] = invalid
        for col in columns:
            rows, judged_rows = [], []
            for p in d.problems:
                recs = ([r for m in models for r in by_item.get((name, p.id, m), [])]
                        if col == "ensemble" else by_item.get((name, p.id, col), []))
                if recs:
                    rows.append((p, _item_verdicts(recs, p, grader, official)))
                    if judge_id is not None and all("judged_correct" in r for r in recs):
                        judged_rows.append((p, _item_verdicts(recs, p, grader, "judged")))
            if not rows:
                continue
            bench["models"][col] = _column_result(name, rows)
            if judged_rows:
                bench["models"][col]["judged"] = _column_result(name, judged_rows)
        summary["benchmarks"][name] = bench
    summary["average"] = _average(summary["benchmarks"], columns, judged=False)
    if judge_id is not None:
        summary["judged_average"] = _average(summary["benchmarks"], columns, judged=True)
    return summary


def by_item_records(by_item: dict[tuple, list[dict]], name: str) -> Iterable[dict]:
    """The records of benchmark ``name`` in a summary's (benchmark, id, model) index."""
    return (r for key, recs in by_item.items() if key[0] == name for r in recs)


def markdown_table(summary: dict[str, Any]) -> str:
    """Benchmark x model table (maj@k, mean@k in brackets), the headline row where a
    benchmark's reported number is not its accuracy (We-Math's strict score, MathVerse's
    five-version overall), the per-group rows under each benchmark, and the average of
    the headlines."""
    cols: list[str] = []
    for b in summary["benchmarks"].values():
        for c, m in b["models"].items():
            cols += [x for x in [c] + ([c + JUDGED_SUFFIX] if "judged" in m else [])
                     if x not in cols]
    head = "| benchmark | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    lines = []
    for name, b in summary["benchmarks"].items():
        def cell(c):
            return (f"{100 * _cell(b, c)['maj']:.1f} ({100 * _cell(b, c)['mean']:.1f})"
                    if _cell(b, c) else "-")
        lines.append(f"| **{name}** | " + " | ".join(cell(c) for c in cols) + " |")
        names = {m.get("headline_name") for m in b["models"].values()} - {None, "accuracy"}
        if names:  # the number papers report, when it is not the plain accuracy above
            vals = [f"{100 * _cell(b, c)['headline']:.1f}" if "headline" in (_cell(b, c) or {})
                    else "-" for c in cols]
            lines.append(f"| &nbsp; {name} headline: {', '.join(sorted(names))} | "
                         + " | ".join(vals) + " |")
        groups = sorted({g for m in b["models"].values() for g in m["groups"]})
        for g in groups:
            vals = [f"{100 * _cell(b, c)['groups'][g]['acc']:.1f}"
                    if g in (_cell(b, c) or {}).get("groups", {}) else "-" for c in cols]
            lines.append(f"| &nbsp; {name} {g} | " + " | ".join(vals) + " |")
        ks = sorted({k for m in b["models"].values() for k in m.get("pass_at_k", {})} - {"pass@1"},
                    key=lambda k: int(k.split("@")[1]))
        for k in ks:  # code: pass@k beside the pass@1 headline, with --samples >= k
            vals = [f"{100 * _cell(b, c)['pass_at_k'][k]:.1f}"
                    if k in (_cell(b, c) or {}).get("pass_at_k", {}) else "-" for c in cols]
            lines.append(f"| &nbsp; {name} {k} | " + " | ".join(vals) + " |")
        for metric in ("score_strict", "score_loose", "S1", "S2", "S3", "IK", "IG", "CM_strict",
                       "RM_strict_rate"):
            if any(metric in m.get("wemath", {}) for m in b["models"].values()):
                vals = [f"{100 * b['models'][c]['wemath'][metric]:.1f}"
                        if metric in b["models"].get(c, {}).get("wemath", {}) else "-" for c in cols]
                lines.append(f"| &nbsp; {name} {metric} | " + " | ".join(vals) + " |")
    avg = dict(summary.get("average", {}))
    avg.update({c + JUDGED_SUFFIX: v for c, v in (summary.get("judged_average") or {}).items()})
    lines.append("| **average** | " + " | ".join(
        f"{100 * avg[c]:.1f}" if c in avg else "-" for c in cols) + " |")
    notes = "\n".join(f"- {k}: {v}" for k, v in summary.get("notes", {}).items())
    judge = (f" Judge for the GPT steps: {summary['judge']} (columns '{JUDGED_SUFFIX.strip()}'; "
             "the others are rule-based)." if summary.get("judge") else "")
    return (paper_table(summary)
            + f"Scorer: {summary['scorer']}.{judge} Cells: maj@k (mean@k); groups: maj@k; "
            "average: of the headlines.\n\n"
            + head + "\n".join(lines) + "\n\n" + notes + "\n")


def paper_table(summary: dict[str, Any]) -> str:
    """For a benchmark group (``text7``, ``comas7``): one row per model, one column per
    benchmark in the group's order (the layout of the paper's Table 1), each cell the
    benchmark's headline (accuracy; pass@1 for code), then their average; "" otherwise."""
    table = summary.get("table")
    if not table:
        return ""
    cols = [c for c in table["columns"] if c in summary["benchmarks"]]
    models = list(dict.fromkeys(m for c in cols for m in summary["benchmarks"][c]["models"]))
    out = [f"Table ({table['group']}): headline per benchmark (accuracy; pass@1 for code).",
           "", "| model | " + " | ".join(cols) + " | avg |", "|---|" + "---|" * (len(cols) + 1)]
    for m in models:
        cells = [summary["benchmarks"][c]["models"].get(m, {}).get("headline") for c in cols]
        avg = summary.get("average", {}).get(m)
        out.append(f"| {m} | " + " | ".join("-" if v is None else f"{100 * v:.1f}" for v in cells)
                   + f" | {'-' if avg is None else f'{100 * avg:.1f}'} |")
    return "\n".join(out) + "\n\n"


#: The markdown column of a model's verdicts with the judge.
JUDGED_SUFFIX = " (judged)"


def _cell(bench: dict[str, Any], col: str) -> dict[str, Any] | None:
    """The result block a markdown column shows: a model's, or its ``judged`` block."""
    if col.endswith(JUDGED_SUFFIX):
        return bench["models"].get(col[:-len(JUDGED_SUFFIX)], {}).get("judged")
    return bench["models"].get(col)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_outputs(out: Path, summary: dict[str, Any]) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    _write_atomic(out / "summary.md", markdown_table(summary))


# --------------------------------------------------------------------------- entry points


def load_all(names: Sequence[str], data_dir: Path, limit: int | None,
             need_images: bool = True,
             window: tuple[str | None, str | None] | None = None) -> dict[str, BenchmarkData]:
    """Each benchmark's problems (the first ``limit``); ``window`` (since, until) keeps
    LiveCodeBench's problems of that contest-date window (before the limit applies)."""
    data = {}
    for name in names:
        d = load_benchmark(name, data_dir, need_images=need_images)
        if window is not None and name == "livecodebench":
            d = select_window(d, *window)
        if limit is not None:
            d.problems = d.problems[:limit]
        data[name] = d
    return data


def run(settings: EvalSettings, judge=None) -> dict[str, Any]:
    """Generate (resuming), score, run the judge pass when a judge is given
    (:mod:`vlcohort.eval.judge`; its outputs cached in ``items.jsonl``), and write the outputs;
    returns the summary."""
    names = parse_benchmark_names(settings.benchmarks)
    if settings.samples < 1:
        raise BenchmarkError(f"--samples must be >= 1, got {settings.samples}")
    window = (settings.since if settings.since is not None else LCB_DEFAULT_WINDOW[0],
              settings.until if settings.until is not None else LCB_DEFAULT_WINDOW[1])
    data = load_all(names, settings.data_dir, settings.limit, window=window)
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
    records = read_items(items_path)
    ran = check_code_records(records, _problem_index(data))
    if ran:  # the verdicts of the programs run, kept: a rerun runs none of them again
        print(f"ran {ran} program(s) against their tests", file=sys.stderr)
    if set_counted_verdicts(records, settings.scorer) or ran:  # `correct`: what the summary counts
        write_items(items_path, records)
    if judge is not None:
        judge_and_save([r for r in records if r["model"] in settings.models], data, judge,
                       items_path, all_records=records)
    summary = summarize(data, records, settings.models, settings.scorer,
                        judge.id if judge is not None else None)
    groups = [n for n in settings.benchmarks if n.strip().lower() in BENCHMARK_GROUPS]
    if groups:  # text7 / comas7: the paper's table, benchmarks as columns in its order
        summary["table"] = {"group": ",".join(groups), "columns": names}
    write_outputs(settings.out, summary)
    return summary


def _problem_index(data: dict[str, BenchmarkData]) -> dict[tuple[str, str], Problem]:
    return {(name, p.id): p for name, d in data.items() for p in d.problems}


def score_responses(benchmark: str, data_path: Path, responses: Path | None,
                    scorer: str = "vlcohort", model: str = "responses",
                    answer_style: str = "auto", *, judge=None,
                    out: Path | None = None) -> dict[str, Any]:
    """Score saved responses (one JSON object per line: ``id``, ``response``) without a
    model. Ids that the benchmark does not hold are an error that lists them.

    ``judge``: also the verdicts with the judge (:func:`judge_pass`). ``out``: write
    ``items.jsonl`` and the summary there; records already in its ``items.jsonl`` with
    the same key and response lend their judge cache (a re-score asks nothing again),
    and its other records are kept. ``responses`` None re-scores ``out``'s items.jsonl
    (:func:`rescore_items`)."""
    if responses is None:
        if out is None:
            raise BenchmarkError("vlcohort eval score needs --responses FILE.jsonl, or --out "
                                 "DIR holding an items.jsonl to re-score")
        return rescore_items(out, data_path, scorer, answer_style, judge=judge)
    if not Path(responses).is_file():
        what = "is a folder" if Path(responses).is_dir() else "no such file"
        raise BenchmarkError(f"--responses {responses}: {what}; give the JSONL file of saved "
                             "responses (one {\"id\": ..., \"response\": \"...\"} per line).")
    name = parse_benchmark_names(benchmark)[0]
    data = load_all([name], data_path, None, need_images=False)
    problems = {p.id: p for p in data[name].problems}
    grader = get_grader()
    records, unknown, seen = [], [], {}
    for lineno, obj in read_jsonl(responses):
        where = f"{responses}: line {lineno}"
        pid = item_id(obj, where)
        if pid not in problems:
            unknown.append(pid)
            continue
        if "response" not in obj:
            raise BenchmarkError(f"{where}: no 'response' field.")
        rec = {"benchmark": name, "id": pid, "model": model,
               "sample": sample_number(obj.get("sample"), where),
               **response_fields(obj["response"], f"{where} (id {pid!r})")}
        first = seen.setdefault(record_key(rec), lineno)
        if first != lineno:
            raise BenchmarkError(
                f"{where}: id {pid!r} sample {rec['sample']} repeats line {first}; give each "
                "sample of an item its own \"sample\" number (0, 1, ...) or drop the repeat.")
        rec.update(score_record(problems[pid], rec["response"], grader, answer_style, scorer=scorer))
        records.append(rec)
    report_invalid(responses, records)
    if unknown:
        shown = ", ".join(map(repr, unknown[:20])) + (" ..." if len(unknown) > 20 else "")
        raise BenchmarkError(f"{responses}: {len(unknown)} id(s) not in {name} "
                             f"({data[name].path}): {shown}")
    check_code_records(records, _problem_index(data))
    answered = {r["id"] for r in records}
    data[name].problems = [p for p in data[name].problems if p.id in answered]
    everything = records
    if out is not None and (Path(out) / "items.jsonl").is_file():
        everything = _merge_saved(read_items(Path(out) / "items.jsonl"), records)
    return _finish(data, records, everything, [model], scorer, judge, out)


def _merge_saved(saved: list[dict], new: list[dict]) -> list[dict]:
    """``new`` records in place of saved ones with the same key (taking over the saved
    judge cache when the response is the same), the other saved records kept."""
    by_key = {record_key(r): r for r in new}
    merged = []
    for old in saved:
        rec = by_key.pop(record_key(old), None) if "benchmark" in old else None
        if rec is None:
            merged.append(old)
            continue
        if old.get("response") == rec["response"] and isinstance(old.get("judge"), dict):
            rec["judge"] = old["judge"]
        merged.append(rec)
    return merged + [r for r in new if record_key(r) in by_key]


ITEM_FIELDS = ("benchmark", "id", "model", "response")


def rescore_items(out: Path, data_path: Path, scorer: str = "vlcohort",
                  answer_style: str = "auto", judge=None) -> dict[str, Any]:
    """Re-score ``out/items.jsonl`` (from ``vlcohort eval`` or ``score --out``) against the
    benchmark files in ``data_path``: our verdicts and the rule-based official ones are
    recomputed; with ``judge`` the judged ones too, from the cache where it holds the
    step (without a judge the ``judged_*`` fields are dropped, the cache kept). Each
    record's own ``answer_style`` is used unless another than ``auto`` is given."""
    items_path = Path(out) / "items.jsonl"
    if not items_path.is_file():
        raise BenchmarkError(f"{items_path}: not found; give --responses FILE.jsonl, or --out "
                             "a folder written by vlcohort eval / eval score --out")
    records, seen = [], {}
    for lineno, rec in read_jsonl(items_path):
        where = f"{items_path}: line {lineno}"
        missing = [k for k in ITEM_FIELDS if k not in rec]
        if missing:
            raise BenchmarkError(f"{where}: no {missing[0]!r} field "
                                 f"(each line needs {', '.join(ITEM_FIELDS)}).")
        rec["id"] = item_id(rec, where)
        rec["sample"] = sample_number(rec.get("sample"), where)
        rec.update(response_fields(rec["response"], f"{where} (id {rec['id']!r})"))
        first = seen.setdefault(record_key(rec), lineno)
        if first != lineno:
            raise BenchmarkError(
                f"{where}: {rec['benchmark']} id {rec['id']!r} model {rec['model']!r} sample "
                f"{rec['sample']} repeats line {first}; drop one of the two lines.")
        records.append(rec)
    report_invalid(items_path, records)
    if not records:
        raise BenchmarkError(f"{items_path}: holds no records to re-score")
    names = parse_benchmark_names(list(dict.fromkeys(r["benchmark"] for r in records)))
    data = load_all(names, data_path, None, need_images=False)
    problems = {(n, p.id): p for n, d in data.items() for p in d.problems}
    unknown = [f"{r['benchmark']}:{r['id']}" for r in records
               if (r["benchmark"], str(r["id"])) not in problems]
    if unknown:
        shown = ", ".join(map(repr, unknown[:20])) + (" ..." if len(unknown) > 20 else "")
        raise BenchmarkError(f"{items_path}: {len(unknown)} record(s) whose id is not in the "
                             f"benchmark files under {data_path}: {shown}")
    grader = get_grader()
    for rec in records:
        style = answer_style if answer_style != "auto" else rec.get("answer_style", "auto")
        for k in [k for k in rec if k.startswith(("official_", "judged_"))]:
            del rec[k]
        rec.update(score_record(problems[(rec["benchmark"], str(rec["id"]))], rec["response"],
                                grader, style, scorer=scorer))
    check_code_records(records, problems)  # re-scoring runs the programs again
    for n, d in data.items():
        answered = {str(r["id"]) for r in records if r["benchmark"] == n}
        d.problems = [p for p in d.problems if p.id in answered]
    models = list(dict.fromkeys(r["model"] for r in records))
    return _finish(data, records, records, models, scorer, judge, out)


def _finish(data: dict[str, BenchmarkData], records: list[dict], everything: list[dict],
            models: Sequence[str], scorer: str, judge, out: Path | None) -> dict[str, Any]:
    """The judge pass (when a judge is given), ``items.jsonl`` (``everything``) and the
    summary written to ``out`` (when given); returns the summary of ``records``."""
    items_path = Path(out) / "items.jsonl" if out is not None else None
    set_counted_verdicts(everything, scorer)  # each `correct`: the verdict the summary counts
    if judge is not None:
        judge_and_save(records, data, judge, items_path, all_records=everything)
    elif items_path is not None:
        write_items(items_path, everything)
    summary = summarize(data, records, models, scorer, judge.id if judge is not None else None)
    if out is not None:
        write_outputs(Path(out), summary)
    return summary
