"""Checks of a run config that need more than one field, and the closed vocabularies
(``CHOICES``, ``METHOD_SOURCES``, ``MONITOR_SIGNALS``) they check against. Every failure
is a :class:`ConfigError` naming the dotted key and what is allowed. ``config.py`` (the
schema) calls :func:`validate` after building a config and re-exports these names.

Each vocabulary is written once. Those whose implementations are registered in a stage
module (engines, reward sources, topologies, tie rules, graders, answer styles, data
presets, the ``grpo`` variants) are read from that registry; only the config's own
choices (method presets, dtypes, schedules...) are spelt out here.

Imports point one way: ``config.py`` imports this module, never the reverse, so the
config classes (``Config``, ``GRPOConfig``, ``MonitorConfig`` of ``vlcohort.config``) appear in
annotations only, as strings that are never evaluated. None of the registry modules
read below imports ``vlcohort.config`` either.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Iterator, Mapping

from vlcohort.typed_yaml import ConfigError

MONITOR_SIGNALS = ("reward_collapse", "degeneration", "divergence")

#: ``method`` -> the ``reward.source`` it presets (intuitor / rent: intrinsic rewards).
METHOD_SOURCES = {"co_rl": "peer_vote", "ttrl": "self_vote", "gt_reward": "ground_truth",
                  "intuitor": "self_certainty", "rent": "entropy"}

#: Methods that are a recipe of their own rather than one reward source for every agent.
#: ``self_play`` (R-Zero / R-Few, ``vlcohort/recipes/selfplay.py``) rewards its challenger
#: by the solver's uncertainty and its solver by majority labels and gold anchors, so it
#: has no single ``reward.source``: validation requires that key unset (null) for it.
RECIPE_METHODS = ("self_play",)

#: The config's own vocabularies: nothing else registers these names.
_OWN_CHOICES: dict[str, tuple[str, ...]] = {
    "method": (*METHOD_SOURCES, *RECIPE_METHODS),
    "agents.*.dtype": ("float32", "bfloat16", "float16", "auto"),
    "agents.*.attn_implementation": ("eager", "sdpa", "flash_attention_2"),
    "data.source": ("synthetic", "file", "hub"),
    "optim.schedule": ("cosine", "constant"),
    "rollout.vllm.dtype": ("auto", "bfloat16", "float16", "float32"),
    "distributed.backend": ("auto", "nccl", "gloo"),
    "self_play.band_rule": ("value", "quantile"),
    "self_play.images": ("auto", "on", "off"),
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
    from vlcohort.training import grpo, rewards

    sources = (*rewards.REWARD_SOURCES, *rewards.INTRINSIC_SOURCES)
    return {
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
        "grpo.kl_kind": tuple(grpo.KL_ESTIMATORS),
        "grpo.policy_loss": tuple(grpo.POLICY_LOSSES),
        "grpo.loss_agg": tuple(grpo.AGGREGATIONS),
        "grpo.is_level": tuple(grpo.IS_LEVELS),
        # ``off``: the update computes no importance weights at all (training/agent.py)
        "grpo.is_mode": (*grpo.IS_MODES, "off"),
    }


class _Choices(Mapping[str, tuple[str, ...]]):
    """Config key -> its allowed values: the config's own vocabularies, then the
    registered ones, read from their registries the first time one is asked for."""

    def __init__(self, own: dict[str, tuple[str, ...]],
                 registered: Callable[[], dict[str, tuple[str, ...]]]) -> None:
        self._own = own
        self._registered = registered
        self._all: dict[str, tuple[str, ...]] | None = None

    def _read(self) -> dict[str, tuple[str, ...]]:
        if self._all is None:
            self._all = {**self._own, **self._registered()}
        return self._all

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._own[key] if key in self._own else self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


#: Every choice field's allowed values (``agents.*.x``: the field of every agent).
CHOICES: Mapping[str, tuple[str, ...]] = _Choices(_OWN_CHOICES, _registered_choices)


def agent_reward_source(cfg: "Config", i: int) -> str:
    """Agent ``i``'s reward source: ``agents.i.reward_source``, else ``reward.source``."""
    return cfg.agents[i].reward_source or cfg.reward.source


def _check_processor_settings(cfg: "Config") -> None:
    """``agents.N.processor``: the family's own settings, checked against the adapter's
    declared fields (``Adapter.settings``) as soon as the family is known without loading
    anything (a ``tiny:`` spec, a local folder's config.json); otherwise the adapter checks
    them when it is built."""
    from vlcohort.processors.base import FamilySettingsError, family_settings
    from vlcohort.processors.registry import adapter_class_for

    for i, a in enumerate(cfg.agents):
        if not a.processor:
            continue
        cls = adapter_class_for(a.path)
        if cls is None:
            continue
        try:
            family_settings(cls.settings, a.processor, cls.family, where=f"agents.{i}.processor")
        except FamilySettingsError as e:
            raise ConfigError(str(e)) from None


def _check_prompt_formats(cfg: "Config") -> None:
    """``prompt.format`` and each ``agents.N.prompt_format``: a known name or a file."""
    from vlcohort.processors.prompt_formats import PromptFormatError, check_format

    try:
        check_format(cfg.prompt.format, "prompt.format")
        for i, a in enumerate(cfg.agents):
            if a.prompt_format:
                check_format(a.prompt_format, f"agents.{i}.prompt_format")
    except PromptFormatError as e:
        raise ConfigError(str(e)) from None


def validate(cfg: "Config") -> None:
    """Checks that need more than one field, and choice fields; fills derived fields
    (``reward.source`` from ``method``)."""
    _check_choice("method", cfg.method)
    _check_processor_settings(cfg)
    _check_prompt_formats(cfg)
    _validate_answer_kind(cfg)
    if cfg.method in RECIPE_METHODS:
        return _validate_self_play(cfg)
    _validate_log(cfg.log)
    for i, a in enumerate(cfg.agents):
        _check_choice("agents.*.dtype", a.dtype, f"agents.{i}.dtype")
        _check_choice("agents.*.attn_implementation", a.attn_implementation,
                      f"agents.{i}.attn_implementation")
        if a.min_pixels and a.max_pixels and a.min_pixels > a.max_pixels:
            raise ConfigError(f"agents.{i}: min_pixels={a.min_pixels} > max_pixels={a.max_pixels}")
        if not a.path:
            raise ConfigError(f"agents.{i}.path: empty; give a checkpoint folder, hub id or "
                              "tiny:<family> spec")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
            raise ConfigError(f"agents.{i}.device: {a.device!r}; use cpu, cuda or cuda:N")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", a.name):
            raise ConfigError(f"agents.{i}.name: {a.name!r}; use letters, digits, _ . - "
                              "(it names metric keys and checkpoint folders)")
    _check_choice("rollout.engine", cfg.rollout.engine)
    expected = METHOD_SOURCES[cfg.method]
    if cfg.reward.source is None:
        cfg.reward.source = expected  # method is a preset for the reward source
    _check_choice("reward.source", cfg.reward.source)
    if cfg.reward.source != expected:
        raise ConfigError(f"reward.source={cfg.reward.source!r} contradicts method="
                          f"{cfg.method!r} (which means {expected!r}); set one of them only")
    _check_choice("reward.topology", cfg.reward.topology)
    _check_choice("reward.grader", cfg.reward.grader)
    if not cfg.agents:
        raise ConfigError("agents: at least one agent is needed")
    names = [a.name for a in cfg.agents]
    if len(set(names)) != len(names):
        raise ConfigError(f"agents: names must be unique, got {names}")
    if cfg.reward.source == "peer_vote" and len(cfg.agents) < 2:
        raise ConfigError("reward.source=peer_vote needs at least 2 agents (a ring of one "
                          "agent would be self-vote); add an agent or use method=ttrl")
    for i, a in enumerate(cfg.agents):
        if a.reward_source is None:
            continue
        _check_choice("agents.*.reward_source", a.reward_source, f"agents.{i}.reward_source")
        if a.reward_source == "peer_vote" and len(cfg.agents) < 2:
            raise ConfigError(f"agents.{i}.reward_source=peer_vote needs at least 2 agents")
    for key in ("prompts_per_step", "rollouts_per_prompt", "max_new_tokens"):
        if getattr(cfg.rollout, key) < 1:
            raise ConfigError(f"rollout.{key}: must be >= 1, got {getattr(cfg.rollout, key)}")
    if cfg.rollout.temperature <= 0:
        raise ConfigError("rollout.temperature: must be > 0 (sampling is needed for groups)")
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p: must be in (0, 1], got {cfg.rollout.top_p}")
    if cfg.run.steps < 0:
        raise ConfigError(f"run.steps: must be >= 0, got {cfg.run.steps}")
    if cfg.run.output_dir is None:
        cfg.run.output_dir = f"runs/{cfg.run.name}"
    for key in ("reward.tie", "reward.answer_style", "data.source", "grpo.adv_scale",
                "grpo.kl_kind", "grpo.loss_agg", "grpo.is_level", "grpo.is_mode",
                "grpo.policy_loss", "optim.schedule"):
        section, name = key.split(".")
        _check_choice(key, getattr(getattr(cfg, section), name))
    g = cfg.grpo
    if g.adv_scale == "group" and cfg.rollout.rollouts_per_prompt < 2:
        raise ConfigError("rollout.rollouts_per_prompt=1 with grpo.adv_scale=group: group "
                          "normalisation needs G >= 2 rollouts per prompt")
    seqs = cfg.rollout.prompts_per_step * cfg.rollout.rollouts_per_prompt
    if g.micro_batch_seqs < 1 or (g.micro_batch_seqs < seqs and seqs % g.micro_batch_seqs):
        raise ConfigError(f"grpo.micro_batch_seqs={g.micro_batch_seqs} must divide the "
                          f"sequences per agent per step (B x G = {seqs})")
    if g.mini_batch_seqs < 0 or (0 < g.mini_batch_seqs < seqs and (
            seqs % g.mini_batch_seqs or g.mini_batch_seqs % g.micro_batch_seqs)):
        raise ConfigError(f"grpo.mini_batch_seqs={g.mini_batch_seqs} must be 0 (one optimizer "
                          f"step per epoch) or divide B x G = {seqs} and be a multiple of "
                          f"grpo.micro_batch_seqs={g.micro_batch_seqs}")
    if g.ppo_epochs < 1:
        raise ConfigError(f"grpo.ppo_epochs: must be >= 1, got {g.ppo_epochs}")
    if g.clip_low < 0 or g.clip_high < 0 or g.clip_low >= 1:
        raise ConfigError("grpo.clip_low must be in [0, 1) and grpo.clip_high >= 0")
    if g.kl_coef < 0:
        raise ConfigError(f"grpo.kl_coef: must be >= 0, got {g.kl_coef}")
    _validate_loss_and_is(g)
    if not 0 <= cfg.reward.min_share <= 1:
        raise ConfigError(f"reward.min_share: must be in [0, 1], got {cfg.reward.min_share}")
    if not 0 <= cfg.data.max_bad_fraction <= 1:
        raise ConfigError(f"data.max_bad_fraction: must be in [0, 1], got "
                          f"{cfg.data.max_bad_fraction}")
    if cfg.data.max_image_pixels < 0:
        raise ConfigError(f"data.max_image_pixels: a pixel count, 0 for no limit; got "
                          f"{cfg.data.max_image_pixels}")
    if cfg.data.max_prompt_tokens < 0:
        raise ConfigError(f"data.max_prompt_tokens: a token count, 0 for no limit; got "
                          f"{cfg.data.max_prompt_tokens}")
    _validate_vote_and_sampling(cfg)
    _validate_rates(cfg)
    o = cfg.optim
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas: two numbers in [0, 1), got {o.betas}")
    if not 0 <= o.warmup_ratio < 1 or not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError("optim.warmup_ratio must be in [0, 1) and optim.min_lr_ratio in [0, 1]")
    for i, a in enumerate(cfg.agents):
        if a.lora_rank < 0:
            raise ConfigError(f"agents.{i}.lora_rank: must be >= 0")
    for arm in cfg.arms:
        if arm not in METHOD_SOURCES:
            raise ConfigError(f"arms: {arm!r} is not one of: {', '.join(METHOD_SOURCES)}")
        if METHOD_SOURCES[arm] == "peer_vote" and len(cfg.agents) < 2:
            raise ConfigError(f"arms: {arm} needs at least 2 agents")
    if len(set(cfg.arms)) != len(cfg.arms):
        raise ConfigError(f"arms: each method once, got {cfg.arms}")
    for i, a in enumerate(cfg.agents):
        w = a.warmup
        if w.steps < 0 or w.uniform_steps < 0 or w.batch_size < 1:
            raise ConfigError(f"agents.{i}.warmup: steps and uniform_steps >= 0, batch_size >= 1")
        if w.steps and not w.tasks:
            raise ConfigError(f"agents.{i}.warmup.tasks: which task families to learn "
                              "(warmup.steps > 0)")
        if w.uniform_steps and not w.uniform_tasks:
            raise ConfigError(f"agents.{i}.warmup.uniform_tasks: needed when uniform_steps > 0")
        if "{}" not in w.answer_template:
            raise ConfigError(f"agents.{i}.warmup.answer_template: must hold {{}} for the letter")
    d = cfg.data
    _check_choice("data.preset", d.preset)
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
    for i, a in enumerate(cfg.agents):
        if a.view.column and a.view.rewrite_file:
            raise ConfigError(f"agents.{i}.view: set column or rewrite_file, not both")
        if (a.view.column or a.view.rewrite_file) and d.source == "synthetic":
            raise ConfigError(f"agents.{i}.view: per-agent views need data.source=file or hub")
        if a.view.rewrite_file and not Path(a.view.rewrite_file).is_file():
            raise ConfigError(f"agents.{i}.view.rewrite_file: {a.view.rewrite_file} not found")
    if cfg.data.num_problems < 1:
        raise ConfigError("data.num_problems: must be >= 1")
    _validate_scale_out(cfg)
    _validate_monitor(cfg.monitor)
    if not cfg.data.tasks:
        raise ConfigError("data.tasks: at least one task family")


def _validate_loss_and_is(g: "GRPOConfig") -> None:
    """The policy loss, its KL term and the IS correction (``grpo.*``): combinations the
    registries of ``training/grpo.py`` accept one by one but that make no sense together."""
    if g.kl_kind == "k1" and g.kl_coef > 0 and not g.kl_in_reward:
        raise ConfigError(
            f"grpo.kl_kind=k1 with grpo.kl_coef={g.kl_coef} as a loss term has no KL "
            "gradient: grad(logp - ref) = grad logp, which is 0 in expectation under the "
            "policy (issue 14). Use grpo.kl_kind=k2 (its expected gradient is that of "
            "KL(policy || ref)) or k3 / low_var_kl, or set grpo.kl_in_reward=true to charge "
            "k1 to the reward instead")
    if g.clip_ratio_c != 0 and not g.clip_ratio_c > 1:
        raise ConfigError(f"grpo.clip_ratio_c: 0 (no dual clip) or > 1 (verl uses 3), got "
                          f"{g.clip_ratio_c}")
    if g.clip_ratio_c > 0 and g.policy_loss == "cispo":
        raise ConfigError("grpo.clip_ratio_c: the dual clip bounds a clipped surrogate and "
                          "grpo.policy_loss=cispo has none (its weight is capped at 1 + "
                          "clip_high); set clip_ratio_c=0 or use policy_loss=ppo or gspo")
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


def _validate_rates(cfg: "Config") -> None:
    """Learning rates > 0, weight decay and the gradient clip >= 0 (non-finite numbers are
    refused when the config is built, ``typed_yaml.finite``). A rate of 0 or below is no
    run: 0 leaves every weight where it was while the run pays for every step, and a
    negative rate climbs the loss."""
    rates = [("optim.lr", cfg.optim.lr)]
    for i, a in enumerate(cfg.agents):
        if a.lr is not None:
            rates.append((f"agents.{i}.lr", a.lr))
        if a.warmup.steps or a.warmup.uniform_steps:
            rates.append((f"agents.{i}.warmup.lr", a.warmup.lr))
    for key, value in rates:
        if not value > 0:
            raise ConfigError(f"{key}: {value} is not a learning rate > 0 (e.g. 1e-6)")
    for key, value in (("optim.weight_decay", cfg.optim.weight_decay),
                       ("grpo.max_grad_norm", cfg.grpo.max_grad_norm)):
        if value < 0:
            raise ConfigError(f"{key}: must be >= 0 (0: off), got {value}")


def _validate_answer_kind(cfg: "Config") -> None:
    """``reward.answer_kind`` and its sandbox knobs. Code answers need prompts that carry
    public inputs (``meta["code_public"]``): the synthetic tasks carry none, and the
    self-play recipe extracts math answers of its own."""
    r = cfg.reward
    _check_choice("reward.answer_kind", r.answer_kind)
    if r.code_workers < 0:
        raise ConfigError(f"reward.code_workers: must be >= 0 (0: one per CPU core), got "
                          f"{r.code_workers}")
    if r.answer_kind != "code":
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
                          "in-run held-out eval draws the synthetic math tasks; set "
                          "eval.every=0 and score checkpoints with `vlcohort eval "
                          "--benchmark humaneval` (or mbpp, livecodebench)")


def _validate_vote_and_sampling(cfg: "Config") -> None:
    """The vote's rules (``reward.ring``, ``reward.min_share_of``), DAPO's soft overlong
    penalty (``reward.overlong_*``) and dynamic sampling (``rollout.dynamic_sampling*``)."""
    r = cfg.reward
    _check_choice("reward.ring", r.ring)
    _check_choice("reward.min_share_of", r.min_share_of)
    if not 0 <= r.overlong_buffer <= cfg.rollout.max_new_tokens:
        raise ConfigError(f"reward.overlong_buffer: L_cache must be in [0, rollout.max_new_tokens"
                          f" = {cfg.rollout.max_new_tokens}] tokens (0: no penalty), got "
                          f"{r.overlong_buffer}")
    if r.overlong_penalty < 0:
        raise ConfigError(f"reward.overlong_penalty: the maximum penalty must be >= 0, got "
                          f"{r.overlong_penalty}")
    if cfg.rollout.dynamic_sampling_max_rounds < 0:
        raise ConfigError(f"rollout.dynamic_sampling_max_rounds: must be >= 0 (0: drop flat "
                          f"groups, never refill), got {cfg.rollout.dynamic_sampling_max_rounds}")
    if cfg.rollout.dynamic_sampling and cfg.distributed.ranks_per_agent > 1:
        raise ConfigError(f"rollout.dynamic_sampling with distributed.ranks_per_agent="
                          f"{cfg.distributed.ranks_per_agent}: the agent group's ranks would "
                          "keep unequal numbers of groups, and ZeRO's collectives need the same "
                          "micro-batches on every rank; use ranks_per_agent=1 (one rank per "
                          "agent) or set rollout.dynamic_sampling=false")


def _validate_scale_out(cfg: "Config") -> None:
    """``rollout.vllm.*`` and ``distributed.*`` (the launch's world size is checked at
    start-up, in ``distributed.py``, where it is known)."""
    v, dist = cfg.rollout.vllm, cfg.distributed
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
    _check_choice("distributed.backend", dist.backend)
    if dist.ranks_per_agent < 0:
        raise ConfigError(f"distributed.ranks_per_agent: must be >= 0 (0: world size / "
                          f"agents), got {dist.ranks_per_agent}")
    if dist.ranks_per_agent and v.tensor_parallel_size > 1 \
            and dist.ranks_per_agent % v.tensor_parallel_size:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size={v.tensor_parallel_size} must "
                          f"divide distributed.ranks_per_agent={dist.ranks_per_agent}")
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


def _validate_monitor(m: "MonitorConfig") -> None:
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
    for i, name in enumerate(m.stop_on):
        if name not in MONITOR_SIGNALS:
            raise ConfigError(f"monitor.stop_on.{i}: {name!r} is not one of: "
                              + ", ".join(MONITOR_SIGNALS))
    if m.stop_on and not m.enable:
        raise ConfigError("monitor.stop_on needs monitor.enable=true (a disabled monitor "
                          "cannot stop the run)")


def self_play_roles(cfg: "Config") -> tuple[int, int]:
    """(challenger index, solver index) from ``self_play.challenger`` / ``self_play.solver``,
    each an agent name or an index into ``agents``."""
    names = [a.name for a in cfg.agents]
    out = []
    for key in ("challenger", "solver"):
        value = str(getattr(cfg.self_play, key))
        if value in names:
            out.append(names.index(value))
        elif value.isdigit() and int(value) < len(names):
            out.append(int(value))
        else:
            raise ConfigError(f"self_play.{key}: {value!r} names no agent; give an agent name "
                              f"({', '.join(names)}) or an index 0..{len(names) - 1}")
    if out[0] == out[1]:
        raise ConfigError(f"self_play.challenger and self_play.solver are both agent "
                          f"{names[out[0]]!r}; the two roles need two agents (two copies of one "
                          "model are fine: give both agents the same path)")
    return out[0], out[1]


def _validate_self_play(cfg: "Config") -> None:
    """``method: self_play``: its own section and the roles, then every check that does not
    depend on a reward source, run as for a single-source run. There is no single reward
    source (challenger: the solver's uncertainty; solver: its majority label and gold
    anchors), so ``reward.source`` must stay unset; ``reward.grader``, ``tie`` and
    ``answer_style`` apply to the solver's answers."""
    if cfg.reward.source is not None:
        raise ConfigError(f"reward.source={cfg.reward.source!r}: method=self_play has no single "
                          "reward source (the challenger is rewarded by the solver's "
                          "uncertainty, the solver by its majority answers and gold anchors); "
                          "leave reward.source unset")
    if len(cfg.agents) != 2:
        raise ConfigError(f"agents: method=self_play needs exactly 2 agents (a challenger and a "
                          f"solver), got {len(cfg.agents)}")
    if cfg.arms:
        raise ConfigError("arms: method=self_play runs alone; set arms=[]")
    if cfg.data.decouple:
        raise ConfigError("data.decouple: not used by method=self_play; set it false")
    if cfg.rollout.dynamic_sampling:
        raise ConfigError("rollout.dynamic_sampling: not used by method=self_play (its solver "
                          "keeps the questions in self_play.band); set it false")
    if cfg.eval.every:
        raise ConfigError("eval.every: held-out evaluation is not wired into method=self_play "
                          "(selfplay/solver/anchor_acc tracks the solver); set eval.every=0")
    sp = cfg.self_play
    _check_choice("self_play.band_rule", sp.band_rule)
    _check_choice("self_play.images", sp.images)
    if not 0 <= sp.anchors_per_prompt <= 5:
        raise ConfigError(f"self_play.anchors_per_prompt: k must be in 0..5, got "
                          f"{sp.anchors_per_prompt}")
    if sp.anchor_pool_size < max(1, sp.anchors_per_prompt):
        raise ConfigError(f"self_play.anchor_pool_size: must be >= 1 and >= "
                          f"self_play.anchors_per_prompt, got {sp.anchor_pool_size}")
    if sp.solver_samples < (2 if cfg.grpo.adv_scale == "group" else 1):
        raise ConfigError(f"self_play.solver_samples: m={sp.solver_samples}; the m answers are "
                          "the solver's GRPO group: m >= 2 with grpo.adv_scale=group")
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
    if cfg.grpo.kl_in_reward and cfg.grpo.kl_coef > 0:
        raise ConfigError("grpo.kl_in_reward: the reward-side KL penalty is applied by the "
                          "cohort recipe's rewards, not by method: self_play's; set it false "
                          "(the KL then goes in the loss, grpo.kl_kind k2 / k3 / low_var_kl)")
    # The rest (agents, rollout, grpo, optim, data...) as for a single-source run; the
    # stand-in method's reward source is set on a copy of the reward section only.
    validate(dataclasses.replace(cfg, method="ttrl", reward=dataclasses.replace(cfg.reward)))
    self_play_roles(cfg)


def _validate_log(log) -> None:
    """The trackers' settings (whether their packages are installed is checked at the
    start of a run, ``monitoring/trackers.py``: a config is readable without them)."""
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


def _check_choice(pattern: str, value: str, key: str | None = None) -> None:
    allowed = CHOICES[pattern]
    if value not in allowed:
        raise ConfigError(f"{key or pattern}: {value!r} is not one of: {', '.join(allowed)}")
