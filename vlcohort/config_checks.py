"""Checks of a built run config, and the closed vocabularies (``CHOICES``,
:func:`method_sources`) they check against. Every failure is a
:class:`ConfigError` naming the dotted key and what is allowed.

:func:`validate`, which ``vlcohort/config.py`` calls after building a config, runs three
steps in order: :func:`resolve` fills the values derived from others (``reward.source``
from ``method``, ``run.output_dir`` from ``run.name``); :func:`check_sections` has each
section check itself (``check_agents``, ``check_reward``, ``check_grpo``...); and
:func:`check_across` checks the settings that are each fine alone but not together.

Each vocabulary is written once. Those whose implementations are registered in a stage
module (engines, reward sources, topologies, tie rules, graders, answer styles, data
presets, the ``grpo`` variants, the monitor's signals) are read from that registry; only
the config's own choices (method presets, dtypes, schedules...) are spelt out here.

Imports point one way: ``vlcohort/config.py`` imports this module, never the reverse; the
schema's classes come from ``vlcohort/config_schema.py``, which imports neither, so no
circle forms even at type level. None of the registry modules read below imports
``vlcohort.config``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from vlcohort import run_folder
from vlcohort.typed_yaml import ConfigError, quote_value

if TYPE_CHECKING:
    from vlcohort.config_schema import (
        ComasConfig,
        Config,
        DataConfig,
        DistributedConfig,
        EvalConfig,
        GRPOConfig,
        LogConfig,
        MaporlConfig,
        ModelConfig,
        MonitorConfig,
        OptimConfig,
        PromptConfig,
        RewardConfig,
        RolloutConfig,
        RunConfig,
        SelfPlayConfig,
        ViewConfig,
        VLLMConfig,
        WarmupConfig,
    )


def method_sources() -> dict[str, str]:
    """``method`` -> the ``reward.source`` it presets, as each registered source declares
    (``training/reward_sources.py``: ``co_rl`` -> ``peer_vote``, ``co_rewarding`` ->
    ``ema_teacher_vote``, ...)."""
    from vlcohort.training.reward_sources import method_sources as registered

    return registered()


#: Methods that are a recipe of their own rather than one reward source for every agent,
#: and where each runs (``module:function(cfg, resume) -> exit code``, imported only when
#: it runs; every other method is the cohort recipe with its reward source). ``self_play``
#: (R-Zero / R-Few) rewards its challenger by the solver's uncertainty and its solver by
#: majority labels and gold anchors, CoMAS its solution / critique / judge turns by the
#: discussion's scores, so neither has a single ``reward.source``: validation requires
#: that key unset (null) for them.
RECIPES: dict[str, str] = {"self_play": "vlcohort.recipes.selfplay:run_self_play",
                           "comas": "vlcohort.recipes.comas:run_comas",
                           "maporl": "vlcohort.recipes.maporl:run_maporl"}
RECIPE_METHODS = tuple(RECIPES)

#: The config's own vocabularies: nothing else registers these names.
_OWN_CHOICES: dict[str, tuple[str, ...]] = {
    "agents.*.dtype": ("float32", "bfloat16", "float16", "auto"),
    "agents.*.attn_implementation": ("eager", "sdpa", "flash_attention_2"),
    "data.source": ("synthetic", "file", "hub"),
    # recipes.run_problems.eval_source: auto is synthetic for synthetic training, else eval.holdout
    "eval.data.source": ("auto", "synthetic", "file", "hub"),
    "optim.schedule": ("cosine", "constant"),
    # recipes.step.FILTER_METRICS: the values each name filters on
    "rollout.dynamic_sampling_metric": ("acc", "seq_reward", "seq_final_reward"),
    "rollout.vllm.dtype": ("auto", "bfloat16", "float16", "float32"),
    "distributed.backend": ("auto", "nccl", "gloo"),
    "self_play.band_rule": ("value", "quantile"),
    "self_play.images": ("auto", "on", "off"),
    # recipes.comas.ROLE_RULES: who critiques and who scores each solution
    "comas.roles": ("shuffled", "offset"),
    "log.wandb.mode": ("online", "offline", "disabled"),
}


def _registered_choices() -> dict[str, tuple[str, ...]]:
    """The vocabularies read from the registries next to their implementations.

    Imported here, on first use, not at the top: ``training.grpo`` and
    ``training.rewards`` load torch, which ``import vlcohort.config`` and ``vlcohort
    --help`` do not need.
    """
    from vlcohort.answers import extract, grading, voting
    from vlcohort.data import problems
    from vlcohort.rollout import engines
    from vlcohort.training import co_rewarding, ema, grpo, reward_sources, rewards

    sources = tuple(reward_sources.registry())
    return {
        "method": (*method_sources(), *RECIPE_METHODS),
        "reward.ema.device": ema.EMA_DEVICES,
        "reward.ema.teacher_view": co_rewarding.TEACHER_VIEWS,
        "rollout.engine": engines.ENGINES,
        "reward.source": sources,
        "agents.*.reward_source": sources,
        # ``self`` (each agent its own teacher) is what reward.source=self_vote means
        # (method=ttrl); as a topology of peer_vote it would be a second way to say it.
        "reward.topology": tuple(t for t in voting.TOPOLOGIES if t != "self"),
        "reward.grader": tuple(grading.GRADERS),
        "reward.tie": voting.TIE_RULES,
        "reward.ring": voting.RING_DIRECTIONS,
        "reward.min_share_of": voting.SHARE_BASES,
        "reward.answer_style": extract.STYLES,
        "reward.answer_kind": rewards.ANSWER_KINDS,
        "data.preset": tuple(problems.PRESETS),
        "grpo.adv_scale": tuple(grpo.ADVANTAGE_SCALES),
        "comas.advantage": tuple(grpo.RETURN_NORMALISERS),
        "maporl.advantage": tuple(grpo.RETURN_NORMALISERS),
        "grpo.kl_kind": tuple(grpo.KL_ESTIMATORS),
        "grpo.policy_loss": tuple(grpo.POLICY_LOSSES),
        "grpo.loss_agg": tuple(grpo.AGGREGATIONS),
        "grpo.is_level": tuple(grpo.IS_LEVELS),
        # ``off``: the update computes no importance weights at all (training/agent.py)
        "grpo.is_mode": (*grpo.IS_MODES, "off"),
    }


class _Choices(Mapping[str, tuple[str, ...]]):
    """Config key -> its allowed values: the config's own vocabularies, then the
    registered ones, read from their registries when asked for (not kept: a reward source
    registered later, a plug-in, is a choice from then on)."""

    def __init__(self, own: dict[str, tuple[str, ...]],
                 registered: Callable[[], dict[str, tuple[str, ...]]]) -> None:
        self._own = own
        self._registered = registered

    def _read(self) -> dict[str, tuple[str, ...]]:
        return {**self._own, **self._registered()}

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._own[key] if key in self._own else self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


#: Every choice field's allowed values (``agents.*.x``: the field of every agent).
CHOICES: Mapping[str, tuple[str, ...]] = _Choices(_OWN_CHOICES, _registered_choices)


#: Values kept as aliases of a newer name: {key: {old value: new value}}. A config that
#: uses one still loads and runs as before; loading it prints :func:`deprecations`.
DEPRECATED_VALUES: dict[str, dict[str, str]] = {"grpo.is_mode": {"mask": "token_mask"}}


def deprecations(cfg: Config) -> list[str]:
    """One warning line per deprecated value ``cfg`` uses, naming the value to use."""
    out = []
    for key, renames in DEPRECATED_VALUES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value in renames:
            out.append(f"warning: {key}={value} is deprecated; use {key}={renames[value]} "
                       "(the same setting)")
    return out


def pitfalls(cfg: Config) -> list[str]:
    """One warning line per combination that runs but quietly defeats itself: legal, so
    not an error, but a run that nobody would choose knowingly."""
    g, out = cfg.grpo, []
    if g.kl_in_reward and g.kl_coef > 0 and g.adv_scale == "group":
        out.append("warning: grpo.kl_in_reward=true with grpo.adv_scale=group: in a group whose "
                   "task rewards all agree, the advantages come from the KL penalty alone, scaled "
                   "to unit variance whatever grpo.kl_coef is; grpo.adv_scale=none or batch keeps "
                   "the penalty at kl_coef's scale")
    if cfg.rollout.top_p < 1 and g.is_mode != "off":
        out.append(f"warning: rollout.top_p={cfg.rollout.top_p} with grpo.is_mode={g.is_mode}: the "
                   "rollout log-probs are those of the truncated, renormalised top-p distribution, "
                   "so every sampled token's IS weight is <= 1 and the correction only shrinks "
                   "gradients; use rollout.top_p=1, or grpo.is_mode=off")
    return out


# ----------------------------------------------------------------------------- the steps


def validate(cfg: Config) -> None:
    """Fill the derived values, check each section alone, then their combinations."""
    _check_choice("method", cfg.method)
    resolve(cfg)
    check_sections(cfg)
    check_across(cfg)


def resolve(cfg: Config) -> None:
    """Fill the fields a config derives from others where they are left unset:
    ``reward.source`` from ``method`` (a recipe method such as self_play has none) and
    ``run.output_dir`` (runs/<run.name>)."""
    presets = method_sources()
    if cfg.reward.source is None and cfg.method in presets:
        cfg.reward.source = presets[cfg.method]  # method is a preset for the source
    if cfg.run.output_dir is None:
        cfg.run.output_dir = f"runs/{cfg.run.name}"


def check_sections(cfg: Config) -> None:
    """Each section checks itself, knowing nothing of the others."""
    check_agents(cfg.agents)
    check_prompt(cfg.prompt)
    check_reward(cfg.reward)
    check_log(cfg.log)
    check_rollout(cfg.rollout)
    check_run(cfg.run)
    check_grpo(cfg.grpo)
    check_optim(cfg.optim)
    check_data(cfg.data)
    check_eval(cfg.eval)
    check_arms(cfg.arms)
    check_distributed(cfg.distributed)
    check_monitor(cfg.monitor)
    if cfg.method == "self_play":
        check_self_play(cfg.self_play)
    if cfg.method == "comas":
        check_comas(cfg.comas)
    if cfg.method == "maporl":
        check_maporl(cfg.maporl)


def check_across(cfg: Config) -> None:
    """Settings of different sections that are each fine alone but not together."""
    _check_answer_kind_fits(cfg)
    if cfg.method == "comas":
        _check_comas_fits(cfg)
        return
    if cfg.method == "maporl":
        _check_maporl_fits(cfg)
        return
    if cfg.method in RECIPE_METHODS:
        _check_self_play_fits(cfg)
    elif cfg.reward.source != method_sources()[cfg.method]:
        raise ConfigError(f"reward.source={cfg.reward.source!r} contradicts method="
                          f"{cfg.method!r} (which means {method_sources()[cfg.method]!r}); set "
                          "one of them only")
    _check_cohort_size(cfg)
    _check_sources_fit(cfg)
    _check_batch_fits(cfg)
    _check_sampling_fits(cfg)
    _check_eval_fits(cfg)
    for i, a in enumerate(cfg.agents):
        if (a.view.column or a.view.rewrite_file) and cfg.data.source == "synthetic":
            raise ConfigError(f"agents.{i}.view: per-agent views need data.source=file or hub")
    v, ranks = cfg.rollout.vllm, cfg.distributed.ranks_per_agent
    if ranks and v.tensor_parallel_size > 1 and ranks % v.tensor_parallel_size:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size={v.tensor_parallel_size} must "
                          f"divide distributed.ranks_per_agent={ranks}")


# ----------------------------------------------------------------------------- agents


def check_agents(agents: list[ModelConfig]) -> None:
    """``agents``: at least one, each valid alone, names unique."""
    if not agents:
        raise ConfigError("agents: at least one agent is needed")
    for i, a in enumerate(agents):
        check_agent(a, f"agents.{i}")
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        raise ConfigError(f"agents: names must be unique, got {quote_value(names)}")


def check_agent(a: ModelConfig, where: str) -> None:
    """One agent (``where``: ``agents.N``): its model, inputs, reward source, training."""
    _check_processor_settings(a, where)
    if a.prompt_format:
        _check_prompt_format(a.prompt_format, f"{where}.prompt_format")
    _check_choice("agents.*.dtype", a.dtype, f"{where}.dtype")
    _check_choice("agents.*.attn_implementation", a.attn_implementation,
                  f"{where}.attn_implementation")
    if a.min_pixels and a.max_pixels and a.min_pixels > a.max_pixels:
        raise ConfigError(f"{where}: min_pixels={a.min_pixels} > max_pixels={a.max_pixels}")
    if not a.path:
        raise ConfigError(f"{where}.path: empty; give a checkpoint folder, hub id or "
                          "tiny:<family> spec")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
        raise ConfigError(f"{where}.device: {quote_value(a.device)}; use cpu, cuda or cuda:N")
    if (problem := run_folder.name_problem(a.name)) is not None:  # the one rule for names
        raise ConfigError(f"{where}.name: {quote_value(a.name)} {problem}; it names metric "
                          "keys and "
                          f"checkpoint and warm-up folders: {run_folder.NAME_FIX}")
    if a.reward_source is not None:
        _check_choice("agents.*.reward_source", a.reward_source, f"{where}.reward_source")
    if a.lr is not None:
        _check_rate(f"{where}.lr", a.lr)
    if a.lora_rank < 0:
        raise ConfigError(f"{where}.lora_rank: must be >= 0")
    check_warmup(a.warmup, f"{where}.warmup")
    check_view(a.view, f"{where}.view")


def check_warmup(w: WarmupConfig, where: str) -> None:
    """One agent's supervised warm-up (``where``: ``agents.N.warmup``)."""
    if w.steps or w.uniform_steps:
        _check_rate(f"{where}.lr", w.lr)
    if w.steps < 0 or w.uniform_steps < 0 or w.batch_size < 1:
        raise ConfigError(f"{where}: steps and uniform_steps >= 0, batch_size >= 1")
    if w.steps and not w.tasks:
        raise ConfigError(f"{where}.tasks: which task families to learn (warmup.steps > 0)")
    if w.uniform_steps and not w.uniform_tasks:
        raise ConfigError(f"{where}.uniform_tasks: needed when uniform_steps > 0")
    if "{}" not in w.answer_template:
        raise ConfigError(f"{where}.answer_template: must hold {{}} for the letter")


def check_view(v: ViewConfig, where: str) -> None:
    """One agent's view of the data (``where``: ``agents.N.view``)."""
    if v.column and v.rewrite_file:
        raise ConfigError(f"{where}: set column or rewrite_file, not both")
    if v.rewrite_file and not Path(v.rewrite_file).is_file():
        raise ConfigError(f"{where}.rewrite_file: {v.rewrite_file} not found")


def _check_processor_settings(a: ModelConfig, where: str) -> None:
    """``agents.N.processor``: the family's own settings, checked against the adapter's
    declared fields (``Adapter.settings``) as soon as the family is known without loading
    anything (a ``tiny:`` spec, a local folder's config.json); otherwise the adapter checks
    them when it is built."""
    from vlcohort.processors.base import FamilySettingsError, family_settings
    from vlcohort.processors.registry import adapter_class_for

    cls = adapter_class_for(a.path) if a.processor else None
    if cls is None:
        return
    try:
        family_settings(cls.settings, a.processor, cls.family, where=f"{where}.processor")
    except FamilySettingsError as e:
        raise ConfigError(str(e)) from None


def _check_prompt_format(value: str, key: str) -> None:
    """``prompt.format`` or an ``agents.N.prompt_format``: a known name or a file."""
    from vlcohort.processors.prompt_formats import PromptFormatError, check_format

    try:
        check_format(value, key)
    except PromptFormatError as e:
        raise ConfigError(str(e)) from None


# ----------------------------------------------------------------------------- sections


def check_prompt(p: PromptConfig) -> None:
    """``prompt.*``: its format is a known name or a file."""
    _check_prompt_format(p.format, "prompt.format")


def check_reward(r: RewardConfig) -> None:
    """``reward.*``: known names, shares in [0, 1], non-negative counts and penalties (the
    overlong buffer is checked against ``rollout.max_new_tokens`` in :func:`check_across`)."""
    _check_choice("reward.answer_kind", r.answer_kind)
    if r.code_workers < 0:
        raise ConfigError(f"reward.code_workers: must be >= 0 (0: one per CPU core), got "
                          f"{r.code_workers}")
    if r.source is not None:
        _check_choice("reward.source", r.source)
    for key in ("topology", "grader", "tie", "answer_style", "ring", "min_share_of"):
        _check_choice(f"reward.{key}", getattr(r, key))
    if not 0 <= r.min_share <= 1:
        raise ConfigError(f"reward.min_share: must be in [0, 1], got {r.min_share}")
    if r.overlong_penalty < 0:
        raise ConfigError(f"reward.overlong_penalty: the maximum penalty must be >= 0, got "
                          f"{r.overlong_penalty}")


def check_log(log: LogConfig) -> None:
    """The trackers' settings (whether their packages are installed is checked at the
    start of a run, ``vlcohort/monitoring/trackers.py``: a config is readable without them)."""
    w = log.wandb
    if w.mode is not None:
        _check_choice("log.wandb.mode", w.mode)
    if w.enable and not w.project.strip():
        raise ConfigError("log.wandb.project: empty; name the W&B project to log to")
    for key in ("name", "entity", "group"):
        value = getattr(w, key)
        if value is not None and not value.strip():
            raise ConfigError(f"log.wandb.{key}: empty string; leave it out (null) for the "
                              "default")


def check_rollout(r: RolloutConfig) -> None:
    """``rollout.*``: the engine, counts >= 1, a sampling temperature and nucleus mass."""
    _check_choice("rollout.engine", r.engine)
    for key in ("prompts_per_step", "rollouts_per_prompt", "max_new_tokens"):
        if getattr(r, key) < 1:
            raise ConfigError(f"rollout.{key}: must be >= 1, got {getattr(r, key)}")
    if r.temperature <= 0:
        raise ConfigError("rollout.temperature: must be > 0 (sampling is needed for groups)")
    if not 0 < r.top_p <= 1:
        raise ConfigError(f"rollout.top_p: must be in (0, 1], got {r.top_p}")
    _check_choice("rollout.dynamic_sampling_metric", r.dynamic_sampling_metric)
    if r.dynamic_sampling_max_rounds < 0:
        raise ConfigError(f"rollout.dynamic_sampling_max_rounds: must be >= 0 (0: drop flat "
                          f"groups, never refill), got {r.dynamic_sampling_max_rounds}")
    check_vllm(r.vllm)


def check_vllm(v: VLLMConfig) -> None:
    """``rollout.vllm.*`` (the launch's world size is checked at start-up, in
    ``vlcohort/training/distributed.py``, where it is known)."""
    _check_choice("rollout.vllm.dtype", v.dtype)
    if v.tensor_parallel_size < 1:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size: must be >= 1, got "
                          f"{v.tensor_parallel_size}")
    if not 0 < v.gpu_memory_utilization <= 1:
        raise ConfigError(f"rollout.vllm.gpu_memory_utilization: must be in (0, 1], got "
                          f"{v.gpu_memory_utilization}")
    if v.max_model_len < 0 or v.max_num_seqs < 1:
        raise ConfigError("rollout.vllm.max_model_len must be >= 0 (0: the model's) and "
                          "rollout.vllm.max_num_seqs >= 1")
    if v.max_num_batched_tokens < 0 or v.kv_cache_memory_gib < 0:
        raise ConfigError("rollout.vllm.max_num_batched_tokens and rollout.vllm."
                          "kv_cache_memory_gib must be >= 0 (0: the device's default)")
    if v.max_images_per_prompt < 1:
        raise ConfigError(f"rollout.vllm.max_images_per_prompt: must be >= 1, got "
                          f"{v.max_images_per_prompt}")


def check_run(run: RunConfig) -> None:
    """``run.*``: a step count >= 0."""
    if run.steps < 0:
        raise ConfigError(f"run.steps: must be >= 0, got {run.steps}")


def check_grpo(g: GRPOConfig) -> None:
    """``grpo.*``: known variants, epochs, clips and coefficients in range (the batch
    sizes are checked against B x G in :func:`check_across`)."""
    for key in ("adv_scale", "kl_kind", "loss_agg", "is_level", "is_mode", "policy_loss"):
        _check_choice(f"grpo.{key}", getattr(g, key))
    if g.ppo_epochs < 1:
        raise ConfigError(f"grpo.ppo_epochs: must be >= 1, got {g.ppo_epochs}")
    if g.clip_low < 0 or g.clip_high < 0 or g.clip_low >= 1:
        raise ConfigError("grpo.clip_low must be in [0, 1) and grpo.clip_high >= 0")
    if g.kl_coef < 0:
        raise ConfigError(f"grpo.kl_coef: must be >= 0, got {g.kl_coef}")
    if g.max_grad_norm < 0:
        raise ConfigError(f"grpo.max_grad_norm: must be >= 0 (0: off), got {g.max_grad_norm}")
    _check_kl_and_clip(g)
    _check_is(g)


def _check_kl_and_clip(g: GRPOConfig) -> None:
    """The KL term and the dual clip: combinations the registries of
    ``vlcohort/training/grpo.py`` accept one by one but that make no sense together."""
    if g.kl_kind == "k1" and g.kl_coef > 0 and not g.kl_in_reward:
        raise ConfigError(
            f"grpo.kl_kind=k1 with grpo.kl_coef={g.kl_coef} as a loss term has no KL "
            "gradient: grad(logp - ref) = grad logp, which is 0 in expectation under the "
            "policy. Use grpo.kl_kind=k2 (its expected gradient is that of "
            "KL(policy || ref)) or k3 / low_var_kl, or set grpo.kl_in_reward=true to charge "
            "k1 to the reward instead")
    if g.clip_ratio_c != 0 and not g.clip_ratio_c > 1:
        raise ConfigError(f"grpo.clip_ratio_c: 0 (no dual clip) or > 1 (verl uses 3), got "
                          f"{g.clip_ratio_c}")
    if g.clip_ratio_c > 0 and g.policy_loss == "cispo":
        raise ConfigError("grpo.clip_ratio_c: the dual clip bounds a clipped surrogate and "
                          "grpo.policy_loss=cispo has none (its weight is capped at 1 + "
                          "clip_high); set clip_ratio_c=0 or use policy_loss=ppo or gspo")


def _check_is(g: GRPOConfig) -> None:
    """The importance-sampling correction's bounds for its mode (``grpo.is_*``)."""
    if g.is_mode in ("token_mask", "mask", "rejection") and not 0 <= g.is_low < 1 < g.is_high:
        raise ConfigError(f"grpo.is_low must be in [0, 1) and grpo.is_high > 1 for "
                          f"is_mode={g.is_mode}, got [{g.is_low}, {g.is_high}]")
    if g.is_mode == "truncate" and g.is_cap < 1:
        raise ConfigError(f"grpo.is_cap: must be >= 1, got {g.is_cap}")
    if g.is_mode == "truncate" and not 0 <= g.is_min <= 1:
        raise ConfigError(f"grpo.is_min: the truncation floor must be in [0, 1] (0: none), "
                          f"got {g.is_min}")
    if g.is_batch_norm and g.is_mode == "off":
        raise ConfigError("grpo.is_batch_norm=true with grpo.is_mode=off: there are no "
                          "weights to normalise; set an is_mode or is_batch_norm=false")


def check_optim(o: OptimConfig) -> None:
    """``optim.*``: a learning rate > 0 (non-finite numbers are refused when the config is
    built, ``typed_yaml.finite``), weight decay >= 0, betas and ratios in range."""
    _check_choice("optim.schedule", o.schedule)
    _check_rate("optim.lr", o.lr)
    if o.weight_decay < 0:
        raise ConfigError(f"optim.weight_decay: must be >= 0 (0: off), got {o.weight_decay}")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas: two numbers in [0, 1), got {o.betas}")
    if not 0 <= o.warmup_ratio < 1 or not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError("optim.warmup_ratio must be in [0, 1) and optim.min_lr_ratio in [0, 1]")


def check_data(d: DataConfig) -> None:
    """``data.*``: a source and where it is, row filters, limits and the synthetic tasks."""
    _check_choice("data.source", d.source)
    _check_choice("data.preset", d.preset)
    if not 0 <= d.max_bad_fraction <= 1:
        raise ConfigError(f"data.max_bad_fraction: must be in [0, 1], got {d.max_bad_fraction}")
    for key, unit in (("max_image_pixels", "a pixel count"), ("max_prompt_tokens", "a token count")):
        if getattr(d, key) < 0:
            raise ConfigError(f"data.{key}: {unit}, 0 for no limit; got {getattr(d, key)}")
    if d.source != "synthetic" and not d.path:
        raise ConfigError(f"data.path: empty; data.source={d.source} needs a "
                          + ("file or dataset folder" if d.source == "file" else "hub dataset id"))
    if d.limit < 0:
        raise ConfigError(f"data.limit: must be >= 0 (0: all rows), got {d.limit}")
    if d.where and d.source == "synthetic":
        raise ConfigError("data.where: filters rows of a data file; it needs data.source=file "
                          "or hub")
    for column, values in d.where.items():
        if not str(column).strip() or not values:
            raise ConfigError(f"data.where.{column}: give a column name and a non-empty list "
                              "of the values to keep, e.g. {level: [Level 3, Level 4]}")
    if d.num_problems < 1:
        raise ConfigError("data.num_problems: must be >= 1")
    if not d.tasks:
        raise ConfigError("data.tasks: at least one task family")


def check_eval(e: EvalConfig) -> None:
    """``eval.*``: cadence, sample counts and where the held-out problems come from."""
    for key in ("every", "limit"):
        if getattr(e, key) < 0:
            raise ConfigError(f"eval.{key}: must be >= 0 (0: " + ("never" if key == "every" else "all")
                              + f"), got {getattr(e, key)}")
    for key in ("samples", "max_new_tokens", "batch_size", "problems_per_task"):
        if getattr(e, key) < 1:
            raise ConfigError(f"eval.{key}: must be >= 1, got {getattr(e, key)}")
    if not e.temperature > 0:
        raise ConfigError(f"eval.temperature: must be > 0 (eval.samples=1 answers greedily), "
                          f"got {e.temperature}")
    if not 0 <= e.holdout < 1:
        raise ConfigError(f"eval.holdout: a share of data.path in [0, 1), got {e.holdout}")
    d = e.data
    _check_choice("eval.data.source", d.source)
    _check_choice("data.preset", d.preset, "eval.data.preset")
    if d.source in ("file", "hub") and not d.path:
        raise ConfigError(f"eval.data.path: empty; eval.data.source={d.source} needs a "
                          + ("file or dataset folder" if d.source == "file" else "hub dataset id"))
    if d.limit < 0:
        raise ConfigError(f"eval.data.limit: must be >= 0 (0: all rows), got {d.limit}")
    if not 0 <= d.max_bad_fraction <= 1:
        raise ConfigError(f"eval.data.max_bad_fraction: must be in [0, 1], got {d.max_bad_fraction}")
    if (d.path or d.where) and d.source not in ("file", "hub"):
        raise ConfigError(f"eval.data.{'path' if d.path else 'where'}: read only with "
                          f"eval.data.source=file or hub (it is {d.source})")


def _check_eval_fits(cfg: Config) -> None:
    """The held-out set against the training data: ``eval.holdout`` splits a training
    file; a run on a file evaluates on a held-out file or on such a share of its own."""
    e = cfg.eval
    if e.holdout and cfg.data.source == "synthetic":
        raise ConfigError(f"eval.holdout={e.holdout}: holds out a share of data.path, but "
                          "data.source=synthetic (its held-out families are drawn apart "
                          "already); set eval.holdout=0")
    if e.holdout and e.data.source in ("file", "hub", "synthetic"):
        raise ConfigError(f"eval.holdout={e.holdout} with eval.data.source={e.data.source}: "
                          "two held-out sets; set eval.holdout=0 or eval.data.source=auto")
    if (e.every and e.data.source == "auto" and cfg.data.source != "synthetic"
            and not e.holdout):
        raise ConfigError(f"eval.every={e.every} with data.source={cfg.data.source}: name the "
                          "held-out problems (eval.data.source=file eval.data.path="
                          "heldout.jsonl) or hold out a share of data.path (eval.holdout=0.1)")


def check_arms(arms: list[str]) -> None:
    """``arms``: methods with a reward source of their own, each once."""
    for arm in arms:
        if arm not in method_sources():
            raise ConfigError(f"arms: {quote_value(arm)} is not one of: "
                              f"{', '.join(method_sources())}")
    if len(set(arms)) != len(arms):
        raise ConfigError(f"arms: each method once, got {quote_value(arms)}")


def check_distributed(dist: DistributedConfig) -> None:
    """``distributed.*``: the backend, the agent groups' size and the ZeRO settings."""
    _check_choice("distributed.backend", dist.backend)
    if dist.ranks_per_agent < 0:
        raise ConfigError(f"distributed.ranks_per_agent: must be >= 0 (0: world size / "
                          f"agents), got {dist.ranks_per_agent}")
    if dist.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"distributed.zero_stage: {dist.zero_stage} is not one of 0, 1, 2, 3")
    if dist.offload_params and dist.zero_stage != 3:
        raise ConfigError("distributed.offload_params needs distributed.zero_stage=3")
    if dist.offload_optimizer and dist.zero_stage == 0:
        raise ConfigError("distributed.offload_optimizer needs distributed.zero_stage >= 1")
    if dist.deepspeed_config and not Path(dist.deepspeed_config).is_file():
        raise ConfigError(f"distributed.deepspeed_config: {dist.deepspeed_config} not found")
    if dist.timeout_s < 1:
        raise ConfigError(f"distributed.timeout_s: must be >= 1, got {dist.timeout_s}")


def check_monitor(m: MonitorConfig) -> None:
    """``monitor.*``: positive thresholds, factors above 1, known signal names."""
    if m.collapse_threshold <= 0:
        raise ConfigError(f"monitor.collapse_threshold: must be > 0, got {m.collapse_threshold}")
    for key in ("collapse_patience", "length_patience", "spike_window"):
        if getattr(m, key) < 1:
            raise ConfigError(f"monitor.{key}: must be >= 1, got {getattr(m, key)}")
    for key in ("length_factor", "spike_factor"):
        if getattr(m, key) <= 1:
            raise ConfigError(f"monitor.{key}: must be > 1, got {getattr(m, key)}")
    for key in ("loss_floor", "kl_floor"):
        if getattr(m, key) < 0:
            raise ConfigError(f"monitor.{key}: must be >= 0, got {getattr(m, key)}")
    from vlcohort.monitoring.monitor import SIGNALS

    for i, name in enumerate(m.stop_on):
        if name not in SIGNALS:
            raise ConfigError(f"monitor.stop_on.{i}: {quote_value(name)} is not one of: "
                              + ", ".join(SIGNALS))
    if m.stop_on and not m.enable:
        raise ConfigError("monitor.stop_on needs monitor.enable=true (a disabled monitor "
                          "cannot stop the run)")


def check_self_play(sp: SelfPlayConfig) -> None:
    """``self_play.*`` (``method: self_play`` only): rules, anchors, band and weights."""
    _check_choice("self_play.band_rule", sp.band_rule)
    _check_choice("self_play.images", sp.images)
    if not 0 <= sp.anchors_per_prompt <= 5:
        raise ConfigError(f"self_play.anchors_per_prompt: k must be in 0..5, got "
                          f"{sp.anchors_per_prompt}")
    if sp.anchor_pool_size < max(1, sp.anchors_per_prompt):
        raise ConfigError(f"self_play.anchor_pool_size: must be >= 1 and >= "
                          f"self_play.anchors_per_prompt, got {sp.anchor_pool_size}")
    if len(sp.band) != 2 or not 0 <= sp.band[0] <= sp.band[1] <= 1:
        raise ConfigError(f"self_play.band: [low, high] with 0 <= low <= high <= 1, got {sp.band}")
    if sp.repetition_weight < 0 or sp.anchor_weight < 0:
        raise ConfigError("self_play.repetition_weight and self_play.anchor_weight must be >= 0")
    if not 0 < sp.bleu_threshold <= 1:
        raise ConfigError(f"self_play.bleu_threshold: must be in (0, 1], got {sp.bleu_threshold}")
    if not 0 <= sp.format_weight <= 1:
        raise ConfigError(f"self_play.format_weight: must be in [0, 1], got {sp.format_weight}")
    if sp.anchors_per_step < 0:
        raise ConfigError(f"self_play.anchors_per_step: must be >= 0, got {sp.anchors_per_step}")
    if sp.challenger_steps < 0 or sp.solver_steps < 0 or sp.challenger_steps + sp.solver_steps < 1:
        raise ConfigError("self_play.challenger_steps and self_play.solver_steps: >= 0, and at "
                          "least one phase must have steps")
    if sp.question_max_new_tokens < 1 or sp.hist_bins < 1:
        raise ConfigError("self_play.question_max_new_tokens and self_play.hist_bins: must be >= 1")
    if not sp.challenger_request.strip():
        raise ConfigError("self_play.challenger_request: empty; the challenger needs a request")


def check_comas(c: ComasConfig) -> None:
    """``comas.*`` (``method: comas`` only): rounds, roles, references, offsets (roles=offset),
    the score range, the estimator."""
    _check_choice("comas.advantage", c.advantage)
    _check_choice("comas.roles", c.roles)
    if c.rounds < 1:
        raise ConfigError(f"comas.rounds: must be >= 1, got {c.rounds}")
    if c.references < 1:
        raise ConfigError(f"comas.references: must be >= 1 (CoMAS: 2), got {c.references}; "
                          "a solver from round 2 on sees that many earlier discussions")
    if c.roles == "offset" and (c.critic_offset < 1 or c.judge_offset < 1
                                or c.critic_offset == c.judge_offset):
        raise ConfigError(f"comas.critic_offset={c.critic_offset} and comas.judge_offset="
                          f"{c.judge_offset}: two different offsets >= 1 (the critic and the "
                          "judge are peers of the solver and of each other)")
    if not c.score_min < c.score_max:
        raise ConfigError(f"comas.score_min={c.score_min} must be below comas.score_max="
                          f"{c.score_max} (CoMAS: 1 and 3)")
    if not c.malformed_penalty < 0:
        raise ConfigError(f"comas.malformed_penalty: must be < 0 (CoMAS: -1), got "
                          f"{c.malformed_penalty}; an unreadable score is never a neutral 0")
    for key in ("solution_instruction", "critique_instruction", "judge_instruction"):
        if not getattr(c, key).strip():
            raise ConfigError(f"comas.{key}: empty; each turn needs its task")


def check_maporl(m: MaporlConfig) -> None:
    """``maporl.*`` (``method: maporl`` only): rounds, the discount, the four incentive
    coefficients, the verifier folder, the estimator."""
    _check_choice("maporl.advantage", m.advantage)
    if m.rounds < 1:
        raise ConfigError(f"maporl.rounds: must be >= 1, got {m.rounds}")
    if not 0 < m.discount <= 1:
        raise ConfigError(f"maporl.discount: must be in (0, 1] (MAPoRL: 0.3), got {m.discount}")
    if len(m.alpha) != 4 or any(a < 0 for a in m.alpha):
        raise ConfigError(f"maporl.alpha: four coefficients >= 0 (MAPoRL: [0, 0, 0, 0]), got "
                          f"{m.alpha}")
    if m.verifier is not None and not (Path(m.verifier) / "config.json").is_file():
        raise ConfigError(f"maporl.verifier: {m.verifier!r} is not a local checkpoint folder "
                          "(no config.json); give a sequence-classification checkpoint with "
                          "one output, or leave it unset to score turns by gold correctness")
    for key in ("solution_instruction", "revision_instruction"):
        if not getattr(m, key).strip():
            raise ConfigError(f"maporl.{key}: empty; each turn needs its task")


# ----------------------------------------------------------------------------- across sections


def _check_answer_kind_fits(cfg: Config) -> None:
    """Code answers need prompts that carry public inputs (``meta["code_public"]``): the
    synthetic tasks carry none, and the self-play recipe extracts math answers of its own."""
    from vlcohort.training.rewards import answer_kind

    if not answer_kind(cfg.reward.answer_kind).runs_programs:
        return
    if cfg.method in RECIPE_METHODS:
        raise ConfigError(f"reward.answer_kind=code with method={cfg.method}: the self-play "
                          "recipe votes on math answers only; use reward.answer_kind=math")
    if cfg.data.source == "synthetic":
        raise ConfigError("reward.answer_kind=code with data.source=synthetic: the synthetic "
                          "tasks have no code tests; set data.source=file (or hub) and "
                          "data.path to code prompts with public_tests (README: code prompts)")
    if cfg.eval.every:
        raise ConfigError(f"eval.every={cfg.eval.every} with reward.answer_kind=code: the "
                          "in-run held-out eval grades math answers only; set "
                          "eval.every=0 and score checkpoints with `vlcohort eval "
                          "--benchmark humaneval` (or mbpp, livecodebench)")


def _check_self_play_fits(cfg: Config) -> None:
    """``method: self_play`` has no single reward source (the challenger is rewarded by the
    solver's uncertainty, the solver by its majority answers and gold anchors), so
    ``reward.source`` stays unset; two agents take its two roles and it runs alone."""
    if cfg.reward.source is not None:
        raise ConfigError(f"reward.source={cfg.reward.source!r}: method=self_play has no single "
                          "reward source (the challenger is rewarded by the solver's "
                          "uncertainty, the solver by its majority answers and gold anchors); "
                          "leave reward.source unset")
    if len(cfg.agents) != 2:
        raise ConfigError(f"agents: method=self_play needs exactly 2 agents (a challenger and a "
                          f"solver), got {len(cfg.agents)}")
    unused = [(cfg.arms, "arms: method=self_play runs alone; set arms=[]"),
              (cfg.data.decouple, "data.decouple: not used by method=self_play; set it false"),
              (cfg.rollout.dynamic_sampling, "rollout.dynamic_sampling: not used by "
               "method=self_play (its solver keeps the questions in self_play.band); set it "
               "false"),
              (cfg.eval.every, "eval.every: held-out evaluation is not wired into "
               "method=self_play (selfplay/solver/anchor_acc tracks the solver); set "
               "eval.every=0")]
    for value, message in unused:
        if value:
            raise ConfigError(message)
    _check_self_play_training(cfg)
    self_play_roles(cfg)


def _check_comas_fits(cfg: Config) -> None:
    """``method: comas``: enough agents for its roles (shuffled: >= 2, so a solution can
    meet a peer's critique and score, as CoMAS's shuffle allows with any cohort; offset: >= 3,
    solver, critic and judge three different agents, ``comas.*_offset`` mod A), no single
    ``reward.source``, one run; its batch is every turn an agent wrote, not B x G groups,
    so ``grpo.adv_scale`` is unused and ``grpo.mini_batch_seqs`` slices that batch."""
    A, c = len(cfg.agents), cfg.comas
    if c.roles == "shuffled" and A < 2:
        raise ConfigError(f"agents: method=comas needs at least 2 agents (comas.roles=shuffled "
                          f"draws critics and scorers among the agents), got {A}")
    if c.roles == "offset" and A < 3:
        raise ConfigError(f"agents: method=comas with comas.roles=offset needs at least 3 agents "
                          f"(solver, critic and judge of a solution are three different agents), "
                          f"got {A}; use comas.roles=shuffled for 2")
    if c.roles == "offset" and len({0, c.critic_offset % A, c.judge_offset % A}) < 3:
        raise ConfigError(f"comas.critic_offset={c.critic_offset} / comas.judge_offset="
                          f"{c.judge_offset} with {A} agents: solver, critic and judge must be "
                          f"three different agents; use offsets in 1..{A - 1}, not equal")
    if cfg.distributed.ranks_per_agent > 1:
        raise ConfigError(f"distributed.ranks_per_agent={cfg.distributed.ranks_per_agent}: "
                          "method=comas trains each agent on one rank; set it 1 (launch "
                          "--nproc_per_node <agents>) or run in one process")
    _check_discussion_fits(cfg, "comas", "a judge agent scores each solution")


def _check_discussion_fits(cfg: Config, method: str, scored_by: str) -> None:
    """What the discussion recipes (CoMAS, MAPoRL) share: no single ``reward.source``
    (``scored_by`` says what rewards a turn), none of the cohort step's options that have
    nothing to act on, and a batch of every turn an agent wrote, sliced into optimizer
    steps of ``grpo.mini_batch_seqs``."""
    if cfg.reward.source is not None:
        raise ConfigError(f"reward.source={cfg.reward.source!r}: method={method} has no single "
                          f"reward source ({scored_by}); leave reward.source unset")
    unused = [(cfg.arms, f"arms: method={method} runs alone; set arms=[]"),
              (cfg.data.decouple, f"data.decouple: not used by method={method}; set it false"),
              (cfg.rollout.dynamic_sampling, "rollout.dynamic_sampling: not used by "
               f"method={method} (no groups to filter); set it false"),
              (cfg.reward.overlong_buffer, f"reward.overlong_buffer: not used by method={method}; "
               "set it 0")]
    for value, message in unused:
        if value:
            raise ConfigError(message)
    g = cfg.grpo
    if g.micro_batch_seqs < 1 or g.mini_batch_seqs < 0 or g.mini_batch_seqs % g.micro_batch_seqs:
        raise ConfigError(f"grpo.mini_batch_seqs={g.mini_batch_seqs} / micro_batch_seqs="
                          f"{g.micro_batch_seqs}: method={method} takes one optimizer step per "
                          "mini_batch_seqs of an agent's shuffled turns (0: one step over all "
                          "of them), a multiple of micro_batch_seqs >= 1")


def _check_maporl_fits(cfg: Config) -> None:
    """``method: maporl``: a discussion of >= 2 agents, in one process, no single
    ``reward.source`` (its turns are graded against gold in the recipe), and its batch is
    every turn an agent wrote (``grpo.mini_batch_seqs`` slices it, as CoMAS's)."""
    A = len(cfg.agents)
    if A < 2:
        raise ConfigError(f"agents: method=maporl needs at least 2 agents (each revises after "
                          f"reading the others' answers), got {A}")
    if cfg.distributed.ranks_per_agent:
        raise ConfigError(f"distributed.ranks_per_agent={cfg.distributed.ranks_per_agent}: "
                          "method=maporl runs in one process (agents may sit on different "
                          "GPUs, agents.N.device); set it 0")
    _check_discussion_fits(cfg, "maporl", "each turn is graded against gold, plus its "
                                          "influence terms")


def _check_self_play_training(cfg: Config) -> None:
    """The solver's GRPO group and the KL penalty under ``method: self_play``."""
    sp = cfg.self_play
    if sp.solver_samples < (2 if cfg.grpo.adv_scale == "group" else 1):
        raise ConfigError(f"self_play.solver_samples: m={sp.solver_samples}; the m answers are "
                          "the solver's GRPO group: m >= 2 with grpo.adv_scale=group")
    if cfg.grpo.kl_in_reward and cfg.grpo.kl_coef > 0:
        raise ConfigError("grpo.kl_in_reward: the reward-side KL penalty is applied by the "
                          "cohort recipe's rewards, not by method: self_play's; set it false "
                          "(the KL then goes in the loss, grpo.kl_kind k2 / k3 / low_var_kl)")


def _check_cohort_size(cfg: Config) -> None:
    """A source's cohort size (a peer vote needs two agents): the run's source, an agent's
    own, or an arm's."""
    from vlcohort.training.reward_sources import source

    A = len(cfg.agents)
    if cfg.reward.source is not None and A < source(cfg.reward.source).min_agents:
        raise ConfigError(f"reward.source={cfg.reward.source} needs at least "
                          f"{source(cfg.reward.source).min_agents} agents (a ring of one agent "
                          "would be self-vote); add an agent or use method=ttrl")
    for i, a in enumerate(cfg.agents):
        if a.reward_source and A < source(a.reward_source).min_agents:
            raise ConfigError(f"agents.{i}.reward_source={a.reward_source} needs at least "
                              f"{source(a.reward_source).min_agents} agents")
    for arm in cfg.arms:
        if arm in method_sources() and A < source(method_sources()[arm]).min_agents:
            raise ConfigError(f"arms: {arm} needs at least "
                              f"{source(method_sources()[arm]).min_agents} agents")


def _check_sources_fit(cfg: Config) -> None:
    """Each reward source's own check, for the agents it rewards, and the rephrased
    question every agent needs where a source has a round hold it (both wordings, or the
    EMA teacher on the other one): a missing one is said at load, never a reward silently
    missing mid-run."""
    from vlcohort.training.reward_sources import source, sources_of, wordings_of

    used = sources_of(cfg)
    for name, agents in used.items():
        source(name).check(cfg, agents)
    if cfg.grpo.kl_reference == "teacher" and not any(
            source(name).keeps_teacher for name in used):
        raise ConfigError("grpo.kl_reference=teacher: no agent keeps an EMA teacher (reward.source "
                          "ema_teacher_vote, method co_rewarding_ii); set grpo.kl_reference=start")
    if cfg.grpo.view_loss == "sum" and not wordings_of(cfg).both:
        raise ConfigError("grpo.view_loss=sum: no round holds both wordings (reward.source "
                          "cross_view_vote, method co_rewarding_i); set grpo.view_loss=joint")
    w = wordings_of(cfg)
    if not w.rephrased:
        return
    for i, a in enumerate(cfg.agents):
        if not (a.view.column or a.view.rewrite_file):
            raise ConfigError(f"agents.{i}.view: {w.why}; give agents.{i}.view.rewrite_file (or "
                              f".column) with agent {a.name!r}'s rephrased questions")
    if cfg.data.decouple:
        raise ConfigError(f"data.decouple: not supported with rephrased questions ({w.why}); set "
                          "it false")


def _check_batch_fits(cfg: Config) -> None:
    """``grpo``'s batch sizes against the B x G sequences each agent has per step."""
    g, r = cfg.grpo, cfg.rollout
    if g.adv_scale == "group" and r.rollouts_per_prompt < 2:
        raise ConfigError("rollout.rollouts_per_prompt=1 with grpo.adv_scale=group: group "
                          "normalisation needs G >= 2 rollouts per prompt")
    seqs = r.prompts_per_step * r.rollouts_per_prompt
    if g.micro_batch_seqs < 1 or (g.micro_batch_seqs < seqs and seqs % g.micro_batch_seqs):
        raise ConfigError(f"grpo.micro_batch_seqs={g.micro_batch_seqs} must divide the "
                          f"sequences per agent per step (B x G = {seqs})")
    if g.mini_batch_seqs < 0 or (0 < g.mini_batch_seqs < seqs and (
            seqs % g.mini_batch_seqs or g.mini_batch_seqs % g.micro_batch_seqs)):
        raise ConfigError(f"grpo.mini_batch_seqs={g.mini_batch_seqs} must be 0 (one optimizer "
                          f"step per epoch) or divide B x G = {seqs} and be a multiple of "
                          f"grpo.micro_batch_seqs={g.micro_batch_seqs}")
    if g.micro_batch_tokens < 0:
        raise ConfigError(f"grpo.micro_batch_tokens={g.micro_batch_tokens} must be 0 (micro-batches "
                          "of grpo.micro_batch_seqs sequences) or a positive token budget")
    if g.micro_batch_tokens > 0 and cfg.distributed.ranks_per_agent > 1:
        raise ConfigError(f"grpo.micro_batch_tokens with distributed.ranks_per_agent="
                          f"{cfg.distributed.ranks_per_agent}: ranks would form unequal numbers of "
                          "micro-batches, and ZeRO's collectives need the same on every rank; set "
                          "grpo.micro_batch_tokens=0 (grpo.packing still applies)")


def _check_sampling_fits(cfg: Config) -> None:
    """DAPO's soft overlong penalty (``reward.overlong_buffer``) within the completion
    length, and dynamic sampling only with one rank per agent."""
    buffer, longest = cfg.reward.overlong_buffer, cfg.rollout.max_new_tokens
    if not 0 <= buffer <= longest:
        raise ConfigError(f"reward.overlong_buffer: L_cache must be in [0, rollout.max_new_tokens"
                          f" = {longest}] tokens (0: no penalty), got {buffer}")
    ranks = cfg.distributed.ranks_per_agent
    if cfg.rollout.dynamic_sampling and ranks > 1:
        raise ConfigError(f"rollout.dynamic_sampling with distributed.ranks_per_agent={ranks}: "
                          "the agent group's ranks would keep unequal numbers of groups, and "
                          "ZeRO's collectives need the same micro-batches on every rank; use "
                          "ranks_per_agent=1 (one rank per agent) or set "
                          "rollout.dynamic_sampling=false")


# ----------------------------------------------------------------------------- helpers


def self_play_roles(cfg: Config) -> tuple[int, int]:
    """(challenger index, solver index) from ``self_play.challenger`` / ``self_play.solver``,
    each an agent name or an index into ``agents``."""
    names = [a.name for a in cfg.agents]
    out = []
    for key in ("challenger", "solver"):
        value = str(getattr(cfg.self_play, key))
        if value in names:
            out.append(names.index(value))
        elif value.isascii() and value.isdigit() and len(value) < 7 and int(value) < len(names):
            out.append(int(value))
        else:
            raise ConfigError(f"self_play.{key}: {quote_value(value)} names no agent; give an "
                              "agent name "
                              f"({', '.join(names)}) or an index 0..{len(names) - 1}")
    if out[0] == out[1]:
        raise ConfigError(f"self_play.challenger and self_play.solver are both agent "
                          f"{names[out[0]]!r}; the two roles need two agents (two copies of one "
                          "model are fine: give both agents the same path)")
    return out[0], out[1]


def _check_rate(key: str, value: float) -> None:
    """A learning rate > 0. A rate of 0 or below is no run: 0 leaves every weight where it
    was while the run pays for every step, and a negative rate climbs the loss."""
    if not value > 0:
        raise ConfigError(f"{key}: {value} is not a learning rate > 0 (e.g. 1e-6)")


def _check_choice(pattern: str, value: str, key: str | None = None) -> None:
    allowed = CHOICES[pattern]
    if value not in allowed:
        raise ConfigError(f"{key or pattern}: {quote_value(value)} is not one of: "
                          f"{', '.join(allowed)}")
