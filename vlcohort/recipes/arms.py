"""Several methods from one warm-up and one budget: the demo's "Co-RL beside self-vote".

    <run>/config.yaml          the resolved config (with ``arms``)
    <run>/warmup/<agent>/      warmed-up checkpoints (reused on a re-run, by fingerprint)
    <run>/<method>/            a complete ordinary run per arm (config, metrics, checkpoints)
    <run>/summary.json         final held-out accuracy per method, agent and task family
    <run>/comparison.png       accuracy on each family over RL steps, arms side by side

Each arm starts every agent from its warmed-up checkpoint and differs from the other arms
only in ``method`` (the reward source). Arms run as parallel processes (one torch thread
each) when ``parallel_arms`` is set: on a 2-core machine two tiny-model processes beat one
process with two threads.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from vlcohort import bounded_json, run_folder
from vlcohort.config import Config, save_resolved, validate
from vlcohort.monitoring.metrics import held_out_table, held_out_tasks, read_metrics
from vlcohort.recipes.cohort import run_cohort
from vlcohort.run_header import arm_difference
from vlcohort.training.warmup import fingerprint, reusable, save_fingerprint, warm_up, warmed_up_folder


def _warm_one(cfg: Config, i: int, folder: Path, key: str, threads: int | None) -> dict:
    """Warm up agent ``i`` (runs in a worker process when warm-ups run in parallel)."""
    from vlcohort import console
    from vlcohort.training.agent import build_agent
    from vlcohort.training.distributed import set_cpu_threads

    console.setup()  # a worker process: the parent's --verbose came as VLCOHORT_VERBOSE
    set_cpu_threads(threads or cfg.run.threads)
    mc = cfg.agents[i]
    agent = build_agent(mc)
    stats = warm_up(agent, mc, cfg, folder, seed=cfg.run.seed + 101 * (i + 1))
    save_fingerprint(folder, key, stats)
    return stats


def prepare_warmups(cfg: Config, run_dir: Path, log=print) -> dict[str, Path]:
    """Warm up every agent that asks for it (or reuse a matching earlier warm-up); with
    ``parallel_arms`` the agents warm up in parallel processes, one thread each."""
    out: dict[str, Path] = {}
    todo = []
    for i, mc in enumerate(cfg.agents):
        if not (mc.warmup.steps or mc.warmup.uniform_steps):
            continue
        folder = warmed_up_folder(run_dir, mc.name)
        key = fingerprint(mc, cfg, cfg.run.seed + i)
        if reusable(folder, key):
            log(f"warm-up {mc.name}: reusing {folder}")
        else:
            todo.append((i, folder, key))
        out[mc.name] = folder
    if cfg.parallel_arms and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        from vlcohort.processors.tiny import is_tiny_spec, tiny_model_path

        for i, _, _ in todo:  # build tiny checkpoints once, before the workers race for them
            if is_tiny_spec(cfg.agents[i].path):
                tiny_model_path(cfg.agents[i].path)
        log(f"warming up {', '.join(cfg.agents[i].name for i, _, _ in todo)} in parallel")
        with ProcessPoolExecutor(len(todo), mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(_warm_one, cfg, i, folder, key, 1) for i, folder, key in todo]
            for (i, _, _), f in zip(todo, futures):
                st = f.result()
                log(f"warm-up {cfg.agents[i].name}: done in {st['seconds']:.0f}s")
    else:
        for i, folder, key in todo:
            _warm_one(cfg, i, folder, key, None)
    return out


def arm_config(cfg: Config, method: str, run_dir: Path, warmed: dict[str, Path]) -> Config:
    """The ordinary one-method config of one arm. Any method is an arm (``arms: [intuitor,
    rent]`` works with one agent); an agent with its own ``agents.N.reward_source`` keeps it
    in every arm."""
    arm = copy.deepcopy(cfg)
    arm.method = method
    arm.reward.source = None
    arm.arms = []
    arm.run.output_dir = str(run_folder.child(run_dir, method, what="arms"))
    arm.run.name = f"{cfg.run.name}-{method}"
    wandb = arm.log.wandb  # one W&B run per arm, grouped under the comparison's name
    wandb.name = f"{wandb.name}-{method}" if wandb.name else None
    wandb.group = wandb.group or cfg.run.name
    for mc in arm.agents:
        if mc.name in warmed:
            mc.path = str(warmed[mc.name])
            mc.warmup = type(mc.warmup)()  # already warmed up
    validate(arm)
    return arm


def run_arms(cfg: Config) -> int:
    from vlcohort.training.distributed import launched_world_size

    if launched_world_size() > 1:
        return run_arms_distributed(cfg)
    run_dir = Path(cfg.run.output_dir)
    save_resolved(cfg, run_dir)
    t0 = time.perf_counter()
    warmed = prepare_warmups(cfg, run_dir)
    t_warm = time.perf_counter() - t0
    arms = [arm_config(cfg, m, run_dir, warmed) for m in cfg.arms]
    for arm in arms:
        save_resolved(arm, run_folder.new_sub_run(run_dir, arm.method))  # marked, for --overwrite
    t1 = time.perf_counter()
    if cfg.parallel_arms and len(arms) > 1:
        rc = _run_parallel(arms)
    else:
        rc = 0
        for arm in arms:
            print(f"\n=== arm {arm.method}: {arm_difference(arm, cfg)}")
            rc = rc or run_cohort(arm)
    t_rl = time.perf_counter() - t1
    if rc:
        print(f"an arm failed (exit {rc}); see its train.log in {run_dir}", file=sys.stderr)
        return rc
    report(cfg, run_dir, t_warm, t_rl, time.perf_counter() - t0)
    return 0


def report(cfg: Config, run_dir: Path, t_warm: float, t_rl: float, t_total: float) -> None:
    """summary.json, the summary table and comparison.png of finished arms."""
    summary = summarise(cfg, run_dir)
    summary["seconds"] = {"warmup": round(t_warm, 1), "rl": round(t_rl, 1),
                          "total": round(t_total, 1)}
    run_folder.write_text(run_dir / "summary.json", json.dumps(summary, indent=1))
    print(summary_table(summary))
    png = plot_comparison(cfg, run_dir, run_dir / "comparison.png")
    print(f"\nwarm-up {t_warm:.0f}s, RL {t_rl:.0f}s")
    print(f"results: {run_dir} (summary.json, comparison.png, "
          f"{', '.join(m + '/' for m in cfg.arms)}, warmup/)")
    if png:
        print(f"plot: {png}")


def run_arms_distributed(cfg: Config) -> int:
    """The arms under one multi-process launch: each agent group's leader warms up its own
    agent, then the arms run one after the other over the same process groups (each arm is
    already spread over the ranks, so ``parallel_arms`` does not apply)."""
    from vlcohort.training import distributed as dist_

    layout = dist_.init(cfg)
    run_dir = Path(cfg.run.output_dir)
    if layout.is_logger:
        save_resolved(cfg, run_dir)
    t0 = time.perf_counter()
    warmed: dict[str, Path] = {}
    for i, mc in enumerate(cfg.agents):
        if not (mc.warmup.steps or mc.warmup.uniform_steps):
            continue
        folder = warmed_up_folder(run_dir, mc.name)
        key = fingerprint(mc, cfg, cfg.run.seed + i)
        if i in layout.local_agents and layout.is_group_leader and not reusable(folder, key):
            _warm_one(cfg, i, folder, key, None)
            print(f"warm-up {mc.name}: done (rank {layout.rank})", flush=True)
        warmed[mc.name] = folder
    layout.barrier("the warm-ups")
    t_warm = time.perf_counter() - t0
    t1 = time.perf_counter()
    for method in cfg.arms:
        arm = arm_config(cfg, method, run_dir, warmed)
        if layout.is_logger:
            run_folder.new_sub_run(run_dir, method)  # created and marked, for --overwrite
            print(f"\n=== arm {arm.method}: {arm_difference(arm, cfg)}", flush=True)
        rc = run_cohort(arm, layout=layout)
        if rc:
            return rc
    t_rl = time.perf_counter() - t1
    if layout.is_logger:
        report(cfg, run_dir, t_warm, t_rl, time.perf_counter() - t0)
    dist_.shutdown(layout)
    return 0


def _run_parallel(arms: list[Config]) -> int:
    """One process per arm, one torch thread each; progress from their metrics files."""
    procs = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for arm in arms:
        folder = run_folder.real_dir(arm.run.output_dir)
        cfg_path = save_resolved(arm, folder)
        log = fresh_log(folder / "train.log")
        procs.append((arm, subprocess.Popen(
            [sys.executable, "-m", "vlcohort", "train", str(cfg_path), "run.threads=1"],
            stdout=log, stderr=subprocess.STDOUT, env=env), log))
    from vlcohort.recipes.driver import Progress

    names = [mc.name for mc in arms[0].agents]
    with Progress(sum(a.run.steps for a in arms), 0, arms[0].log.progress) as bar:
        while any(p.poll() is None for _, p, _ in procs):
            time.sleep(2)
            bar.show(*arms_line(arms, names))
        bar.show(*arms_line(arms, names))
    rc = 0
    for arm, p, log in procs:
        log.close()
        if p.returncode:
            print(f"arm {arm.method} failed (exit {p.returncode}); its log: "
                  f"{Path(arm.run.output_dir) / 'train.log'}", file=sys.stderr)
            rc = rc or p.returncode
    return rc


def fresh_log(path: Path):
    """``path`` emptied and opened to append (an arm's ``train.log``): the empty file
    replaces whatever was at the name, a planted link included, and the append refuses to
    follow a link, so the arm's output never lands in the file a link points at."""
    run_folder.write_text(path, "")
    return run_folder.open_append(path)


def arms_line(arms: list[Config], names: list[str]) -> tuple[int, str]:
    """(steps done by all arms, the arms' progress line), read from each arm's
    ``metrics.jsonl``: ``RL arms (A/B): co_rl 48/160 r=0.41/0.38 agree=0.62
    eval=0.55/0.48 | ttrl ...``: per arm its steps, each agent's latest reward, the
    latest agreement and each agent's latest held-out accuracy (all task families)."""
    done, parts = 0, []
    for arm in arms:
        records = readable_records(Path(arm.run.output_dir) / "metrics.jsonl")
        status = arm_status(records, names)
        done += status["step"]
        parts.append(f"{arm.method} {status['step']}/{arm.run.steps}" + "".join(
            f" {label}={value}" for label, value in status.items() if label != "step"))
    return done, f"RL arms ({'/'.join(names)}): " + " | ".join(parts)


def arm_status(records: list[dict], names: list[str]) -> dict:
    """``{"step": n, "r": "0.41/0.38", "agree": "0.62", "eval": "0.55/0.48"}``: the
    latest value of each (per agent, ``-`` for an agent without one yet); a value no
    record has yet is left out."""
    def latest(key: str) -> float | None:
        for r in reversed(records):
            v = r.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return v
        return None

    def per_agent(pattern: str) -> str | None:
        values = [latest(pattern.format(a)) for a in names]
        if all(v is None for v in values):
            return None
        return "/".join("-" if v is None else f"{v:.2f}" for v in values)

    out: dict = {"step": max((r.get("step", 0) for r in records), default=0)}
    agree = latest("cohort/agreement")
    shown = {"r": per_agent("agent/{}/reward/mean"),
             "agree": None if agree is None else f"{agree:.2f}",
             "eval": per_agent("eval/{}/all/acc")}
    out.update({k: v for k, v in shown.items() if v is not None})
    return out


def readable_records(path: Path) -> list[dict]:
    """The complete lines of a ``metrics.jsonl`` another process is writing: a line cut
    mid-write (the last) or a missing file is no error here, only not yet there."""
    try:
        text = path.read_text()
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        try:
            rec = bounded_json.loads(line)
        except bounded_json.BadJSON:
            continue
        if isinstance(rec, dict) and "step" in rec:
            records.append(rec)
    return records


def _own_tasks(cfg: Config) -> dict[str, set[str]]:
    return {mc.name: set(mc.warmup.tasks) for mc in cfg.agents}


def _arm_metrics(run_dir: Path, method: str) -> Path:
    return run_folder.child(run_dir, method, what="arms") / "metrics.jsonl"


def summarise(cfg: Config, run_dir: Path) -> dict:
    """{methods: {method: {agent: {task: acc, ..., "all", "parse_rate", "length", "own": x,
    "unseen": y}}}} from the last and first eval records of each arm. The families are
    the synthetic ``data.tasks``, or those the held-out records name (a file's ``task``
    column)."""
    own = _own_tasks(cfg)
    names = [mc.name for mc in cfg.agents]
    runs = {m: [r for r in read_metrics(_arm_metrics(run_dir, m))
                if any(k.startswith("eval/") for k in r)]
            for m in cfg.arms if _arm_metrics(run_dir, m).is_file()}
    tasks = arm_tasks(cfg, [r for recs in runs.values() for r in recs])
    out: dict = {"tasks": tasks, "agents": {a: sorted(t) for a, t in own.items()},
                 "methods": {}, "start": {}}
    for method, recs in runs.items():
        if not recs:
            continue
        out["methods"][method] = _eval_table(recs[-1], names, tasks, own)
        out["methods"][method]["step"] = recs[-1]["step"]
        out["start"] = _eval_table(recs[0], names, tasks, own)
    return out


def arm_tasks(cfg: Config, records: list[dict]) -> list[str]:
    """The task families of the arms' held-out scores: the synthetic ``data.tasks`` when
    the records hold them, else the families the records name, else none (``all`` only)."""
    names = [mc.name for mc in cfg.agents]
    named = held_out_tasks(records, names)
    return [t for t in cfg.data.tasks if t in named] or named


def _eval_table(rec: dict, names: list[str], tasks: list[str], own: dict[str, set[str]]) -> dict:
    table: dict = held_out_table(rec, names, tasks)
    for name, row in table.items():
        mine = [row[t] for t in tasks if t in own[name] and t in row]
        other = [row[t] for t in tasks if t not in own[name] and t in row]
        if mine:
            row["own"] = sum(mine) / len(mine)
        if other:
            row["unseen"] = sum(other) / len(other)
    return table


def summary_table(summary: dict) -> str:
    tasks = summary["tasks"] or ["all"]
    lines = ["", "held-out accuracy (greedy) per method, agent and task family "
                 "(own = warmed up on it, unseen = not)",
             f"{'method':<10} {'agent':<6} " + " ".join(f"{t:>12}" for t in tasks)
             + f" {'own':>6} {'unseen':>7}"]

    def fmt(v):
        return f"{v:.2f}" if isinstance(v, (int, float)) and not math.isnan(v) else "-"

    rows = [("start", summary.get("start", {}))] + list(summary["methods"].items())
    for method, table in rows:
        for agent, row in table.items():
            if not isinstance(row, dict):
                continue
            lines.append(f"{method:<10} {agent:<6} " + " ".join(f"{fmt(row.get(t)):>12}" for t in tasks)
                         + f" {fmt(row.get('own')):>6} {fmt(row.get('unseen')):>7}")
    return "\n".join(lines)


def plot_comparison(cfg: Config, run_dir: Path, out_png: Path) -> Path | None:
    """Accuracy on each family over RL steps per agent, one column per arm, plus
    pseudo-label accuracy and agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [m for m in cfg.arms if _arm_metrics(run_dir, m).is_file()]
    if not arms:
        return None
    own = _own_tasks(cfg)
    records = {m: read_metrics(_arm_metrics(run_dir, m)) for m in arms}
    tasks = arm_tasks(cfg, [r for recs in records.values() for r in recs]) or ["all"]
    fig, axes = plt.subplots(2, len(arms), figsize=(6 * len(arms), 7), squeeze=False)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for j, method in enumerate(arms):
        recs = records[method]
        ax = axes[0][j]
        for i, mc in enumerate(cfg.agents):
            for task in tasks:
                pts = [(r["step"], r[f"eval/{mc.name}/{task}/acc"]) for r in recs
                       if f"eval/{mc.name}/{task}/acc" in r]
                if pts:
                    style = "-" if task in own[mc.name] else "--"
                    tag = "own" if task in own[mc.name] else "unseen"
                    ax.plot(*zip(*pts), style, color=colours[i % 4],
                            label=f"{mc.name} on {task} ({tag})")
        ax.axhline(0.25, color="grey", lw=0.8, ls=":")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{method}: held-out accuracy per skill family")
        ax.set_xlabel("RL step")
        ax.legend(fontsize=8, loc="center right")
        ax = axes[1][j]
        for i, mc in enumerate(cfg.agents):
            pts = [(r["step"], r[f"agent/{mc.name}/pseudo_label/acc"]) for r in recs
                   if r.get(f"agent/{mc.name}/pseudo_label/acc") is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, _smooth(ys), color=colours[i % 4], label=f"{mc.name} pseudo-label acc")
        pts = [(r["step"], r["cohort/agreement"]) for r in recs if r.get("cohort/agreement") is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, _smooth(ys), color="black", label="agreement")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{method}: pseudo-labels and agreement (smoothed)")
        ax.set_xlabel("RL step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()  # drawn in memory: savefig would follow a link at the name
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    return run_folder.write_bytes(out_png, buf.getvalue())


def _smooth(ys, k: int = 10):
    out, acc = [], []
    for y in ys:
        acc.append(y)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out
