"""``vlcohort train``: the cohort recipe, readable top to bottom.

    setup    resolved config saved; problems loaded; every agent built (model, optimizer,
             schedule, reference when KL > 0, rollout engine); resume from a checkpoint
    step     B prompts -> each agent renders and generates G completions -> answers ->
             each agent's vote -> each agent's teacher labels (reward source) -> rewards
             (an intrinsic source: from a no-grad pass over the agent's own completions,
             no label) -> group-normalised advantages -> only then, each agent's update
    cleanup  final checkpoint, plots, summary of skipped records and where results are

Departures from the paper's published code, on purpose:
- one launch drives every agent: one process, or W ranks in A agent groups that swap
  extracted answers by a collective (``distributed.py``; no JSON label files between jobs);
- the vote clusters answers by the grader's equivalence classes, so "C" and "C. 45°" are
  one vote (the published code hashed normalised strings);
- rollout log-probs feed a token-level importance-sampling correction (Co-RL used none).
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from processors import ProblemInputError, adapter_for

from vlcohort.training import checkpoint as ckpt
from vlcohort.training import distributed as dist_
from vlcohort.training import grpo
from vlcohort.training.agent import Agent, adapter_options, build_agent, token_stats, update_agent
from vlcohort.config import Config, agent_reward_source, load_config, resolved_text, save_resolved
from vlcohort.analysis.dynamics import STOP_HINTS, Monitor, answer_diversity, group_reward_std
from vlcohort.answers.grading import get_grader
from vlcohort.analysis.metrics import MetricsLogger, summary_line
from vlcohort.data.problems import Problem
# the pieces self-play shares; re-exported here for callers of train.*
from vlcohort.recipes.runs import (TrainingError, bad_streak_error, drive, load_eval_problems,  # noqa: F401
                   load_problems, rollout_seed, seed_everything)
from vlcohort.training.rewards import (extract_all, gold_match, intrinsic_rewards, intrinsic_scored,
                      is_intrinsic, labels_for, score, vote_all)
from vlcohort.rollout.base import SamplingParams
from vlcohort.data.stream import ProblemStream
from vlcohort.data.views import view_of


@dataclass
class Run:
    """One training run. ``agents`` are the agents trained in *this process* (all of them in
    a single process; the rank's own agent in an agent group); ``adapters`` and ``names``
    cover the whole cohort, so every rank renders and votes for every agent."""

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
    layout: dist_.Layout | None = None  # set by setup (one process: a Layout of W = 1)
    monitor: Monitor | None = None  # collapse / divergence watch (monitor.enable)
    adapters: list = field(default_factory=list)  # [A] every agent's adapter (rendering)
    local: list[int] = field(default_factory=list)  # indices of ``agents`` in the cohort
    owns_layout: bool = True  # shut the process groups down at cleanup

    @property
    def names(self) -> list[str]:
        return [mc.name for mc in self.cfg.agents]


# ============================================================================ setup


def setup(cfg: Config, resume: str | Path | None = None, layout: dist_.Layout | None = None) -> Run:
    """``layout``: an already initialised launch (comparison arms reuse one); else this
    run initialises (and at cleanup shuts down) its own."""
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    owns_layout = layout is None
    layout = layout or dist_.init(cfg)
    run_dir = Path(resume) if resume is not None else Path(cfg.run.output_dir)
    seed_everything(cfg.run.seed)
    if layout.is_logger:
        save_resolved(cfg, run_dir)
    problems = load_problems(cfg)
    stream = ProblemStream(problems, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
    folder = ckpt.latest_checkpoint(run_dir) if resume is not None else None
    if resume is not None and folder is None:
        raise TrainingError(f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}")
    local = layout.local_agents
    agents = [build_agent(cfg.agents[i], cfg, layout=layout,
                          weights_from=str(folder / cfg.agents[i].name) if folder else None)
              for i in local]
    adapters = [agents[local.index(i)].adapter if i in local else
                adapter_for(mc.path, adapter_options(mc)) for i, mc in enumerate(cfg.agents)]
    logger = MetricsLogger(run_dir, tensorboard=cfg.log.tensorboard, enabled=layout.is_logger)
    shards = shard_streams(problems, len(cfg.agents), cfg) if cfg.data.decouple else []
    run = Run(cfg=cfg, dir=run_dir, agents=agents, stream=stream, shards=shards, logger=logger,
              grader=get_grader(cfg.reward.grader), eval_problems=load_eval_problems(cfg),
              layout=layout, adapters=adapters, local=local, owns_layout=owns_layout)
    if cfg.monitor.enable:
        run.monitor = Monitor(cfg.monitor, run.names)  # every agent: the record has all
    if folder is not None:
        state = ckpt.load_state(folder)
        for agent in agents:
            st = ckpt.load_trainer_state(folder, agent.name)
            if agent.ds_engine is not None:
                ckpt.load_zero_state(agent, folder)
            else:
                agent.optimizer.load_state_dict(st["optimizer"])
            agent.scheduler.load_state_dict(st["scheduler"])
        stream.load_state(state["stream"])
        for shard, st in zip(shards, state.get("shards", [])):
            shard.load_state(st)
        run.step = int(state["step"])
        run.skipped_records = dict(state.get("skipped_records", {}))
        run.no_signal_steps = int(state.get("no_signal_steps", 0))
        if run.monitor is not None and state.get("monitor"):
            run.monitor.load_state(state["monitor"])
        ckpt.set_rng_state(ckpt.load_rng(folder))
        logger.truncate_after(run.step)
        if layout.is_logger:
            print(f"resumed from {folder} (step {run.step})")
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
    rendered: list[list] = [[] for _ in run.adapters]
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
            r = [ad.render(view_of(p, name), run.cfg.prompt.system_prompt,
                           run.cfg.prompt.instruction)
                 for ad, name in zip(run.adapters, run.names)]
        except ProblemInputError as e:
            reason = getattr(e, "reason", type(e).__name__)
            run.skipped_records[reason] = run.skipped_records.get(reason, 0) + 1
            if run.layout is None or run.layout.is_logger:
                print(f"skipped record: {e}", file=sys.stderr)
            continue
        problems.append(p)
        for i, ri in enumerate(r):
            rendered[i].append(ri)
    return problems, rendered


def generated_prompts(n_prompts: int, layout) -> list[int]:
    """The prompts this rank generates for: all of them, or every R-th from its position
    in the agent group (rollouts of a prompt batch are spread over the agent's ranks)."""
    return list(range(layout.group_rank, n_prompts, layout.ranks_per_agent))  # R = 1: all


@dataclass
class Shared:
    """What crosses between agents each step, per agent, in prompt order: answers [B][G]
    and per-rollout lengths / finished flags [N] (for metrics)."""

    answers: list
    lengths: torch.Tensor
    finished: list


def share_answers(run: Run, local: dict[int, dict], n_prompts: int, G: int) -> list[Shared]:
    """Every agent's answers on every rank: one all-gather of each rank's pieces
    ``{agent: {"prompts", "answers", "lengths", "finished"}}``, reassembled in prompt order."""
    answers: list[list] = [[None] * n_prompts for _ in run.cfg.agents]
    lengths = [[0] * (n_prompts * G) for _ in run.cfg.agents]
    finished = [[False] * (n_prompts * G) for _ in run.cfg.agents]
    for piece in run.layout.gather(local, "the step's answers"):
        for i, part in piece.items():
            for j, b in enumerate(part["prompts"]):
                answers[i][b] = part["answers"][j]
                lengths[i][b * G:(b + 1) * G] = part["lengths"][j * G:(j + 1) * G]
                finished[i][b * G:(b + 1) * G] = part["finished"][j * G:(j + 1) * G]
    missing = [run.names[i] for i in range(len(answers)) if any(a is None for a in answers[i])]
    if missing:
        raise TrainingError(f"answers of agent(s) {missing} are missing after the exchange")
    return [Shared(answers[i], torch.tensor(lengths[i]), finished[i]) for i in range(len(answers))]


def train_step(run: Run, step: int) -> dict[str, Any]:
    cfg, layout = run.cfg, run.layout
    G = cfg.rollout.rollouts_per_prompt
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    t_step = time.perf_counter()
    problems, rendered = next_prompts(run)  # rendered: [A][n_prompts]
    n_prompts = len(problems)  # B, or A x B with data.decouple
    mine = generated_prompts(n_prompts, layout)  # this rank's share of the prompts
    group_rank = layout.group_rank

    # 1. every (local) agent generates G completions per prompt, before anyone updates
    t0 = time.perf_counter()
    rollouts: dict[int, Any] = {}
    for i, agent in zip(run.local, run.agents):
        seed = rollout_seed(cfg.run.seed, step, i) + 7919 * group_rank
        with agent.generation_context():
            rollouts[i] = agent.engine.generate([rendered[i][b] for b in mine], G, sampling,
                                                seed=seed)
    t_rollout = time.perf_counter() - t0

    # 2. answers cross between agents; every rank votes for every agent identically;
    #    teacher labels, rewards and advantages of the local agents, over all prompts
    t0 = time.perf_counter()
    local = {i: {"prompts": mine, "lengths": ro.lengths().tolist(), "finished": ro.finished,
                 "answers": extract_all(ro.texts_by_prompt(), cfg.reward.answer_style)}
             for i, ro in rollouts.items()}
    shared = share_answers(run, local, n_prompts, G)
    answers = [sh.answers for sh in shared]  # [A][n_prompts][G]
    votes = [vote_all(ans, problems, cfg.reward.tie, cfg.reward.min_share, run.grader)
             for ans in answers]  # [A][n_prompts]
    # what each local agent trains on: its owned prompts (all, or its decouple shard) that
    # this rank generated, as rollouts / renderings of the update
    plan: dict[int, tuple] = {}
    pos = {b: j for j, b in enumerate(mine)}  # prompt -> row block in this rank's rollouts
    for i in run.local:
        own = owned_prompts(run, i, n_prompts)
        train_on = [b for b in own if b in pos]
        ro, rend = rollouts[i], [rendered[i][b] for b in mine]
        if train_on != mine:
            ro = ro.select_prompts([pos[b] for b in train_on])
            rend = [rendered[i][b] for b in train_on]
        plan[i] = (own, train_on, ro, rend)
    scored, advantages, labels = {}, {}, {}
    stats: dict[int, Any] = {}  # agent -> TokenStats of its trained rollouts (intrinsic sources)
    t_intrinsic = 0.0
    for i, agent in zip(run.local, run.agents):
        source = agent_reward_source(cfg, i)
        if is_intrinsic(source):
            # no label: rewards from the policy's own next-token distributions, in a no-grad
            # pass over the rollouts the agent trains on; its log-probs are the update's old
            t1 = time.perf_counter()
            _, train_on, ro, rend = plan[i]
            st = token_stats(agent, rend, ro, cfg.grpo, cfg.rollout.temperature,
                             cfg.reward.intrinsic_temperature_scaled)
            r = intrinsic_rewards(source, st.self_certainty, st.entropy, st.mask, G)  # [n, G]
            stats[i] = st
            lab = [None] * n_prompts
            sc = intrinsic_scored(r, n_prompts, train_on)
            t_intrinsic += time.perf_counter() - t1
        else:
            lab = labels_for(source, i, votes, problems, cfg.reward.topology,
                             cfg.reward.tie, run.grader)  # [n_prompts]
            sc = score(answers[i], lab, problems, run.grader, cfg.reward.format_weight)
        adv = grpo.group_advantages(sc.rewards, scale=cfg.grpo.adv_scale, valid=sc.valid)  # [B, G]
        labels[i], scored[i] = lab, sc
        advantages[i] = adv.reshape(n_prompts * G)  # [N], row b*G + g
    t_grading = time.perf_counter() - t0

    # 3. each local agent's update, from its own rollouts and advantages
    t0 = time.perf_counter()
    parts: dict[str, Any] = {}
    for i, agent in zip(run.local, run.agents):
        own, train_on, ro, rend = plan[i]
        rows = torch.tensor([b * G + g for b in train_on for g in range(G)], dtype=torch.long)
        adv = advantages[i][rows]  # [n]
        # the whole group takes the update (DeepSpeed collectives), or the whole group skips;
        # label rewards are known for all prompts on every rank of the group, intrinsic ones
        # only for the rank's own rollouts
        has_signal = bool((advantages[i].reshape(n_prompts, G)[own] != 0).any())
        if i in stats:
            has_signal = layout.group_any(has_signal, "whether the group has a signal")
        if has_signal:
            st = stats.get(i)
            update = update_agent(agent, rend, ro, adv, cfg.grpo, cfg.rollout.temperature,
                                  length_norm=cfg.rollout.max_new_tokens,
                                  old_logprobs=None if st is None else st.logprobs,
                                  batches=None if st is None else st.batches)
        else:
            update = {"lr": agent.optimizer.param_groups[0]["lr"], "skipped_updates": 0}
        with warnings.catch_warnings():  # the schedule follows RL steps, updated or not
            warnings.simplefilter("ignore", UserWarning)
            agent.scheduler.step()
        if group_rank == 0:  # metrics of agent i come from its group's leader
            own_rows = torch.tensor([b * G + g for b in own for g in range(G)], dtype=torch.long)
            parts.update(agent_metrics(
                agent.name, [answers[i][b] for b in own], [votes[i][b] for b in own],
                [labels[i][b] for b in own], scored[i].select(own), advantages[i][own_rows],
                shared[i].lengths[own_rows], [shared[i].finished[r] for r in own_rows.tolist()],
                G, update, [problems[b] for b in own], run.grader))
            parts[f"_signal/{agent.name}"] = has_signal
            if i in stats:
                parts[f"agent/{agent.name}/self_certainty"] = stats[i].token_mean("self_certainty")
                parts[f"agent/{agent.name}/entropy"] = stats[i].token_mean("entropy")
    t_update = time.perf_counter() - t0
    parts.update({"timing/rollout": t_rollout, "timing/grading": t_grading,
                  "timing/update": t_update})
    if stats:
        parts["timing/intrinsic"] = t_intrinsic

    # 4. one record on every rank (so every rank takes the same decisions from it)
    record: dict[str, Any] = {"step": step}
    for piece in layout.gather(parts, "the step's metrics"):
        for k, v in piece.items():
            record[k] = max(record.get(k, v), v) if k.startswith("timing/") else v
    any_signal = any(record.pop(f"_signal/{n}") for n in run.names)
    if not any_signal:
        run.no_signal_steps += 1
    record["cohort/agreement"] = agreement(votes, problems, run.grader)
    record["cohort/no_signal"] = 0.0 if any_signal else 1.0
    record["timing/step"] = time.perf_counter() - t_step
    return record


def agent_metrics(name, answers, votes, labels, scored, advantages, lengths, finished, G,
                  update, problems, grader) -> dict[str, Any]:
    """Per-agent metrics over the prompts the agent trains on ([B] lists, [B, G] scores,
    [N] advantages, lengths and finished flags)."""
    p = f"agent/{name}/"
    r = scored.rewards  # [B, G]
    out: dict[str, Any] = {
        p + "reward/mean": float(r.mean()), p + "reward/std": float(r.std(unbiased=False)),
        p + "reward/group_std": group_reward_std(r),
        p + "answer_diversity": answer_diversity(votes),
        p + "teacher_abstain": float((~scored.valid).float().mean()),
        p + "parse_rate": float(np.mean([a is not None for row in answers for a in row])),
        p + "completion_len": float(lengths.float().mean()),
        p + "truncated": float(np.mean([not f for f in finished])),
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
    from vlcohort.analysis.evaluate import accuracy_by_task

    out = {}
    for agent in run.agents:
        with agent.generation_context():  # every rank of a ZeRO-3 group takes part
            accs = accuracy_by_task(agent, run.eval_problems, run.cfg.prompt.system_prompt,
                                    run.cfg.prompt.instruction, run.grader,
                                    max_new_tokens=run.cfg.eval.max_new_tokens,
                                    style=run.cfg.reward.answer_style)
        if run.layout is None or run.layout.is_group_leader:
            out.update({f"eval/{agent.name}/{task}/acc": v for task, v in accs.items()})
    if run.layout is not None and run.layout.distributed:
        merged: dict[str, float] = {}
        for piece in run.layout.gather(out, "held-out accuracies"):
            merged.update(piece)
        return merged
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
             "no_signal_steps": run.no_signal_steps,
             "monitor": run.monitor.state() if run.monitor is not None else None}
    return ckpt.save_checkpoint(
        run.dir, run.step, run.agents, [a.optimizer for a in run.agents],
        [a.scheduler for a in run.agents], state, keep_last=run.cfg.checkpoint.keep_last or None,
        layout=run.layout)


def train(run: Run) -> None:
    cfg = run.cfg
    names = run.names
    talk = run.layout is None or run.layout.is_logger
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
        alerts = run.monitor.annotate(record, step) if run.monitor is not None else []
        for alert in alerts if talk else []:
            print(f"warning: {alert}", file=sys.stderr, flush=True)
        run.logger.log(record)
        run.step = step
        if cfg.log.progress and talk:
            per_step = (time.perf_counter() - t_start) / (step - first)
            eta = per_step * (cfg.run.steps - step)
            print(f"[{step}/{cfg.run.steps} eta {eta:.0f}s] {summary_line(record, names)}",
                  flush=True)
        if record["cohort/no_signal"] and talk:
            print(f"step {step}: no learning signal (no parsed answer agreed with a label, or "
                  "every group had equal rewards): nothing was trained", flush=True)
        if run.bad_steps_in_row >= cfg.run.max_bad_steps:
            save(run)
            raise bad_streak_error(run.bad_steps_in_row, cfg.run.max_bad_steps)
        stops = [a for a in alerts if a.signal in cfg.monitor.stop_on]
        if stops:
            folder = save(run)
            raise TrainingError(
                f"stopped at step {step} by the monitor (monitor.stop_on="
                f"{list(cfg.monitor.stop_on)}): " + " | ".join(a.message for a in stops)
                + f". Checkpoint: {folder}. Inspect the dynamics with `vlcohort plot "
                f"{run.dir} --out dynamics.png`; to go on, `vlcohort train --resume {run.dir}` "
                "(it stops again only on a new warning; monitor.stop_on=[] only warns). "
                + " ".join(dict.fromkeys(STOP_HINTS[a.signal] for a in stops)))
        if cfg.checkpoint.every and step % cfg.checkpoint.every == 0 and step < cfg.run.steps:
            save(run)


def cleanup(run: Run) -> None:
    cfg = run.cfg
    if cfg.checkpoint.at_end and run.step > 0:
        folder = save(run)
        if run.logger.enabled:
            print(f"checkpoint: {folder}")
    run.logger.close()
    if run.layout is not None and run.owns_layout:
        dist_.shutdown(run.layout)
    if not run.logger.enabled:
        return
    if cfg.log.plot and run.step > 0 and run.logger.path.is_file():
        from vlcohort.analysis.plots import plot_dynamics

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


def main(cfg: Config, resume: str | None = None, layout: dist_.Layout | None = None) -> int:
    """Run a whole training job; ``resume`` continues the run in that folder."""
    if dist_.launched_world_size() == 1 or dist_.launched_rank() == 0:
        print(resolved_text(cfg))
    if cfg.method == "self_play":  # challenger / solver phases: a recipe of its own
        if dist_.launched_world_size() > 1:
            raise TrainingError("method=self_play runs in one process (its two roles alternate, "
                                "they do not train side by side); launch it without torchrun")
        from vlcohort.recipes.selfplay import main as self_play_main

        return self_play_main(cfg, resume)
    if cfg.arms:
        if resume is not None:
            raise TrainingError("--resume takes one arm's folder (e.g. runs/demo/co_rl), not a "
                                "comparison run")
        from vlcohort.recipes.arms import run_arms

        return run_arms(cfg)
    run = setup(cfg, resume, layout)
    # agent groups: each rank is interrupted on its own, so a collective save cannot be
    # relied on; resume from the last periodic checkpoint
    return drive(run, train, save, cleanup, save_on_interrupt=not run.layout.distributed)
