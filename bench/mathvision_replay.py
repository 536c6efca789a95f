"""Replay MATH-Vision's official scorer over the published model outputs.

mathllm/MATH-V publishes, per model, ``outputs/**/<model>.jsonl``: each item's ``id``,
``response`` and the ``correct`` its ``evaluation/evaluate.py`` wrote (gold answers and
options are in ``data/test.jsonl``). Replaying our extraction and equality over the stored
responses must give the stored verdicts; this is the check behind ``--scorer official``
for MATH-Vision, for both ways of computing LaTeX values:

- ``official``: the official parser in its own environment (build it first with
  ``python -m vlcohort.eval.official.mathvision_env --build``);
- ``approx``: the in-process ``latex2sympy2_extended`` fallback.

Files of 4 MB and more are absent from the mirror and skipped. Materialise the rest::

    mkdir -p /tmp/mathv && cd /work/.mirror/mathllm+MATH-V/repo && \\
      git ls-tree -r --name-only HEAD outputs data | while read -r f; do \\
        mkdir -p "/tmp/mathv/$(dirname "$f")"; \\
        git show "HEAD:$f" > "/tmp/mathv/$f" 2>/dev/null || rm -f "/tmp/mathv/$f"; done
    python bench/mathvision_replay.py /tmp/mathv

Figures (a1f5cc3, the 16 files under 4 MB, 48,640 items): official path 48,639 / 48,640,
the same per item as the official evaluate.py rerun in the pinned environment (its one
disagreement, Gemini-Pro id 3013, is a stale stored verdict: "4/3" vs gold ``\frac{4}{3}``
stored false, which the released code judges true); approx path 48,542 / 48,640.

``--write-regression tests/data/mathvision_official_replay.jsonl --known approx.json --rerun
rerun.json`` (``approx.json``: an earlier ``--paths approx --json`` output) writes the compact
regression file (rule: every item where either path disagrees with the stored verdict,
where the official code's own rerun (``--rerun``) does, plus a seeded sample of ``--sample``
items from each file under ``--sample-max-kb``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vlcohort.eval.official import mathvision as mv  # noqa: E402 - sys.path is set first

MAX_BYTES = 4 * 1024 * 1024


def load_gold(root: Path) -> dict[str, dict]:
    """``data/test.jsonl`` by id: answer, options (the fields ``evaluate.py`` reads)."""
    path = root / "data" / "test.jsonl"
    out = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out[str(row["id"])] = {"answer": str(row["answer"]),
                                       "options": list(row.get("options") or [])}
            except (ValueError, KeyError) as e:
                raise SystemExit(f"{path}: line {lineno}: bad record ({e})")
    return out


def output_files(root: Path, max_bytes: int = MAX_BYTES) -> list[Path]:
    return sorted(p for p in (root / "outputs").rglob("*.jsonl")
                  if p.is_file() and p.stat().st_size < max_bytes)


def read_outputs(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows.append({"id": str(row["id"]), "response": row["response"],
                             "correct": bool(row["correct"])})
            except (ValueError, KeyError) as e:
                raise SystemExit(f"{path}: line {lineno}: bad record ({e})")
    return rows


def replay_rows(rows: list[dict], which: str) -> list[bool]:
    """Our verdict of each row (``answer``/``options``/``response``) by ``which`` path; the
    official path asks the worker for all values of the batch at once first."""
    preds = [mv.mathvision_extract(r["response"]) for r in rows]
    if which == "official":
        mv.prefetch([pair for r, p in zip(rows, preds)
                     for pair in mv.gold_pairs(p, r["answer"], r["options"])], which)
    return [mv.mathvision_correct(p, r["answer"], r["options"] or None, which)
            for r, p in zip(rows, preds)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="a MATH-V checkout (outputs/ and data/test.jsonl)")
    ap.add_argument("--paths", default="official,approx", help="comma list: official, approx")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--write-regression", type=Path)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--sample-max-kb", type=int, default=4096,
                    help="sample only from files under this size (short responses)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rerun", type=Path,
                    help="JSON {file: {id: verdict}} of the official evaluate.py's own rerun "
                         "(kept as each regression row's 'rerun'; its disagreements are kept too)")
    ap.add_argument("--known", type=Path, action="append", default=[],
                    help="an earlier --json output: its disagreements count for the "
                         "regression rule too (e.g. the slow approx pass, run once)")
    args = ap.parse_args(argv)
    paths = [w for w in args.paths.split(",") if w]
    if "official" in paths and mv.backend() != "official":
        raise SystemExit("the official parser environment is not built: "
                         "python -m vlcohort.eval.official.mathvision_env --build")
    gold = load_gold(args.root)
    files = output_files(args.root)
    if not files:
        raise SystemExit(f"{args.root}/outputs: no .jsonl files under 4 MB")
    totals = {w: [0, 0] for w in paths}
    per_file, keep = {}, []
    rng = random.Random(args.seed)
    rerun = json.loads(args.rerun.read_text()) if args.rerun else {}
    known: dict[str, set] = {}
    for k in args.known:
        for rel, stats in json.loads(k.read_text())["files"].items():
            known.setdefault(rel, set()).update(i for s in stats.values() for i in s["disagree_ids"])
    print(f"{'file':60s} {'n':>6s} " + " ".join(f"{w:>10s}" for w in paths))
    for path in files:
        rel = str(path.relative_to(args.root))
        rows = read_outputs(path)
        for r in rows:
            if r["id"] not in gold:
                raise SystemExit(f"{path}: id {r['id']!r} is not in data/test.jsonl")
            r.update(gold[r["id"]])
        stats, mine = {}, {}
        for w in paths:
            t0 = time.perf_counter()
            mine[w] = replay_rows(rows, w)
            agree = sum(a == r["correct"] for a, r in zip(mine[w], rows))
            stats[w] = {"agree": agree, "n": len(rows), "s": round(time.perf_counter() - t0, 1),
                        "disagree_ids": [r["id"] for a, r in zip(mine[w], rows) if a != r["correct"]]}
            totals[w][0] += agree
            totals[w][1] += len(rows)
        per_file[rel] = stats
        print(f"{rel[-60:]:60s} {len(rows):6d} " + " ".join(
            f"{stats[w]['agree']:>10d}" for w in paths), flush=True)
        if args.write_regression:
            bad = {i for w in paths for i in stats[w]["disagree_ids"]} | known.get(rel, set())
            file_rerun = {i: (v[0] if isinstance(v, list) else v)
                          for i, v in rerun.get(rel, {}).items()}
            bad |= {r["id"] for r in rows if r["id"] in file_rerun
                    and bool(file_rerun[r["id"]]) != r["correct"]}
            small = path.stat().st_size < args.sample_max_kb * 1024
            pool = [r for r in rows if r["id"] not in bad]
            sample = {r["id"] for r in rng.sample(pool, min(args.sample, len(pool)))} if small else set()
            for r in rows:
                if r["id"] in bad or r["id"] in sample:
                    keep.append({"file": rel, "id": r["id"], "response": r["response"],
                                 "answer": r["answer"], "options": r["options"],
                                 "correct": r["correct"],
                                 **({"rerun": bool(file_rerun[r["id"]])}
                                    if r["id"] in file_rerun else {}),
                                 "why": "disagrees" if r["id"] in bad else "sample"})
    print(" ".join(f"{w}: {a}/{n}" for w, (a, n) in totals.items()))
    if mv.backend() == "official" and "official" in paths:
        w = mv.worker()
        slow = max(w.cache.items(), key=lambda kv: kv[1].get("s", 0), default=("", {}))
        print(f"official worker: {len(w.cache)} values cached, {w.timeouts} timeouts, "
              f"{w.restarts} restarts; slowest value {slow[1].get('s', 0)} s ({slow[0][:60]!r})")
    if args.json:
        args.json.write_text(json.dumps({"totals": totals, "files": per_file}, indent=1) + "\n")
    if args.write_regression:
        with open(args.write_regression, "w", encoding="utf-8") as fh:
            for row in keep:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"wrote {len(keep)} rows to {args.write_regression}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
