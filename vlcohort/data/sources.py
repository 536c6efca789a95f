"""The problems a run config names: the training set (synthetic, a file or a hub dataset,
through ``data.*``) and the held-out set of ``eval.*``. Bad records are skipped and
counted at load; images are decoded only at render, where the step skips and counts the
broken ones."""

from __future__ import annotations

import sys

from vlcohort.config import Config, agent_reward_source
from vlcohort.data.problems import Problem
from vlcohort.seeds import EVAL_SEED_OFFSET
from vlcohort.training.rewards import answer_kind
from vlcohort.typed_yaml import ConfigError


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
    gold_needed = any(agent_reward_source(cfg, i) == "ground_truth"
                      for i in range(len(cfg.agents)))
    kind = answer_kind(cfg.reward.answer_kind)
    try:
        problems, report = load_problems_from(
            d.path, source=d.source, preset=d.preset, columns=_replace(preset, **overrides),
            split=d.split, limit=d.limit,
            require_answer=gold_needed and kind.has_gold,
            extra_columns=sorted({c for _, c, _ in views if c}), where=d.where,
            require_code=kind.required_fields(gold_needed),
            max_image_pixels=d.max_image_pixels)
        problems = attach_views(problems, views, report)
    except DataError as e:
        raise ConfigError(str(e)) from e
    print(report.summary(), file=sys.stderr if report.skipped else sys.stdout)
    if not problems:
        raise ConfigError(f"data.path: no usable record in {d.path} (see the summary above)")
    if report.bad_fraction > d.max_bad_fraction:
        raise ConfigError(
            f"data.path: {report.bad_fraction:.0%} of the {report.rows} rows of {d.path} are "
            f"bad (skipped: {report.skipped}), over data.max_bad_fraction="
            f"{d.max_bad_fraction}; fix the file (the summary above names the first ones) or "
            "raise data.max_bad_fraction")
    return problems


def load_eval_problems(cfg: Config) -> list[Problem]:
    """Held-out problems for ``eval.*``: the training families, drawn with another seed."""
    if not cfg.eval.every:
        return []
    from vlcohort.data.synthetic import make_dataset

    n = cfg.eval.problems_per_task * len(cfg.data.tasks)
    return make_dataset(tasks=tuple(cfg.data.tasks), n=n, seed=cfg.run.seed + EVAL_SEED_OFFSET,
                        image_size=cfg.data.image_size, shuffle_options=cfg.data.shuffle_options)
