"""One member of the cohort: policy, reference, optimizer, schedule, adapter, engine, and
how it is built (LoRA, DeepSpeed ZeRO in an agent group, the device). Its update from a
step's rollouts and advantages is ``update.py``.

Agents share no parameters, optimizer state or gradients (``docs/design.md``): only
extracted answers cross between them, in ``vlcohort/recipes/step.py``.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from vlcohort.config_schema import Config, ModelConfig, agent_reward_source
from vlcohort.processors import Adapter, AdapterOptions, adapter_for
from vlcohort.rollout.engines import make_engine
from vlcohort.training.logprobs import completion_logprobs, completion_logprobs_and_entropy
from vlcohort.training.schedule import lr_multiplier


@dataclass
class Agent:
    name: str
    adapter: Adapter
    model: Any  # a transformers PreTrainedModel (or a PEFT wrapper of one)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    engine: Any = None
    ref_model: Any = None  # only when kl_coef > 0 and no LoRA: the run's starting weights
    uses_lora: bool = False
    autocast_bf16: bool = False
    stats: dict = field(default_factory=dict)
    ds_engine: Any = None  # DeepSpeed engine over PolicyLogprobs(model), in an agent group
    layout: Any = None  # distributed.Layout when trained in an agent group
    source_state: Any = None  # its reward source's reward_sources.AgentState (the EMA teacher)
    kl_reference: str = "start"  # grpo.kl_reference: start (ref_model / LoRA base) | teacher

    def logprobs(self, batch, temperature: float) -> torch.Tensor:
        """[n, T] completion log-probs of the policy, through DeepSpeed when it wraps the
        policy (ZeRO-3 needs its forward to go through the engine to accumulate
        gradients over micro-batches; measured: calling the module directly dropped the
        non-boundary micro-batches' gradients with deepspeed 0.19.8)."""
        if self.ds_engine is not None:
            return self.ds_engine(batch, temperature)
        return completion_logprobs(self.adapter, self.model, batch, temperature)

    def logprobs_and_entropy(self, batch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, T] log-probs (with gradient) and token entropies (without) of the policy from
        one forward (``logprobs.completion_logprobs_and_entropy``), through DeepSpeed as
        :meth:`logprobs`."""
        if self.ds_engine is not None:
            return self.ds_engine(batch, temperature, with_entropy=True)
        return completion_logprobs_and_entropy(self.adapter, self.model, batch, temperature)

    def generation_context(self):
        """ZeRO-3 partitions the parameters; generation gathers them once for the whole
        ``generate`` call (instead of per layer and per token)."""
        if self.ds_engine is not None and zero_stage(self.ds_engine) == 3:
            import deepspeed

            return deepspeed.zero.GatheredParameters(list(self.model.parameters()))
        return contextlib.nullcontext()

    @property
    def family(self) -> str:
        return self.adapter.family

    def reference_context(self):
        """Context in which ``self.ref_forward_model`` gives reference log-probs: the LoRA
        base (adapters disabled), or under ``grpo.kl_reference=teacher`` the policy module
        with its EMA teacher's weights swapped in (``ema.EMATeacher.swapped_in``; ZeRO-3:
        each rank's partition in, then gathered, as the teacher's generation) and the
        policy's restored bit for bit after."""
        if self.kl_reference == "teacher":
            stack = contextlib.ExitStack()
            stack.enter_context(self.teacher().swapped_in())
            stack.enter_context(self.generation_context())
            return stack
        if self.uses_lora:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    @property
    def ref_forward_model(self):
        return self.model if self.uses_lora or self.kl_reference == "teacher" else self.ref_model

    def teacher(self):
        """The agent's EMA teacher (``ema.EMATeacher``), kept by its reward source's state
        (``co_rewarding.TeacherState``); a ``ConfigError`` when its source keeps none."""
        from vlcohort.training.ema import EMATeacher
        from vlcohort.typed_yaml import ConfigError

        teacher = getattr(self.source_state, "teacher", None)
        if not isinstance(teacher, EMATeacher):
            raise ConfigError(f"grpo.kl_reference=teacher: agent {self.name!r} keeps no EMA "
                              "teacher (its reward source is not ema_teacher_vote, method "
                              "co_rewarding_ii); set grpo.kl_reference=start")
        return teacher

    def autocast(self):
        if not self.autocast_bf16:
            return contextlib.nullcontext()
        device = next(self.model.parameters()).device.type
        return torch.autocast(device_type=device, dtype=torch.bfloat16)


class PolicyLogprobs(torch.nn.Module):
    """The policy's trainable computation as one module, so DeepSpeed's engine can own the
    forward: ``forward(batch, temperature)`` = the chunked completion log-probs
    (``logprobs.completion_logprobs``) of the policy through its adapter;
    ``with_entropy=True``: (log-probs, token entropies), as
    ``logprobs.completion_logprobs_and_entropy``."""

    def __init__(self, adapter: Adapter, model):
        super().__init__()
        self.adapter = adapter
        self.policy = model

    def forward(self, batch, temperature: float, with_entropy: bool = False):
        if with_entropy:
            return completion_logprobs_and_entropy(self.adapter, self.policy, batch, temperature)
        return completion_logprobs(self.adapter, self.policy, batch, temperature)


def zero_stage(engine) -> int:
    """The ZeRO stage (0-3) of a DeepSpeed engine."""
    return int(engine.zero_optimization_stage())


def adapter_options(mc: ModelConfig, cfg: Config | None = None) -> AdapterOptions:
    """The ``agents.N.*`` settings the adapter takes: ``ModelConfig`` inherits them from
    ``AdapterOptions``, so this is their plain copy, not a field-by-field mirror; an agent
    without its own ``prompt_format`` takes the run's ``prompt.format``."""
    options = AdapterOptions.of(mc)
    if not options.prompt_format and cfg is not None:
        options.prompt_format = cfg.prompt.format
    return options


def checked_adapter(mc: ModelConfig, cfg: Config | None = None) -> Adapter:
    """The agent's adapter; a prompt format its checkpoint cannot take (``chat`` for a
    base model without a template) is a config error naming the key, not a traceback."""
    from vlcohort.processors.prompt_formats import PromptFormatError
    from vlcohort.typed_yaml import ConfigError

    try:
        return adapter_for(mc.path, adapter_options(mc, cfg))
    except PromptFormatError as e:
        where = "prompt.format"
        if cfg is not None and mc.prompt_format:
            where = f"agents.{[a.name for a in cfg.agents].index(mc.name)}.prompt_format"
        raise ConfigError(f"{where}: {e}") from None


def build_agent(mc: ModelConfig, cfg: Config | None = None, weights_from: str | None = None,
                layout=None) -> Agent:
    """Adapter + model (+ optimizer, schedule, reference, engine when ``cfg`` is given).

    ``weights_from`` loads the policy weights from a checkpoint folder instead of
    ``mc.path`` (resume); the processor always comes from ``mc.path``. With a distributed
    ``layout`` the policy and optimizer are wrapped by DeepSpeed ZeRO over the agent's
    rank group (``distributed.py``).
    """
    adapter = checked_adapter(mc, cfg)
    if weights_from is not None and mc.lora_rank == 0:
        model = _load_from(adapter, weights_from)
    else:
        model = adapter.load_model()
    device = resolve_device(mc.device, f"agents.N.device (agent {mc.name})")
    model = model.to(device)
    agent = Agent(name=mc.name, adapter=adapter, model=model, autocast_bf16=mc.autocast_bf16)
    if cfg is None:
        return agent
    if mc.lora_rank > 0:
        agent.model = _wrap_lora(model, mc, weights_from)
        agent.uses_lora = True
    elif cfg.grpo.kl_coef > 0 and cfg.grpo.kl_reference != "teacher":  # teacher: no copy
        agent.ref_model = reference_model(adapter, model, weights_from, device)
    if cfg.grpo.disable_dropout:
        for m in (agent.model, agent.ref_model):
            if m is not None:
                disable_dropout(m)
    if mc.gradient_checkpointing:
        enable = (getattr(agent.model, "activation_checkpointing_enable", None)  # transformers >= 5
                  or agent.model.gradient_checkpointing_enable)
        enable()
    params = [p for p in agent.model.parameters() if p.requires_grad]
    lr = mc.lr if mc.lr is not None else cfg.optim.lr
    agent.optimizer = _adamw(params, lr=lr, betas=tuple(cfg.optim.betas),
                             weight_decay=cfg.optim.weight_decay)
    if layout is not None and layout.distributed:
        _wrap_deepspeed(agent, mc, cfg, layout)
    total = max(1, cfg.run.steps)
    agent.scheduler = torch.optim.lr_scheduler.LambdaLR(
        agent.optimizer,
        lambda s: lr_multiplier(s, total, cfg.optim.warmup_ratio, cfg.optim.min_lr_ratio,
                                cfg.optim.schedule),
    )
    agent.engine = make_engine(cfg.rollout.engine, adapter, agent.model,
                               vllm=cfg.rollout.vllm, seed=cfg.run.seed)
    name = agent_reward_source(cfg, cfg.agents.index(mc)) if mc in cfg.agents else None
    if name is not None:  # after DeepSpeed: under ZeRO-3 a state keeps this rank's partitions
        from vlcohort.training.reward_sources import source

        agent.source_state = source(name).new_state(agent, cfg)
    agent.kl_reference = cfg.grpo.kl_reference
    if agent.kl_reference == "teacher":
        agent.teacher()  # at setup: an agent without an EMA teacher is a config error
    return agent


def reference_model(adapter: Adapter, policy, weights_from: str | None, device: torch.device):
    """The frozen KL reference of a full fine-tune: the run's STARTING weights
    (``agents.N.path``), whether the run starts or resumes.

    A fresh run copies the policy as it was just loaded from that path (no second load);
    a resumed run's policy holds the checkpoint's trained weights, so the reference is
    loaded from the path again (a copy of the resumed policy would silently move the KL
    anchor to the last checkpoint). A LoRA agent needs none: its
    reference is the base model with the adapters disabled (``reference_context``), and
    the base weights, loaded from the path, never train.
    """
    ref = copy.deepcopy(policy) if weights_from is None else adapter.load_model().to(device)
    return ref.eval().requires_grad_(False)


#: Float attributes holding a dropout probability that HF modules apply functionally
#: (``nn.functional.dropout(x, p=self.attention_dropout, training=self.training)``, sdpa's
#: ``dropout_p``, ``nn.MultiheadAttention.dropout``), not through an ``nn.Dropout`` module.
DROPOUT_ATTRIBUTES = ("dropout", "attention_dropout", "hidden_dropout", "activation_dropout",
                      "attn_dropout", "resid_dropout", "embd_dropout", "proj_dropout")


def disable_dropout(model) -> int:
    """Every dropout of ``model`` to probability 0, in place; returns how many were set.

    TRL's ``disable_dropout`` (default on in ``GRPOConfig``) sets ``nn.Dropout.p = 0``.
    That misses the attention dropout of transformers' attention classes, a float
    attribute applied functionally in train mode (``DROPOUT_ATTRIBUTES``), so both are set
    here. The model's config is left as it is: a saved checkpoint keeps its dropout.
    Why: the update's forward runs in train mode while generation and the old / reference
    log-prob passes run in eval mode; with dropout the first epoch's ratio would not be 1.
    """
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
            n += 1
        for name in DROPOUT_ATTRIBUTES:
            value = module.__dict__.get(name)
            if isinstance(value, float):
                setattr(module, name, 0.0)
                n += 1
    return n


def _wrap_deepspeed(agent: Agent, mc: ModelConfig, cfg: Config, layout) -> None:
    """DeepSpeed ZeRO over the agent's group: the engine owns PolicyLogprobs(model) and the
    optimizer (our AdamW, partitioned by ZeRO); ``agent.model`` stays the HF module (saved
    with ``save_pretrained``, used by the rollout engine)."""
    try:
        import deepspeed
    except ImportError as e:
        raise RuntimeError("a multi-process launch trains each agent group with DeepSpeed: "
                           "pip install 'vlcohort[distributed]' (or run in one process, "
                           "without torchrun)") from e

    from vlcohort.training.distributed import deepspeed_config

    agent.model.to(layout.device)
    if agent.ref_model is not None:
        agent.ref_model.to(layout.device)
    ds_cfg = deepspeed_config(cfg, layout, cfg.grpo.micro_batch_seqs, cfg.grpo.max_grad_norm,
                              bf16=mc.dtype == "bfloat16")
    engine, _, _, _ = deepspeed.initialize(
        model=PolicyLogprobs(agent.adapter, agent.model), optimizer=agent.optimizer,
        config=ds_cfg)  # the default process group is the agent's group (distributed.py)
    # agent.optimizer stays our AdamW: ZeRO wraps it and steps it on its partitions, and
    # its param_groups (where the LR schedule writes) are the ones ZeRO steps with
    agent.ds_engine = engine
    agent.layout = layout


def resolve_device(spec: str, key: str = "agents.N.device") -> torch.device:
    """``cpu`` | ``cuda`` (the current GPU) | ``cuda:N``; a GPU asked for on a machine
    without one is an error naming the key, not a silent fall-back to the CPU."""
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"{key}: {spec!r} asks for a GPU but torch sees none here; "
                               "use cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"{key}: {spec!r}, but torch sees {torch.cuda.device_count()} "
                               "GPU(s)")
    return device


def _adamw(params, **kwargs) -> torch.optim.Optimizer:
    """Fused AdamW where torch has it for these tensors (one kernel for all parameters:
    ~3x faster optimizer steps on CPU), else the default implementation."""
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, **kwargs)


def _load_from(adapter: Adapter, folder: str):
    original = adapter.path
    try:
        adapter.path = folder
        return adapter.load_model()
    finally:
        adapter.path = original


def _wrap_lora(model, mc: ModelConfig, weights_from: str | None):
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError as e:  # pragma: no cover - peft is a declared dependency
        raise RuntimeError("agents.N.lora_rank > 0 needs peft: pip install 'vlcohort[lora]'") from e
    if weights_from is not None:
        return PeftModel.from_pretrained(model, weights_from, is_trainable=True)
    targets = mc.lora_targets if mc.lora_targets == "all-linear" else [
        t.strip() for t in mc.lora_targets.split(",") if t.strip()]
    return get_peft_model(model, LoraConfig(r=mc.lora_rank, lora_alpha=mc.lora_alpha,
                                            target_modules=targets, lora_dropout=0.0))
