"""The cohort recipe (``vlcohort train``: Co-RL, TTRL, GT-Reward, INTUITOR, RENT,
Co-rewarding I and II), readable top to bottom.

    setup    resolved config saved; problems loaded; every agent built (model, optimizer,
             schedule, reference when KL > 0, rollout engine); resume from a checkpoint
    step     ``step.train_step``: B prompts -> each agent renders and generates G
             completions -> answers -> each agent's vote -> each agent's reward (teacher
             labels, or an intrinsic source's no-grad pass) -> group-normalised advantages
             -> only then, each agent's update; held-out accuracy every ``eval.every``
    loop     ``driver.drive``: the loop every recipe shares (progress, bad-step streaks,
             checkpoint cadence, Ctrl-C), with the collapse / divergence monitor watching
    cleanup  final checkpoint, plots, summary of skipped records and where results are

Departures from the published Co-RL code, on purpose:
- one launch drives every agent: one process, or W ranks in A agent groups that swap
  extracted answers by a collective (``training/distributed.py``; no JSON label files
  between jobs);
- the vote clusters answers by the grader's equivalence classes, so "C", "C. 45°" and
  "45°" are one vote (the published Co-RL code hashed normalised strings: its
  vision-language code keys option letters A-E together, "C" and "C. 45°", but not an
  option's text "45°", nor "2" and "2.0", "12 cm" and "12", "Yes" and "yes";
  ``tests/test_peer_vote_parity.py``);
- a rollout is rewarded iff its answer is in the teacher's winning class, by the rule the
  vote counted with (``voting.in_winning_class``); the published Co-RL code rewarded
  ``grade_answer(answer, label)``, which can reward answers the vote counted for a losing
  class. ``reward.grader=legacy`` keeps the published rule;
- the ring runs the paper's way, agent n taught by agent n-1 (``reward.ring=previous``);
  the published Co-RL code teaches agent n by agent n+1 (``teacher = self.peers[0]``: A <- B,
  B <- C, C <- A), ``reward.ring=next``. Two agents teach each other either way;
- a tied vote abstains (``reward.tie=abstain``); the published Co-RL code takes the tied answer
  seen first (``Counter.most_common``), ``reward.tie=first``, which the paper's recipes in
  ``configs/`` set;
- ``reward.min_share`` divides by all G samples, unparsed ones included
  (``reward.min_share_of=all``); the published Co-RL code divides by the parsed answers
  (``top_count / len(valid)``), ``reward.min_share_of=parsed``, which the paper's recipes
  set (their gate is off, min_share 0, so both read the same there);
- rollout log-probs feed a token-level importance-sampling correction (Co-RL used none).

Departures from the published Co-rewarding code (arXiv 2508.00410), on purpose:
- every agent of a cohort is its own Co-rewarding learner (the paper trains one model);
- votes cluster by the grader's equivalence classes and reward by ``in_winning_class``,
  as every vote here; the published code compares extracted \\boxed{} strings exactly and
  breaks a tie by the answer seen first (``Counter.most_common``: ``reward.tie=first``);
- II: the KL reference stays the run's starting weights; the published code's teacher
  is its worker's reference module, so its KL anchor moves with the teacher. The
  teacher's EMA is float32 whatever the policy's dtype (a bf16 copy could not take a
  1e-5 step);
- I: the rephrasing is each agent's ``agents.N.view`` (a rewrite file or a column, resolved
  at load: a record without one is skipped and counted), not a second data file read in
  step with the first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from vlcohort import run_folder, runlock
from vlcohort.answers.grading import get_grader
from vlcohort.config import Config, load_config, to_dict, to_yaml
from vlcohort.data.problems import Problem
from vlcohort.data.stream import ProblemStream
from vlcohort.monitoring.metrics import (
    MetricsLogger,
    final_summary,
    held_out_summary,
    read_metrics,
    summary_line,
)
from vlcohort.monitoring.monitor import STOP_HINTS, Monitor
from vlcohort.recipes.driver import (
    Recipe,
    TrainingError,
    checkpoint_to_resume,
    drive,
    loop,
    phase,
    restore_agents,
    save_run,
    say,
    seed_everything,
)
from vlcohort.recipes.run_problems import load_run_problems
from vlcohort.recipes.step import Run, train_step
from vlcohort.seeds import SHARD_SEED_STRIDE
from vlcohort.training import checkpoint as ckpt
from vlcohort.training import distributed as dist_
from vlcohort.training.agent import build_agent, checked_adapter
from vlcohort.training.update import trains_without_advantage
from vlcohort.typed_yaml import ConfigError

#: A step without any learning signal is said the first time and every this many.
NO_SIGNAL_EVERY = 10


# ============================================================================ setup


def setup(cfg: Config, resume: str | Path | None = None, layout: dist_.Layout | None = None) -> Run:
    """``layout``: an already initialised launch (comparison arms reuse one); else this
    run initialises (and at cleanup shuts down) its own."""
    dist_.set_cpu_threads(cfg.run.threads)  # always: never what an earlier run left set
    owns_layout = layout is None
    layout = layout or dist_.init(cfg)
    if cfg.rollout.dynamic_sampling and layout.ranks_per_agent > 1:  # ranks_per_agent=0: W / A
        raise TrainingError(f"rollout.dynamic_sampling with {layout.ranks_per_agent} ranks per "
                            "agent: the agent group's ranks would keep unequal numbers of "
                            "groups, which ZeRO's collectives cannot take; launch one rank per "
                            "agent (distributed.ranks_per_agent=1) or set "
                            "rollout.dynamic_sampling=false")
    run_dir = Path(resume) if resume is not None else Path(cfg.run.output_dir)
    seed_everything(cfg.run.seed)
    if layout.is_logger:
        runlock.acquire(run_dir)  # before anything is written there
        run_folder.write_text(run_dir / "config.yaml", to_yaml(cfg))  # no link followed
    problems, eval_problems = load_run_problems(cfg)
    stream = ProblemStream(problems, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
    folder = checkpoint_to_resume(run_dir, resume)
    local = layout.local_agents
    agents = [build_agent(cfg.agents[i], cfg, layout=layout,
                          weights_from=str(ckpt.agent_folder(folder, cfg.agents[i].name))
                          if folder else None)
              for i in local]
    adapters = [agents[local.index(i)].adapter if i in local else
                checked_adapter(mc, cfg) for i, mc in enumerate(cfg.agents)]
    if layout.is_logger:  # a base model's plain format is said, never silently chosen
        print("# prompt format: " + "; ".join(f"{mc.name} {ad.prompt_format_description()}"
                                              for mc, ad in zip(cfg.agents, adapters)))
    run = Run(cfg=cfg, dir=run_dir, agents=agents, stream=stream, grader=get_grader(cfg.reward.grader),
              logger=MetricsLogger(run_dir, log=cfg.log, enabled=layout.is_logger,
                                   run_name=cfg.run.name, run_config=to_dict(cfg)),
              layout=layout, adapters=adapters, local=local, eval_problems=eval_problems,
              shards=shard_streams(problems, len(cfg.agents), cfg) if cfg.data.decouple else [],
              owns_layout=owns_layout)
    for agent in agents:
        said = agent.source_state.describe(agent.name) if agent.source_state is not None else ""
        if said and layout.is_group_leader:  # e.g. the EMA teacher's size and place
            print(f"# {said}")
    if cfg.monitor.enable:
        run.monitor = Monitor(cfg.monitor, run.names)  # every agent: the record has all
    if folder is not None:
        restore(run, folder)
    run.logger.begin(run.step)  # a fresh run in an old folder starts a fresh log; trackers
    return run


def shard_streams(problems: list[Problem], n_agents: int, cfg: Config) -> list[ProblemStream]:
    """``data.decouple``: agent a trains on problems a, a + A, a + 2A, ... only."""
    shards = [problems[a::n_agents] for a in range(n_agents)]
    if any(not s for s in shards):
        raise TrainingError(f"data.decouple with {n_agents} agents needs at least {n_agents} "
                            f"problems, got {len(problems)}")
    return [ProblemStream(s, seed=cfg.run.seed * SHARD_SEED_STRIDE + a, shuffle=cfg.data.shuffle)
            for a, s in enumerate(shards)]


def restore(run: Run, folder: Path) -> None:
    """Continue exactly where the checkpoint ``folder`` left off: optimizer and schedule
    states, the data streams, the counters, the monitor, the RNGs."""
    restore_agents(folder, run.agents)
    for agent in run.agents:
        if agent.source_state is not None:
            ckpt.load_source_state(agent, folder, run.layout)
    state = ckpt.load_state(folder)
    run.stream.load_state(state["stream"])
    for shard, st in zip(run.shards, state.get("shards", [])):
        shard.load_state(st)
    run.step = int(state["step"])
    run.skipped_records = dict(state.get("skipped_records", {}))
    run.no_signal_steps = int(state.get("no_signal_steps", 0))
    if run.monitor is not None and state.get("monitor"):
        run.monitor.load_state(state["monitor"])
    ckpt.set_rng_state(ckpt.load_rng(folder))
    if run.talks:
        print(f"resumed from {folder} (step {run.step})")


# ============================================================================ the loop's parts


def step(run: Run, step: int) -> dict[str, Any]:
    """One cohort step, plus the held-out evaluation every ``eval.every`` steps and at the end."""
    record = train_step(run, step)
    if evaluates_at(run, step):
        with phase(run, "held-out evaluation"):
            record.update(evaluate(run, step))
    return record


def evaluates_at(run: Run, step: int) -> bool:
    """Whether step ``step`` ends with a held-out evaluation: every ``eval.every`` steps and
    after the last (the one before the first is :func:`start`'s)."""
    return bool(run.eval_problems) and (step % run.cfg.eval.every == 0 or step == run.cfg.run.steps)


def start(run: Run) -> None:
    """The held-out evaluation before the first RL step (a fresh run only: a resumed run
    has it in its log), which also counts the held-out records that do not render."""
    if run.eval_problems and run.step == 0:
        run.logger.log({"step": 0, **evaluate(run, 0, count_skips=True)})


def watch(run: Run, record: dict[str, Any], step: int) -> Callable[[Path], str] | None:
    """The monitor's flags into the record and its warnings on stderr; a step that trained
    nothing said so; the stop message when a warning is in ``monitor.stop_on``."""
    alerts = run.monitor.annotate(record, step) if run.monitor is not None else []
    if run.talks:
        for alert in alerts:
            say(f"warning: {alert}", file=sys.stderr)
        # the first such step, then every NO_SIGNAL_EVERY-th: a run of them is one message
        # per stretch, not one per step (the count is in the final summary)
        n = run.no_signal_steps
        if record["cohort/no_signal"] and (n == 1 or n % NO_SIGNAL_EVERY == 0):
            trained = ("only the KL term was trained" if trains_without_advantage(run.cfg.grpo)
                       else "nothing was trained")
            say(f"step {step}: no learning signal (no parsed answer agreed with a label, or "
                f"every group had equal rewards): {trained}"
                + (f" [{n} such steps so far]" if n > 1 else ""))
    stops = [a for a in alerts if a.signal in run.cfg.monitor.stop_on]
    if not stops:
        return None
    return lambda folder: (
        f"stopped at step {step} by the monitor (monitor.stop_on="
        f"{list(run.cfg.monitor.stop_on)}): " + " | ".join(a.message for a in stops)
        + f". Checkpoint: {folder}. Inspect the dynamics with `vlcohort plot "
        f"{run.dir} --out dynamics.png`; to go on, `vlcohort train --resume {run.dir}` "
        "(it stops again only on a new warning; monitor.stop_on=[] only warns). "
        + " ".join(dict.fromkeys(STOP_HINTS[a.signal] for a in stops)))


def evaluate(run: Run, step: int, count_skips: bool = False) -> dict[str, float]:
    """``eval/<agent>/<task>/acc`` (and ``pass_at_n`` / ``maj_at_n`` with ``eval.samples`` >
    1), ``eval/<agent>/all/parse_rate`` and ``/length`` on the held-out problems, each agent
    asked in its own prompt format, and ``timing/eval``. ``count_skips``: the problems an
    agent cannot render are counted in the run's skipped records (``held_out_<reason>``)
    and named, once per run (the set is the same at every evaluation)."""
    import time

    from vlcohort.monitoring.heldout import evaluate_agent
    from vlcohort.seeds import EVAL_SAMPLE_SEED_OFFSET, rollout_seed

    t0 = time.perf_counter()
    e, out = run.cfg.eval, {}
    for agent in run.agents:
        index = run.names.index(agent.name)
        with agent.generation_context():  # every rank of a ZeRO-3 group takes part
            held = evaluate_agent(
                agent, run.eval_problems, run.cfg.prompt.system_prompt, run.cfg.prompt.instruction,
                run.grader, max_new_tokens=e.max_new_tokens, style=run.cfg.reward.answer_style,
                batch_size=e.batch_size, max_prompt_tokens=run.cfg.data.max_prompt_tokens,
                samples=e.samples, temperature=e.temperature,
                seed=rollout_seed(run.cfg.run.seed + EVAL_SAMPLE_SEED_OFFSET, step, index))
        if count_skips and held.left_out and run.layout.is_group_leader:
            for _, reason in held.left_out:
                key = f"held_out_{reason}"
                run.skipped_records[key] = run.skipped_records.get(key, 0) + 1
            print(f"held-out evaluation of {agent.name}: left out {len(held.left_out)} of "
                  f"{len(run.eval_problems)} problems that do not render (a prompt over "
                  f"data.max_prompt_tokens={run.cfg.data.max_prompt_tokens}, or a bad "
                  f"record), e.g. {held.left_out[0][0]!r} ({held.left_out[0][1]}); the "
                  "scores are over the rest", file=sys.stderr)
        if run.layout.is_group_leader:
            out.update({f"eval/{agent.name}/{k}": v for k, v in held.items()})
    if run.layout.distributed:
        merged: dict[str, float] = {}
        for piece in run.layout.gather(out, "held-out scores"):
            merged.update(piece)
        out = merged
    out["timing/eval"] = time.perf_counter() - t0
    return out


def save(run: Run) -> Path:
    """A checkpoint: every local agent, the data streams, counters and the monitor."""
    state = {"stream": run.stream.state(), "shards": [s.state() for s in run.shards],
             "skipped_records": run.skipped_records,
             "no_signal_steps": run.no_signal_steps,
             "monitor": run.monitor.state() if run.monitor is not None else None}
    return save_run(run, state, layout=run.layout)


def cleanup(run: Run) -> None:
    """Final checkpoint, process groups down, plots and the run's summary lines."""
    cfg = run.cfg
    if cfg.checkpoint.at_end and run.step > 0:
        folder = save(run)
        if run.logger.enabled:
            print(f"checkpoint: {folder}")
    run.logger.close()
    if run.owns_layout:
        dist_.shutdown(run.layout)
    if not run.logger.enabled:
        return
    if cfg.log.plot and run.step > 0 and run.logger.path.is_file():
        from vlcohort.analysis.plots import plot_dynamics

        plots = run_folder.real_dir(run.dir / "plots")
        png = plot_dynamics(run.logger.path, plots / "dynamics.png")
        print(f"plot: {png}")
    if run.skipped_records:
        print(f"skipped records by reason: {run.skipped_records}")
    if run.no_signal_steps:
        print(f"steps without any learning signal: {run.no_signal_steps} of {run.step}")
    held_out = {}
    if run.logger.path.is_file():
        records = read_metrics(run.logger.path)
        print("\n".join(final_summary(records, run.names)))
        held_out = held_out_summary(records, run.names)
        if held_out:
            run_folder.write_text(run.dir / "summary.json", json.dumps({"held_out": held_out}, indent=1))
    tracked = " tensorboard/," if cfg.log.tensorboard else ""
    summary = " summary.json," if held_out else ""
    print(f"results: {run.dir} (config.yaml, metrics.jsonl,{summary}{tracked} plots/, checkpoints/)")


def summary(run: Run, record: dict[str, Any]) -> str:
    """The progress line of a step's record."""
    return summary_line(record, run.names)


def recipe(run: Run) -> Recipe:
    """The cohort recipe for the driver. Agent groups: each rank is interrupted on its own,
    so a collective save on Ctrl-C cannot be relied on; resume from the last periodic
    checkpoint."""
    return Recipe(step=step, save=save, cleanup=cleanup, summary=summary, start=start,
                  watch=watch, save_on_interrupt=not run.layout.distributed)


def train(run: Run) -> None:
    """The step loop of a set-up run, without cleanup."""
    loop(run, recipe(run))


def run_cohort(cfg: Config, resume: str | Path | None = None, layout: dist_.Layout | None = None) -> int:
    """A whole cohort run; ``resume`` continues the run in that folder."""
    with runlock.released_on_error(Path(resume) if resume is not None else Path(cfg.run.output_dir)):
        run = setup(cfg, resume, layout)
    return drive(run, recipe(run))


#: Keys a resume cannot change: the checkpoint holds these agents' weights and the data
#: stream's position, so another value could not continue the run (a new run from the
#: checkpoint's weights can: ``agents.N.path=<checkpoint>/<agent>``).
FIXED_ON_RESUME = ("agents", "method", "data", "distributed", "run.seed", "eval.holdout")
#: Keys a resume may change without touching what is trained: length, logging, saving,
#: evaluation and the monitor. Any other change (a learning rate, a reward rule) is
#: allowed but listed: the run then no longer equals a straight run.
HARMLESS_ON_RESUME = ("run.steps", "run.threads", "run.output_dir", "log", "checkpoint",
                      "eval", "monitor", "arms")


def config_changes(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``[(dotted key, old, new)]`` where two config dicts differ (lists of dicts are
    compared element-wise, so ``agents.0.path`` is named rather than ``agents``)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for k in sorted(set(before) | set(after), key=str):
            out += config_changes(before.get(k), after.get(k), f"{prefix}{k}.")
        return out
    if (isinstance(before, list) and isinstance(after, list) and len(before) == len(after)
            and all(isinstance(x, dict) for x in before + after)):
        return [c for i, (x, y) in enumerate(zip(before, after))
                for c in config_changes(x, y, f"{prefix}{i}.")]
    return [] if before == after else [(prefix.rstrip("."), before, after)]


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def resume_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The saved config of a run folder, with overrides (e.g. ``run.steps=12`` to extend).

    An override of a key in :data:`FIXED_ON_RESUME` is refused, naming the keys; the
    other changes are printed (harmless ones as such)."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there; is it a run folder? "
                          "Give the folder a run wrote (its run.output_dir)")
    cfg = load_config(saved, overrides)
    cfg.run.output_dir = str(run_dir)
    before = load_config(saved)
    before.run.output_dir = str(run_dir)
    changes = config_changes(to_dict(before), to_dict(cfg))
    refused = [c for c in changes if _under(c[0], FIXED_ON_RESUME)]
    if refused:
        raise ConfigError(
            f"--resume {run_dir}: a resume continues the same run, so it cannot change "
            + "; ".join(f"{k} ({old!r} -> {new!r})" for k, old, new in refused)
            + ". Start a new run instead, from the checkpoint's weights if you like "
            "(agents.N.path=<run>/checkpoints/step-N/<agent>)")
    for key, old, new in changes:
        kind = ("harmless" if _under(key, HARMLESS_ON_RESUME)
                else "the run no longer equals a straight run")
        print(f"resume: {key}: {old!r} -> {new!r} ({kind})", file=sys.stderr)
    return cfg
