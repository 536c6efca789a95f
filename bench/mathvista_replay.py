"""Replay MathVista's official scorer over the published result files.

lupantech/MathVista publishes, per model, ``results/<model>/output_*.json``: the response,
the official (GPT) ``extraction``, and the ``prediction`` / ``true_false`` its
``calculate_score.py`` wrote. Two replays, both of which must never raise:

- *normalisation*: :func:`mathvista_normalize` + :func:`mathvista_correct` over the stored
  ``extraction`` must give the stored ``true_false`` (and ``prediction``);
- *pipeline*: :func:`vlcohort.eval.official.mathvista.verdict` on the stored response with the
  stored extraction as the judge's output (``use_judge=True``): the official pre-GPT rules
  first, then the normalisation; this is what ``--scorer official`` with the judge does.

Two kinds of stored verdicts cannot be reproduced by the released code, and are counted
apart (anything else is ``other`` and fails the run):

- ``legacy_int``: verdicts written before the released ``calculate_score.py``: for integer
  items the stored prediction is ``str(int(x))`` (so ``"5.0"`` had no prediction) where the
  released code has ``str(int(float(x)))``;
- ``blank_response`` (pipeline only): the published response is ``""`` but the stored
  extraction is not, so that extraction came from another response (InstructBLIP2's file).

Materialise the files first (blobs absent from a partial mirror are skipped)::

    mkdir -p /tmp/mathvista
    git -C /work/.mirror/lupantech+MathVista/repo archive HEAD results | tar -x -C /tmp/mathvista
    python bench/mathvista_replay.py /tmp/mathvista

``--write-regression tests/data/mathvista_official_replay.jsonl`` writes the compact
regression file: every row the previous code (stripped equality, a subset of exceptions
caught) crashed or disagreed on, every row either replay does not reproduce, a seeded sample
of ``--sample`` rows per file and of ``--sample-quick`` rows per file and pre-GPT rule.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import Levenshtein

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vlcohort.data.problems import Problem  # noqa: E402 - sys.path is set first
from vlcohort.eval.official.mathvista import mathvista_correct, mathvista_normalize, quick_extraction, verdict  # noqa: E402 - sys.path is set first

#: The fields a replay needs, kept in the regression file.
FIELDS = ("pid", "question_type", "answer_type", "precision", "choices", "answer",
          "extraction", "prediction", "true_false")
#: Responses longer than this are left out of the regression file (they trigger no pre-GPT
#: rule, which the writer checks, so a test passes a stand-in that triggers none either).
MAX_RESPONSE = 400
KINDS = ("agree", "legacy_int", "blank_response", "other")


def _literal(value: Any) -> Any:
    """Some files store ``choices`` as stringified Python (``"['a', 'b']"``)."""
    if isinstance(value, str) and value[:1] == "[":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def legacy_int(extraction: Any) -> str | None:
    """The pre-release integer rule the older stored verdicts were written by."""
    try:
        return str(int(extraction))
    except Exception:
        return None


def stored_rule(row: dict) -> str:
    """Which rule wrote the stored verdict, as far as it shows: ``legacy_int`` when the
    item is an integer item and the stored prediction is the older rule's output where the
    released rule's differs; else ``released``."""
    if row["answer_type"] == "integer" and row.get("question_type") != "multi_choice":
        old = legacy_int(row["extraction"])
        try:
            new = str(int(float(row["extraction"])))
        except Exception:
            new = None
        if old != new and row.get("prediction") == old:
            return "legacy_int"
    return "released"


def problem_of(row: dict) -> Problem:
    choices = _literal(row["choices"])
    return Problem(id=str(row["pid"]), text="", images=[], source="mathvista",
                   options=[str(c) for c in choices] if choices else None, gold=str(row["answer"]),
                   meta={"question_type": row["question_type"], "answer_type": row["answer_type"],
                         "precision": row["precision"], "official_query": row.get("query")})


def replay_row(row: dict) -> dict:
    """Both replays of one stored row: ``prediction`` / ``correct`` (normalisation),
    ``pipeline_rule`` / ``pipeline_correct``, their kinds, and any exception in ``crash``."""
    out: dict[str, Any] = {"crash": None}
    try:
        pred = mathvista_normalize(row["extraction"], _literal(row["choices"]),
                                   row["question_type"], row["answer_type"], row["precision"])
        out["prediction"], out["correct"] = pred, mathvista_correct(pred, row["answer"])
        response = row.get("response") if isinstance(row.get("response"), str) else ""
        v = verdict(problem_of(row), response, None, {"extract": row["extraction"]}, True)
        out["pipeline_rule"], out["pipeline_correct"] = v["official_rule"], v["official_correct"]
    except Exception as e:  # counted and reported, never fatal
        out.update(prediction=None, correct=False, pipeline_rule="crash", pipeline_correct=False,
                   crash=f"{type(e).__name__}: {e}")
    legacy = stored_rule(row) == "legacy_int"
    out["kind"] = ("agree" if out["correct"] == row["true_false"] else
                   "legacy_int" if legacy else "other")
    blank = row.get("response") == "" and str(row["extraction"]).strip() != ""
    out["pipeline_kind"] = ("agree" if out["pipeline_correct"] == row["true_false"] else
                            "legacy_int" if legacy else "blank_response" if blank else "other")
    return out


def previous_verdict(row: dict) -> str:
    """How the code before this replay fared on the row (``crash`` / ``disagree`` /
    ``agree``): stripped equality, only TypeError / ValueError caught; the rule that picks
    the regression rows."""
    x, qt, at = row["extraction"], row["question_type"], row["answer_type"]
    try:
        if qt == "multi_choice":
            x = x.strip() if isinstance(x, str) else ("" if x is None else str(x))
            letter = re.findall(r"\(([a-zA-Z])\)", x)
            x = letter[0].upper() if letter else x
            ch = list(_literal(row["choices"]) or [])
            letters = [chr(65 + i) for i in range(len(ch))]
            d = [Levenshtein.distance(x, c) for c in ch]
            pred = ch[letters.index(x)] if x in letters else ch[d.index(min(d))]
        else:
            try:
                pred = (str(int(float(x))) if at == "integer" else
                        str(round(float(x), int(row["precision"]))) if at == "float" else str(x))
            except (TypeError, ValueError):
                pred = None
    except Exception:
        return "crash"
    ok = pred is not None and str(pred).strip() == str(row["answer"]).strip()
    return "agree" if ok == row["true_false"] else "disagree"


def result_files(root: Path) -> list[Path]:
    """``results/*/output_*.json`` under ``root`` (or ``root`` itself holding them)."""
    base = root / "results" if (root / "results").is_dir() else root
    return sorted(base.glob("*/output_*.json"))


def load_rows(path: Path) -> tuple[list[dict], str | None]:
    """(rows with an extraction, why the file was skipped: LFS pointer / unreadable)."""
    try:
        head = path.read_bytes()[:200]
        if head.startswith(b"version https://git-lfs"):
            return [], "git-lfs pointer"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return [], f"unreadable ({e})"
    return [r for r in data.values() if isinstance(r, dict) and "extraction" in r], None


def regression_row(rel: str, row: dict, why: str) -> dict | None:
    """One row of the regression file (None: a long response that would trigger a pre-GPT
    rule, which cannot be shortened safely)."""
    out = {"file": rel, **{k: row.get(k) for k in FIELDS}, "why": why,
           "stored_rule": stored_rule(row)}
    out["choices"] = _literal(out["choices"])
    resp = row.get("response")
    if isinstance(resp, str) and len(resp) <= MAX_RESPONSE:
        out["response"] = resp
    else:
        if isinstance(resp, str) and quick_extraction(
                resp, row["question_type"], row["answer_type"], out["choices"]) is not None:
            return None
        out["response"] = None  # long: no pre-GPT rule applies (checked above)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a MathVista checkout (or its results/ folder)")
    ap.add_argument("--write-regression", type=Path, default=None)
    ap.add_argument("--sample", type=int, default=20, help="sampled rows per file")
    ap.add_argument("--sample-quick", type=int, default=3, help="per file and pre-GPT rule")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    files = result_files(args.root)
    if not files:
        print(f"no results/*/output_*.json under {args.root}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    tot = {f"{p}{k}": 0 for p in ("", "pipe_") for k in KINDS}
    tot.update(rows=0, crash=0, pred_same=0, pred_legacy=0, previous_crash=0, previous_disagree=0)
    keep: list[dict] = []
    print(f"{'file':<60} {'rows':>5} | normalisation: {'agree':>5} {'legacy':>6} {'other':>5} "
          f"| pipeline: {'agree':>5} {'legacy':>6} {'blank':>5} {'other':>5} | crash")
    for path in files:
        rel = path.relative_to(args.root).as_posix()
        rows, why = load_rows(path)
        if why:
            print(f"{rel:<60} skipped: {why}")
            continue
        c = {f"{p}{k}": 0 for p in ("", "pipe_") for k in KINDS}
        c["crash"] = 0
        chosen = set(rng.sample(range(len(rows)), min(args.sample, len(rows))))
        quick: dict[str, list[int]] = {}
        kept: set[int] = set()
        for i, row in enumerate(rows):
            res = replay_row(row)
            prev = previous_verdict(row)
            c[res["kind"]] += 1
            c["pipe_" + res["pipeline_kind"]] += 1
            c["crash"] += res["crash"] is not None
            tot["pred_same"] += res["prediction"] == row.get("prediction")
            tot["pred_legacy"] += (res["prediction"] != row.get("prediction")
                                   and stored_rule(row) == "legacy_int")
            if prev != "agree":
                tot["previous_" + prev] += 1
            if res["pipeline_rule"].startswith("quick_"):
                quick.setdefault(res["pipeline_rule"], []).append(i)
            if "other" in (res["kind"], res["pipeline_kind"]) or res["crash"]:
                print(f"  NOT REPRODUCED {rel} pid {row['pid']}: {row['extraction']!r} -> "
                      f"{res['prediction']!r} ({res['pipeline_rule']}) vs stored "
                      f"{row.get('prediction')!r} {row['true_false']} {res['crash'] or ''}")
            reason = ("previous_" + prev if prev != "agree" else
                      res["kind"] if res["kind"] != "agree" else
                      "pipeline_" + res["pipeline_kind"] if res["pipeline_kind"] != "agree" else
                      "sample" if i in chosen else None)
            if reason and (r := regression_row(rel, row, reason)) is not None:
                keep.append(r)
                kept.add(i)
        for rule, idx in sorted(quick.items()):  # the pre-GPT rules, a few per file
            for i in rng.sample(idx, min(args.sample_quick, len(idx))):  # may repeat: skipped
                if i not in kept and (r := regression_row(rel, rows[i], rule)) is not None:
                    keep.append(r)
                    kept.add(i)
        tot["rows"] += len(rows)
        for k, v in c.items():
            tot[k] += v
        print(f"{rel:<60} {len(rows):>5} | {'':>15}{c['agree']:>5} {c['legacy_int']:>6} "
              f"{c['other']:>5} | {'':>10}{c['pipe_agree']:>5} {c['pipe_legacy_int']:>6} "
              f"{c['pipe_blank_response']:>5} {c['pipe_other']:>5} | {c['crash']:>5}")
    t, n = tot, tot["rows"]
    print(f"\n{len(files)} files, {n} rows with an extraction.")
    print(f"normalisation: true_false reproduced on {t['agree']} ({100 * t['agree'] / n:.2f}%); "
          f"{t['legacy_int']} stored by the pre-release integer rule str(int(x)); {t['other']} "
          f"other. prediction identical on {t['pred_same']}; on {t['pred_legacy']} more the "
          "stored one is the pre-release integer rule's.")
    print(f"pipeline (pre-GPT rules on the response, stored extraction as the judge): "
          f"reproduced on {t['pipe_agree']} ({100 * t['pipe_agree'] / n:.2f}%); "
          f"{t['pipe_legacy_int']} pre-release integer rule; {t['pipe_blank_response']} with a "
          f"blank published response; {t['pipe_other']} other.")
    print(f"previous code: {t['previous_crash']} crashed, {t['previous_disagree']} disagreed.")
    print("nothing crashed" if t["crash"] == 0 else f"{t['crash']} CRASHED: see above")
    if args.write_regression:
        args.write_regression.parent.mkdir(parents=True, exist_ok=True)
        with open(args.write_regression, "w", encoding="utf-8") as f:
            for r in keep:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"wrote {len(keep)} rows to {args.write_regression}")
    return 0 if t["crash"] == 0 and t["other"] == 0 and t["pipe_other"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
