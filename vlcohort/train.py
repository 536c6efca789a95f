"""``vlcohort train``: the cohort recipe, readable top to bottom.

    setup    resolved config saved; problems loaded; every agent built (model, optimizer,
             schedule, reference when KL > 0, rollout engine); resume from a checkpoint
    step     B prompts -> each agent renders and generates G completions -> answers ->
             each agent's vote -> each agent's teacher labels (reward source) -> rewards
             -> group-normalised advantages -> only then, each agent's GRPO update
    cleanup  final checkpoint, plots, summary of skipped records and where results are

Departures from the paper's published code, on purpose:
- one process drives every agent (no JSON label files between two jobs);
- the vote clusters answers by the grader's equivalence classes, so "C" and "C. 45°" are
  one vote (the published code hashed normalised strings);
- rollout log-probs feed a token-level importance-sampling correction (Co-RL used none).
"""

from __future__ import annotations

import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from processors import ProblemInputError

from . import checkpoint as ckpt
from . import grpo
from .agent import Agent, build_agent, update_agent
from .config import Config, ConfigError, load_config, resolved_text, save_resolved
from .grading import get_grader
from .metrics import MetricsLogger, summary_line
from .problems import Problem
from .rewards import extract_all, gold_match, labels_for, score, vote_all
from .rollout.base import SamplingParams
from .stream import ProblemStream
from .views import view_of


class TrainingError(RuntimeError):
    """A run that cannot go on (e.g. too many non-finite losses in a row)."""


@dataclass
class Run:
    cfg: Config
    dir: Path
    agents: list[Agent]
    stream: ProblemStream
    logger: MetricsLogger
    grader: Any
    eval_problems: list = field(default_factory=list)
    shards: list[ProblemStream] = field(default_factory=list)  # data.decouple: one per agent
    step: int = 0  # last completed step
    bad_steps_in_row: int = 0
    skipped_records: dict[str, int] = field(default_factory=dict)
    no_signal_steps: int = 0


# ============================================================================ setup


def load_problems(cfg: Config) -> list[Problem]:
    """The training set: synthetic (default) or a file / hub dataset through ``data.*``.

    Bad records are skipped and counted at load (summary printed here); images are decoded
    only at render, where ``next_prompts`` skips and counts the broken ones.
    """
    d = cfg.data
    if d.source == "synthetic":
        from .synthetic import make_dataset

        return make_dataset(tasks=tuple(d.tasks), n=d.num_problems,
                            seed=cfg.run.seed, image_size=d.image_size,
                            shuffle_options=d.shuffle_options)
    from dataclasses import replace as _replace

    from .problems import PRESETS, DataError, load_problems_from
    from .views import attach_views

    preset = PRESETS[d.preset]
    overrides = {k: v for k, v in vars(d.columns).items() if v}
    views = [(a.name, a.view.column, a.view.rewrite_file) for a in cfg.agents
             if a.view.column or a.view.rewrite_file]
    try:
        problems, report = load_problems_from(
            d.path, source=d.source, preset=d.preset, columns=_replace(preset, **overrides),
            split=d.split, limit=d.limit, require_answer=cfg.reward.source == "ground_truth",
            extra_columns=sorted({c for _, c, _ in views if c}), where=d.where)
        problems = attach_views(problems, views, report)
    except DataError as e:
        raise ConfigError(str(e)) from e
    print(report.summary(), file=sys.stderr if report.skipped else sys.stdout)
    if not problems:
        raise ConfigError(f"data.path: no usable record in {d.path} (see the summary above)")
    return problems


def load_eval_problems(cfg: Config) -> list[Problem]:
    """Held-out problems for ``eval.*``: the training families, drawn with another seed."""
    if not cfg.eval.every:
        return []
    from .synthetic import make_dataset

    n = cfg.eval.problems_per_task * len(cfg.data.tasks)
    return make_dataset(tasks=tuple(cfg.data.tasks), n=n, seed=cfg.run.seed + 7919,
                        image_size=cfg.data.image_size, shuffle_options=cfg.data.shuffle_options)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(cfg: Config, resume: str | Path | None = None) -> Run:
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    run_dir = Path(resume) if resume is not None else Path(cfg.run.output_dir)
    seed_everything(cfg.run.seed)
    save_resolved(cfg, run_dir)
    problems = load_problems(cfg)
    stream = ProblemStream(problems, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
    folder = ckpt.latest_checkpoint(run_dir) if resume is not None else None
    agents = [build_agent(mc, cfg, weights_from=str(folder / mc.name) if folder else None)
              for mc in cfg.agents]
    logger = MetricsLogger(run_dir, tensorboard=cfg.log.tensorboard)
    shards = shard_streams(problems, len(agents), cfg) if cfg.data.decouple else []
    run = Run(cfg=cfg, dir=run_dir, agents=agents, stream=stream, shards=shards, logger=logger,
              grader=get_grader(cfg.reward.grader), eval_problems=load_eval_problems(cfg))
    if folder is not None:
        state = ckpt.load_state(folder)
        for agent in agents:
            st = ckpt.load_trainer_state(folder, agent.name)
            agent.optimizer.load_state_dict(st["optimizer"])
            agent.scheduler.load_state_dict(st["scheduler"])
        stream.load_state(state["stream"])
        for shard, st in zip(shards, state.get("shards", [])):
            shard.load_state(st)
        run.step = int(state["step"])
        run.skipped_records = dict(state.get("skipped_records", {}))
        run.no_signal_steps = int(state.get("no_signal_steps", 0))
        ckpt.set_rng_state(ckpt.load_rng(folder))
        logger.truncate_after(run.step)
        print(f"resumed from {folder} (step {run.step})")
    elif resume is not None:
        raise TrainingError(f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}")
    else:
        logger.truncate_after(0)  # a fresh run in an old folder starts a fresh log
    return run


# ============================================================================ one step


def owned_prompts(run: Run, agent: int, n_prompts: int) -> list[int]:
    """The step's prompts agent ``agent`` trains on: all of them, or with ``data.decouple``
    the block of B drawn from its own shard."""
    if not run.shards:
        return list(range(n_prompts))
    B = n_prompts // len(run.shards)
    return list(range(agent * B, (agent + 1) * B))


def rollout_seed(seed: int, step: int, agent: int) -> int:
    """Sampling seed of one agent's rollouts at one step: a pure function of the run seed,
    so rollouts do not depend on how much randomness anything else used before (a model
    build, a resume), and a resumed run samples exactly what the straight run did."""
    return (seed * 1_000_003 + step * 1_009 + agent) % (2**31 - 1)


def shard_streams(problems: list[Problem], n_agents: int, cfg: Config) -> list[ProblemStream]:
    """``data.decouple``: agent a trains on problems a, a + A, a + 2A, ... only."""
    shards = [problems[a::n_agents] for a in range(n_agents)]
    if any(not s for s in shards):
        raise TrainingError(f"data.decouple with {n_agents} agents needs at least {n_agents} "
                            f"problems, got {len(problems)}")
    return [ProblemStream(s, seed=cfg.run.seed * 1009 + a, shuffle=cfg.data.shuffle)
            for a, s in enumerate(shards)]


def next_prompts(run: Run) -> tuple[list[Problem], list[list]]:
    """B problems that every agent can render, and each agent's rendering of them.

    A problem that fails to render for any agent (missing or corrupt image, placeholder
    mismatch, empty question) is skipped for all agents, counted by reason, and replaced.
    Each agent renders its own view of the problem (``agents.N.view``; the same text by
    default); the problems, options and gold are shared, so votes compare like with like.
    """
    B = run.cfg.rollout.prompts_per_step
    problems: list[Problem] = []
    rendered: list[list] = [[] for _ in run.agents]
    # decouple: B problems from each agent's shard, in agent order (prompt b is owned by
    # agent b // B); every agent still answers all of them, since peer votes need it.
    sources = run.shards or [run.stream]
    attempts = 0
    while len(problems) < B * len(sources):
        stream = sources[len(problems) // B]
        attempts += 1
        if attempts > 10 * B * len(sources) + len(run.stream.problems):
            raise TrainingError("could not find renderable problems: every record fails; "
                                f"skipped so far: {run.skipped_records}")
        p = stream.next()
        try:
            r = [a.adapter.render(view_of(p, a.name), run.cfg.prompt.system_prompt,
                                  run.cfg.prompt.instruction)
                 for a in run.agents]
        except ProblemInputError as e:
            reason = getattr(e, "reason", type(e).__name__)
            run.skipped_records[reason] = run.skipped_records.get(reason, 0) + 1
            print(f"skipped record: {e}", file=sys.stderr)
            continue
        problems.append(p)
        for i, ri in enumerate(r):
            rendered[i].append(ri)
    return problems, rendered


def train_step(run: Run, step: int) -> dict[str, Any]:
    cfg, agents = run.cfg, run.agents
    B, G = cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    t_step = time.perf_counter()
    problems, rendered = next_prompts(run)

    # 1. every agent generates G completions per prompt, before anyone updates
    t0 = time.perf_counter()
    rollouts = [a.engine.generate(rendered[i], G, sampling, seed=rollout_seed(cfg.run.seed, step, i))
                for i, a in enumerate(agents)]
    t_rollout = time.perf_counter() - t0

    # 2. answers, votes, teacher labels, rewards, advantages
    t0 = time.perf_counter()
    n_prompts = len(problems)  # B, or A x B with data.decouple
    answers = [extract_all(ro.texts_by_prompt(), cfg.reward.answer_style) for ro in rollouts]  # [A][B][G]
    votes = [vote_all(ans, problems, cfg.reward.tie, cfg.reward.min_share, run.grader)
             for ans in answers]  # [A][B]
    scored, advantages, labels = [], [], []
    for i in range(len(agents)):
        lab = labels_for(cfg.reward.source, i, votes, problems, cfg.reward.topology,
                         cfg.reward.tie, run.grader)  # [B]
        sc = score(answers[i], lab, problems, run.grader, cfg.reward.format_weight)
        adv = grpo.group_advantages(sc.rewards, scale=cfg.grpo.adv_scale, valid=sc.valid)  # [B, G]
        labels.append(lab)
        scored.append(sc)
        advantages.append(adv.reshape(n_prompts * G))  # [N], row b*G + g
    t_grading = time.perf_counter() - t0

    # 3. each agent's update, from its own rollouts and advantages
    t0 = time.perf_counter()
    shard_views: list = []
    updates = []
    for i, agent in enumerate(agents):
        own = owned_prompts(run, i, n_prompts)  # all, or this agent's shard (decouple)
        if own != list(range(n_prompts)):
            rendered[i] = [rendered[i][b] for b in own]
            rollouts[i] = rollouts[i].select_prompts(own)
            answers[i] = [answers[i][b] for b in own]
            votes_i = [votes[i][b] for b in own]
            labels[i] = [labels[i][b] for b in own]
            scored[i] = scored[i].select(own)
            rows = torch.tensor([b * G + g for b in own for g in range(G)])
            advantages[i] = advantages[i][rows]
            own_problems = [problems[b] for b in own]
        else:
            votes_i, own_problems = votes[i], problems
        shard_views.append((votes_i, own_problems))
        if bool((advantages[i] != 0).any()):
            updates.append(update_agent(agent, rendered[i], rollouts[i], advantages[i],
                                        cfg.grpo, cfg.rollout.temperature,
                                        length_norm=cfg.rollout.max_new_tokens))
        else:
            updates.append({"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0})
        with warnings.catch_warnings():  # the schedule follows RL steps, updated or not
            warnings.simplefilter("ignore", UserWarning)
            agent.scheduler.step()
    t_update = time.perf_counter() - t0
    any_signal = any(bool((adv != 0).any()) for adv in advantages)
    if not any_signal:
        run.no_signal_steps += 1

    record: dict[str, Any] = {"step": step}
    for i, agent in enumerate(agents):
        votes_i, own_problems = shard_views[i]
        record.update(agent_metrics(agent.name, answers[i], votes_i, labels[i], scored[i],
                                    advantages[i], rollouts[i], updates[i], own_problems,
                                    run.grader))
    record["cohort/agreement"] = agreement(votes, problems, run.grader)
    record["cohort/no_signal"] = 0.0 if any_signal else 1.0
    record.update({"timing/rollout": t_rollout, "timing/grading": t_grading,
                   "timing/update": t_update, "timing/step": time.perf_counter() - t_step})
    return record


def agent_metrics(name, answers, votes, labels, scored, advantages, rollouts, update,
                  problems, grader) -> dict[str, Any]:
    p = f"agent/{name}/"
    G = rollouts.group_size
    r = scored.rewards  # [B, G]
    out: dict[str, Any] = {
        p + "reward/mean": float(r.mean()), p + "reward/std": float(r.std(unbiased=False)),
        p + "teacher_abstain": float((~scored.valid).float().mean()),
        p + "parse_rate": float(np.mean([a is not None for row in answers for a in row])),
        p + "completion_len": float(rollouts.lengths().float().mean()),
        p + "truncated": float(np.mean([not f for f in rollouts.finished])),
        p + "zero_adv_groups": float((advantages.reshape(-1, G) == 0).all(dim=1).float().mean()),
    }
    with_gold = [b for b, prob in enumerate(problems) if prob.gold is not None]
    if with_gold:
        lab = [b for b in with_gold if labels[b] is not None]
        if lab:
            out[p + "pseudo_label/acc"] = float(np.mean(
                [gold_match(labels[b], problems[b], grader) for b in lab]))
        out[p + "vote/acc"] = float(np.mean([gold_match(votes[b].label, problems[b], grader)
                                             for b in with_gold]))
        hits = {b: [gold_match(a, problems[b], grader) for a in answers[b]] for b in with_gold}
        out[p + "acc"] = float(np.mean([h for b in with_gold for h in hits[b]]))
        by_task: dict[str, list[bool]] = {}
        for b in with_gold:
            task = problems[b].meta.get("task")
            if task:
                by_task.setdefault(task, []).extend(hits[b])
        out.update({f"{p}acc/{t}": float(np.mean(v)) for t, v in by_task.items()})
    out.update({p + k: v for k, v in update.items()})
    return out


def evaluate(run: Run) -> dict[str, float]:
    """``eval/<agent>/<task>/acc`` on the held-out problems (greedy answers)."""
    from .evaluate import accuracy_by_task

    out = {}
    for agent in run.agents:
        accs = accuracy_by_task(agent, run.eval_problems, run.cfg.prompt.system_prompt,
                                run.cfg.prompt.instruction, run.grader,
                                max_new_tokens=run.cfg.eval.max_new_tokens,
                                style=run.cfg.reward.answer_style)
        out.update({f"eval/{agent.name}/{task}/acc": v for task, v in accs.items()})
    return out


def agreement(votes, problems, grader) -> float:
    """Share of prompts where all agents' votes are one equivalence class (abstain: no)."""
    if len(votes) < 2:
        return float("nan")
    agree = []
    for b, prob in enumerate(problems):
        labs = [v[b].label for v in votes]
        agree.append(all(l is not None for l in labs)
                     and all(grader.is_equivalent(l, labs[0], prob.options) for l in labs[1:]))
    return float(np.mean(agree))


# ============================================================================ loop, cleanup


def save(run: Run) -> Path:
    state = {"stream": run.stream.state(), "shards": [s.state() for s in run.shards],
             "skipped_records": run.skipped_records,
             "no_signal_steps": run.no_signal_steps}
    return ckpt.save_checkpoint(
        run.dir, run.step, run.agents, [a.optimizer for a in run.agents],
        [a.scheduler for a in run.agents], state, keep_last=run.cfg.checkpoint.keep_last or None)


def train(run: Run) -> None:
    cfg = run.cfg
    names = [a.name for a in run.agents]
    t_start, first = time.perf_counter(), run.step
    if run.eval_problems and run.step == 0:
        run.logger.log({"step": 0, **evaluate(run)})
    while run.step < cfg.run.steps:
        step = run.step + 1
        record = train_step(run, step)
        if run.eval_problems and (step % cfg.eval.every == 0 or step == cfg.run.steps):
            record.update(evaluate(run))
        bad = sum(record.get(f"agent/{n}/skipped_updates", 0) for n in names)
        updated = any(f"agent/{n}/loss" in record for n in names)
        if bad:
            run.bad_steps_in_row += 1
        elif updated:  # a step without any update neither breaks nor extends the streak
            run.bad_steps_in_row = 0
        run.logger.log(record)
        run.step = step
        if cfg.log.progress:
            per_step = (time.perf_counter() - t_start) / (step - first)
            eta = per_step * (cfg.run.steps - step)
            print(f"[{step}/{cfg.run.steps} eta {eta:.0f}s] {summary_line(record, names)}",
                  flush=True)
        if record["cohort/no_signal"]:
            print(f"step {step}: no learning signal (no parsed answer agreed with a label, or "
                  "every group had equal rewards): nothing was trained", flush=True)
        if run.bad_steps_in_row >= cfg.run.max_bad_steps:
            save(run)
            raise TrainingError(
                f"{run.bad_steps_in_row} steps in a row with a NaN / inf loss (run.max_bad_steps"
                f"={cfg.run.max_bad_steps}); stopped. Lower the learning rate, enable "
                "gradient clipping (grpo.max_grad_norm) or check the rollout log-probs.")
        if cfg.checkpoint.every and step % cfg.checkpoint.every == 0 and step < cfg.run.steps:
            save(run)


def cleanup(run: Run) -> None:
    cfg = run.cfg
    if cfg.checkpoint.at_end and run.step > 0:
        folder = save(run)
        print(f"checkpoint: {folder}")
    run.logger.close()
    if cfg.log.plot and run.logger.path.is_file():
        from .plots import plot_dynamics

        png = plot_dynamics(run.logger.path, run.dir / "plots" / "dynamics.png")
        print(f"plot: {png}")
    if run.skipped_records:
        print(f"skipped records by reason: {run.skipped_records}")
    if run.no_signal_steps:
        print(f"steps without any learning signal: {run.no_signal_steps} of {run.step}")
    print(f"results: {run.dir} (config.yaml, metrics.jsonl, plots/, checkpoints/)")


def resume_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The saved config of a run folder, with overrides (e.g. ``run.steps=12`` to extend)."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        raise TrainingError(f"--resume {run_dir}: no config.yaml there; is it a run folder?")
    cfg = load_config(saved, overrides)
    cfg.run.output_dir = str(run_dir)
    return cfg


def main(cfg: Config, resume: str | None = None) -> int:
    """Run a whole training job; ``resume`` continues the run in that folder."""
    print(resolved_text(cfg))
    if cfg.arms:
        if resume is not None:
            raise TrainingError("--resume takes one arm's folder (e.g. runs/demo/co_rl), not a "
                                "comparison run")
        from .compare import run_arms

        return run_arms(cfg)
    run = setup(cfg, resume)
    try:
        train(run)
    except KeyboardInterrupt:
        if run.step > 0:
            folder = save(run)
            print(f"\ninterrupted: saved {folder}; continue with "
                  f"`vlcohort train --resume {run.dir}`", file=sys.stderr)
        run.logger.close()
        return 130
    cleanup(run)
    return 0
