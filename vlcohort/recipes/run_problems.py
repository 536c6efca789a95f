"""The problems a run config names: the training set (synthetic, a file or a hub dataset,
through ``data.*``) and the held-out set of ``eval.*``. Bad records are skipped and
counted at load; images are decoded only at render, where the step skips and counts the
broken ones."""

from __future__ import annotations

import random
import re
import sys

from vlcohort.config_schema import Config, DataConfig, EvalDataConfig
from vlcohort.data.problems import ANSWER_KIND_NEEDS, Problem
from vlcohort.seeds import EVAL_SEED_OFFSET, HOLDOUT_SEED_OFFSET
from vlcohort.training.reward_sources import source, sources_of
from vlcohort.typed_yaml import ConfigError


def load_run_problems(cfg: Config) -> tuple[list[Problem], list[Problem]]:
    """(the training set, the held-out set) of a run, the training file read once: the
    ``eval.holdout`` share is cut from the same read (:func:`split_holdout`)."""
    train, share = _training_and_share(cfg)
    return train, _held_out(cfg, share)


def load_problems(cfg: Config) -> list[Problem]:
    """The training set: synthetic (default) or a file / hub dataset through ``data.*``,
    less the ``eval.holdout`` share, which training never sees.

    Bad records are skipped and counted at load (summary printed here); images are decoded
    only at render, where ``next_prompts`` skips and counts the broken ones.
    """
    return _training_and_share(cfg)[0]


def load_eval_problems(cfg: Config) -> list[Problem]:
    """Held-out problems for ``eval.*`` (none when ``eval.every`` is 0): the synthetic
    families drawn with another seed, a file or hub split read as ``data.*`` is, or the
    ``eval.holdout`` share of ``data.path``; at most ``eval.limit`` of them. Bad records
    are skipped and counted as the training file's are."""
    share = _training_and_share(cfg)[1] if cfg.eval.every and eval_source(cfg) == "holdout" else []
    return _held_out(cfg, share)


def _training_and_share(cfg: Config) -> tuple[list[Problem], list[Problem]]:
    """(the training problems, the ``eval.holdout`` share cut from them: empty without one)."""
    d = cfg.data
    if d.source == "synthetic":
        from vlcohort.data.synthetic import make_dataset

        return make_dataset(tasks=tuple(d.tasks), n=d.num_problems,
                            seed=cfg.run.seed, image_size=d.image_size,
                            shuffle_options=d.shuffle_options), []
    problems = read_problems(cfg, d, "data")
    if cfg.eval.holdout:
        return split_holdout(problems, cfg.eval.holdout, cfg.run.seed)
    return problems, []


def read_problems(cfg: Config, d: DataConfig | EvalDataConfig, key: str) -> list[Problem]:
    """The problems of a file or hub dataset named by the section ``d`` (``data`` or
    ``eval.data``, ``key`` naming it in messages): the preset with column overrides, the
    records a run's reward sources and views need, the load summary printed, and an error
    when no record or too large a share of them is usable."""
    from dataclasses import replace as _replace

    from vlcohort.data.problems import PRESETS, DataError, load_problems_from
    from vlcohort.data.views import attach_views

    preset = PRESETS[d.preset]
    overrides = {k: v for k, v in vars(d.columns).items() if v}
    training = key == "data"
    views = [(a.name, a.view.column, a.view.rewrite_file) for a in cfg.agents
             if a.view.column or a.view.rewrite_file] if training else []
    gold_needed = not training or any(source(name).needs_gold for name in sources_of(cfg))
    kind = ANSWER_KIND_NEEDS[cfg.reward.answer_kind]
    try:
        problems, report = load_problems_from(
            d.path, source=d.source, preset=d.preset, columns=_replace(preset, **overrides),
            split=d.split, limit=d.limit,
            require_answer=gold_needed and kind.has_gold,
            extra_columns=sorted({c for _, c, _ in views if c}), where=d.where,
            require_code=kind.required_fields(gold_needed and training),
            max_image_pixels=cfg.data.max_image_pixels)
        problems = attach_views(problems, views, report)
    except DataError as e:
        raise ConfigError(keyed(str(e), key)) from e
    print(keyed(report.summary(), key), file=sys.stderr if report.skipped else sys.stdout)
    if not problems:
        raise ConfigError(f"{key}.path: no usable record in {d.path} (see the summary above)")
    if report.bad_fraction > d.max_bad_fraction:
        raise ConfigError(
            f"{key}.path: {report.bad_fraction:.0%} of the {report.rows} rows of {d.path} are "
            f"bad (skipped: {report.skipped}), over {key}.max_bad_fraction="
            f"{d.max_bad_fraction}; fix the file (the summary above names the first ones) or "
            f"raise {key}.max_bad_fraction")
    return problems


#: A ``data.<key>`` the data loaders name in their messages, not preceded by a path
#: character (so ``tests/data.jsonl`` is left alone).
_DATA_KEY = re.compile(r"(?<![\w/.\\-])data\.(?=(?:path|source|split|where|preset|columns|limit|"
                       r"max_image_pixels|max_bad_fraction)\b)")


def keyed(message: str, key: str) -> str:
    """A loader message (written for ``data.*``) naming the keys of section ``key``: the
    held-out file's errors say ``eval.data.path``, not the training file's key."""
    return message if key == "data" else _DATA_KEY.sub(key + ".", message)


def split_holdout(problems: list[Problem], share: float, seed: int
                  ) -> tuple[list[Problem], list[Problem]]:
    """(training problems, held-out problems): a seeded draw of ``round(share x n)`` of the
    problems (at least one, never all) held out; both keep the file's order. A pure
    function of (the problems' ids in order, share, seed), so every run and resume with the
    same settings draws the same split."""
    n = len(problems)
    k = min(n - 1, max(1, round(share * n)))
    held = set(random.Random(seed + HOLDOUT_SEED_OFFSET).sample(range(n), k))
    return ([p for i, p in enumerate(problems) if i not in held],
            [p for i, p in enumerate(problems) if i in held])


def limited(problems: list[Problem], limit: int, seed: int) -> list[Problem]:
    """At most ``limit`` of the problems (0: all): a seeded draw, in the problems' order."""
    if not limit or limit >= len(problems):
        return problems
    keep = set(random.Random(seed + HOLDOUT_SEED_OFFSET + 1).sample(range(len(problems)), limit))
    return [p for i, p in enumerate(problems) if i in keep]


def eval_source(cfg: Config) -> str:
    """Where ``eval.*`` draws its problems: synthetic | file | hub | holdout (auto resolved
    by the training data: synthetic families for synthetic training, else eval.holdout)."""
    source = cfg.eval.data.source
    if source != "auto":
        return source
    return "synthetic" if cfg.data.source == "synthetic" else "holdout"


def _held_out(cfg: Config, share: list[Problem]) -> list[Problem]:
    """The held-out set of ``eval.*`` (none when ``eval.every`` is 0), ``share`` being the
    ``eval.holdout`` share already cut from the training file."""
    e = cfg.eval
    if not e.every:
        return []
    source = eval_source(cfg)
    if source == "synthetic":
        from vlcohort.data.synthetic import make_dataset

        n = e.problems_per_task * len(cfg.data.tasks)
        problems = make_dataset(tasks=tuple(cfg.data.tasks), n=n,
                                seed=cfg.run.seed + EVAL_SEED_OFFSET,
                                image_size=cfg.data.image_size,
                                shuffle_options=cfg.data.shuffle_options)
    elif source == "holdout":
        problems = [p for p in share if p.gold is not None]
        if len(problems) < len(share):
            print(f"eval.holdout: {len(share) - len(problems)} of the {len(share)} held-out "
                  f"problems of {cfg.data.path} have no gold answer and are not scored",
                  file=sys.stderr)
    else:
        problems = read_problems(cfg, e.data, "eval.data")
    if not problems:
        raise ConfigError(f"eval.every={e.every}: no held-out problem with a gold answer "
                          f"({source}); give eval.data a file with answers or raise eval.holdout")
    return limited(problems, e.limit, cfg.run.seed)
