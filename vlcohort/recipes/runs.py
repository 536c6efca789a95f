"""What both training recipes (the cohort loop in ``train.py`` and the challenger /
solver phases in ``selfplay.py``) are made of before their loops: the training and
held-out problems a config names, seeding, the rollout seed of a step, and the errors that
stop a run. Both import it; neither imports the other (``train.main`` hands a
``method: self_play`` config to ``selfplay.main`` lazily)."""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

from vlcohort.config import Config, ConfigError, agent_reward_source
from vlcohort.data.problems import Problem


class TrainingError(RuntimeError):
    """A run that cannot go on (e.g. too many non-finite losses in a row)."""


def bad_streak_error(streak: int, limit: int) -> TrainingError:
    return TrainingError(
        f"{streak} steps in a row with a NaN / inf loss (run.max_bad_steps={limit}); stopped. "
        "Lower the learning rate, enable gradient clipping (grpo.max_grad_norm) or check the "
        "rollout log-probs.")


def load_problems(cfg: Config) -> list[Problem]:
    """The training set: synthetic (default) or a file / hub dataset through ``data.*``.

    Bad records are skipped and counted at load (summary printed here); images are decoded
    only at render, where ``next_prompts`` skips and counts the broken ones.
    """
    d = cfg.data
    if d.source == "synthetic":
        from vlcohort.data.synthetic import make_dataset

        return make_dataset(tasks=tuple(d.tasks), n=d.num_problems,
                            seed=cfg.run.seed, image_size=d.image_size,
                            shuffle_options=d.shuffle_options)
    from dataclasses import replace as _replace

    from vlcohort.data.problems import PRESETS, DataError, load_problems_from
    from vlcohort.data.views import attach_views

    preset = PRESETS[d.preset]
    overrides = {k: v for k, v in vars(d.columns).items() if v}
    views = [(a.name, a.view.column, a.view.rewrite_file) for a in cfg.agents
             if a.view.column or a.view.rewrite_file]
    try:
        problems, report = load_problems_from(
            d.path, source=d.source, preset=d.preset, columns=_replace(preset, **overrides),
            split=d.split, limit=d.limit,
            require_answer=any(agent_reward_source(cfg, i) == "ground_truth"
                               for i in range(len(cfg.agents))),
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
    from vlcohort.data.synthetic import make_dataset

    n = cfg.eval.problems_per_task * len(cfg.data.tasks)
    return make_dataset(tasks=tuple(cfg.data.tasks), n=n, seed=cfg.run.seed + 7919,
                        image_size=cfg.data.image_size, shuffle_options=cfg.data.shuffle_options)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rollout_seed(seed: int, step: int, agent: int) -> int:
    """Sampling seed of one agent's rollouts at one step: a pure function of the run seed,
    so rollouts do not depend on how much randomness anything else used before (a model
    build, a resume), and a resumed run samples exactly what the straight run did."""
    return (seed * 1_000_003 + step * 1_009 + agent) % (2**31 - 1)


def drive(run, loop, save, cleanup, save_on_interrupt: bool = True) -> int:
    """``loop(run)`` then ``cleanup(run)``; exit code 0. On Ctrl-C: save a checkpoint (when
    a step was done and ``save_on_interrupt``), say how to resume, exit code 130."""
    try:
        loop(run)
    except KeyboardInterrupt:
        if run.step > 0 and save_on_interrupt:
            print(f"\ninterrupted: saved {save(run)}; continue with "
                  f"`vlcohort train --resume {run.dir}`", file=sys.stderr)
        run.logger.close()
        return 130
    cleanup(run)
    return 0
