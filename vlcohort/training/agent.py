"""One member of the cohort: policy, reference, optimizer, schedule, adapter, engine; and
the one function that updates it from a step's rollouts and advantages.

Agents share no parameters, optimizer state or gradients (DESIGN.md): only extracted
answers cross between them, in ``train.py``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from processors import Adapter, AdapterOptions, ImageLimits, RenderedPrompt, adapter_for

from vlcohort.training import grpo
from vlcohort.config import Config, GRPOConfig, ModelConfig
from vlcohort.rollout import make_engine
from vlcohort.rollout.base import Rollouts
from vlcohort.training.schedule import lr_multiplier


@dataclass
class Agent:
    name: str
    adapter: Adapter
    model: Any  # a transformers PreTrainedModel (or a PEFT wrapper of one)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    engine: Any = None
    ref_model: Any = None  # only when kl_coef > 0 and no LoRA
    uses_lora: bool = False
    autocast_bf16: bool = False
    stats: dict = field(default_factory=dict)
    ds_engine: Any = None  # DeepSpeed engine over PolicyLogprobs(model), in an agent group
    layout: Any = None  # distributed.Layout when trained in an agent group

    def logprobs(self, batch, temperature: float) -> torch.Tensor:
        """[n, C] completion log-probs of the policy, through DeepSpeed when it wraps the
        policy (ZeRO-3 needs its forward to go through the engine to accumulate
        gradients over micro-batches; measured: calling the module directly dropped the
        non-boundary micro-batches' gradients with deepspeed 0.19.8)."""
        if self.ds_engine is not None:
            return self.ds_engine(batch, temperature)
        return self.adapter.completion_logprobs(self.model, batch, temperature)

    def generation_context(self):
        """ZeRO-3 partitions the parameters; generation gathers them once for the whole
        ``generate`` call (instead of per layer and per token)."""
        if self.ds_engine is not None and _zero_stage(self.ds_engine) == 3:
            import deepspeed

            return deepspeed.zero.GatheredParameters(list(self.model.parameters()))
        return contextlib.nullcontext()

    @property
    def family(self) -> str:
        return self.adapter.family

    def reference_context(self):
        """Context in which ``self.ref_forward_model`` gives reference log-probs."""
        if self.uses_lora:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    @property
    def ref_forward_model(self):
        return self.model if self.uses_lora else self.ref_model

    def autocast(self):
        if not self.autocast_bf16:
            return contextlib.nullcontext()
        device = next(self.model.parameters()).device.type
        return torch.autocast(device_type=device, dtype=torch.bfloat16)


class PolicyLogprobs(torch.nn.Module):
    """The policy's trainable computation as one module, so DeepSpeed's engine can own the
    forward: ``forward(batch, temperature)`` = the adapter's chunked completion log-probs."""

    def __init__(self, adapter: Adapter, model):
        super().__init__()
        self.adapter = adapter
        self.policy = model

    def forward(self, batch, temperature: float) -> torch.Tensor:
        return self.adapter.completion_logprobs(self.policy, batch, temperature)


def _zero_stage(engine) -> int:
    return int(engine.zero_optimization_stage())


def adapter_options(mc: ModelConfig) -> AdapterOptions:
    """The ``agents.N.*`` settings, as the adapter takes them."""
    return AdapterOptions(
        dtype=mc.dtype, attn_implementation=mc.attn_implementation,
        trust_remote_code=mc.trust_remote_code, min_pixels=mc.min_pixels,
        max_pixels=mc.max_pixels, max_tiles=mc.max_tiles, pan_and_scan=mc.pan_and_scan,
        image_limits=ImageLimits(max_source_pixels=mc.max_source_pixels,
                                 min_side=mc.min_image_side),
        logprob_chunk_tokens=mc.logprob_chunk_tokens,
    )


def build_agent(mc: ModelConfig, cfg: Config | None = None, weights_from: str | None = None,
                layout=None) -> Agent:
    """Adapter + model (+ optimizer, schedule, reference, engine when ``cfg`` is given).

    ``weights_from`` loads the policy weights from a checkpoint folder instead of
    ``mc.path`` (resume); the processor always comes from ``mc.path``. With a distributed
    ``layout`` the policy and optimizer are wrapped by DeepSpeed ZeRO over the agent's
    rank group (``distributed.py``).
    """
    adapter = adapter_for(mc.path, adapter_options(mc))
    if weights_from is not None and mc.lora_rank == 0:
        model = _load_from(adapter, weights_from)
    else:
        model = adapter.load_model()
    model = model.to(resolve_device(mc.device, f"agents.N.device (agent {mc.name})"))
    agent = Agent(name=mc.name, adapter=adapter, model=model, autocast_bf16=mc.autocast_bf16)
    if cfg is None:
        return agent
    if mc.lora_rank > 0:
        agent.model = _wrap_lora(model, mc, weights_from)
        agent.uses_lora = True
    elif cfg.grpo.kl_coef > 0:
        agent.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
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
    return agent


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


# --------------------------------------------------------------------------- the update


def micro_batches(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                  size: int, device: torch.device | None = None) -> list[tuple[slice, Any]]:
    """Training batches of ``size`` sequences each, encoded once and reused by every pass.

    Row n of the rollouts belongs to prompt n // G. Each micro-batch re-encodes its own
    prompts (family-agnostic: no per-image tensor slicing); log-probs do not depend on
    padding (tested per family), so this equals slicing one big batch.
    """
    G = rollouts.group_size
    N = len(rollouts.completions)
    out = []
    for start in range(0, N, size):
        rows = slice(start, min(N, start + size))
        prompts = agent.adapter.encode_prompts([rendered[n // G] for n in range(rows.start, rows.stop)])
        batch = agent.adapter.encode_training(prompts, rollouts.completions[rows])
        out.append((rows, batch.to(device) if device is not None else batch))
    return out


def _pad_to(t: torch.Tensor, C: int) -> torch.Tensor:
    return t if t.shape[1] == C else torch.nn.functional.pad(t, (0, C - t.shape[1]))


@dataclass
class TokenStats:
    """One no-grad pass over an agent's rollouts before its update (intrinsic rewards).

    ``logprobs`` are the policy's log-probs of the sampled tokens under logits /
    temperature, i.e. exactly the update's "old" log-probs; ``batches`` are the encoded
    micro-batches, reused by the update."""

    logprobs: torch.Tensor  # [N, C]
    self_certainty: torch.Tensor  # [N, C] KL(U || p) per completion token
    entropy: torch.Tensor  # [N, C] H(p) per completion token
    mask: torch.Tensor  # [N, C] 1 on real completion tokens
    batches: list

    def token_mean(self, name: str) -> float:
        """Mean of a per-token statistic over all real completion tokens."""
        return float((getattr(self, name) * self.mask).sum() / self.mask.sum().clamp(min=1.0))


def token_stats(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                g: GRPOConfig, temperature: float, temperature_scaled: bool) -> TokenStats:
    """Per-token log-probs, self-certainty and entropy of the agent's completions under its
    current policy, in one chunked no-grad pass per micro-batch (the adapter's
    ``completion_token_stats``). ``temperature_scaled``: statistics of softmax(logits /
    temperature) instead of softmax(logits)."""
    N, C = len(rollouts.completions), rollouts.logprobs.shape[1]
    mbs = micro_batches(agent, rendered, rollouts, g.micro_batch_seqs,
                        next(agent.model.parameters()).device)
    logp, sc, ent, mask = (torch.zeros(N, C) for _ in range(4))  # [N, C] each
    with torch.no_grad(), agent.autocast(), agent.generation_context():  # ZeRO-3: gathered
        for rows, tb in mbs:
            st = agent.adapter.completion_token_stats(agent.model, tb, temperature,
                                                      stats_temperature_scaled=temperature_scaled)
            logp[rows] = _pad_to(st.logprobs, C)
            sc[rows] = _pad_to(st.self_certainty, C)
            ent[rows] = _pad_to(st.entropy, C)
            mask[rows] = _pad_to(tb.completion_mask.float(), C)
    return TokenStats(logprobs=logp, self_certainty=sc, entropy=ent, mask=mask, batches=mbs)


def update_agent(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 length_norm: int, old_logprobs: torch.Tensor | None = None,
                 batches: list | None = None) -> dict[str, float]:
    """One optimizer step per PPO epoch on this agent's rollouts.

    ``advantages`` [N] per sequence. The "old" log-probs are the policy's before this
    step's update. With ``ppo_epochs == 1`` the policy has not moved when each micro-batch
    is first evaluated, so old = logp.detach() of that very forward pass (one model pass
    saved, as TRL does); with more epochs a no-grad pass computes them first, unless the
    caller already made one before the update (an intrinsic reward's :func:`token_stats`)
    and passes its log-probs as ``old_logprobs`` [N, C] (and its ``batches``): the same
    numbers, no extra pass. The IS weights compare old with the sampler's log-probs.
    Micro-batch losses use the full batch's normaliser, so their gradients add up to the
    full-batch gradient. A non-finite loss skips the optimizer step.
    """
    model = agent.model
    engine = agent.ds_engine  # None in a single process
    device = next(model.parameters()).device  # rollouts come on the CPU; the update runs here
    N, C = len(rollouts.completions), rollouts.logprobs.shape[1]
    rollout_logp = rollouts.logprobs.to(device)  # [N, C]
    advantages = advantages.to(device)  # [N]
    mbs = batches if batches is not None else micro_batches(agent, rendered, rollouts,
                                                            g.micro_batch_seqs, device)
    comp_mask = torch.zeros(N, C, device=device)  # [N, C] real completion tokens
    for rows, tb in mbs:
        comp_mask[rows] = _pad_to(tb.completion_mask.float(), C)
    mask = comp_mask * torch.isfinite(rollout_logp).float()  # NaN/inf rollout tokens out
    on_policy = g.ppo_epochs == 1 and old_logprobs is None
    old = None if old_logprobs is None else old_logprobs.to(device)
    ref = None
    with torch.no_grad(), agent.autocast():
        if not on_policy and old is None:
            old = torch.cat([_pad_to(agent.logprobs(tb, temperature), C)
                             for _, tb in mbs])  # [N, C]
        if g.kl_coef > 0:
            with agent.reference_context():
                ref = torch.cat([_pad_to(agent.adapter.completion_logprobs(
                    agent.ref_forward_model, tb, temperature), C) for _, tb in mbs])
    denom = grpo.aggregate_denominator(mask, g.loss_agg)
    if engine is not None and agent.layout.ranks_per_agent > 1:
        # DeepSpeed averages gradients over the group's R ranks: normalise by the group's
        # total tokens / R so the averaged gradient is the full group batch's (grpo.py)
        R = agent.layout.ranks_per_agent
        denom = torch.tensor(agent.layout.group_sum(float(denom), "the loss normaliser") / R)
    model.train()
    totals: dict[str, float] = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0}
    is_parts: list[tuple[dict, float]] = []
    skipped = 0
    for epoch in range(g.ppo_epochs):
        agent.optimizer.zero_grad(set_to_none=True)
        bad = False
        norm = None
        for k, (rows, tb) in enumerate(mbs):
            with agent.autocast():
                logp = _pad_to(agent.logprobs(tb, temperature), C)
            old_mb = logp.detach() if on_policy else old[rows]  # [n, C]
            weights = None
            if g.is_mode != "off":
                weights, st_is = grpo.importance_weights(  # masks and counts NaN/inf itself
                    old_mb, rollout_logp[rows], comp_mask[rows], level=g.is_level,
                    mode=g.is_mode, cap=g.is_cap, low=g.is_low, high=g.is_high)
                if epoch == 0:
                    is_parts.append((st_is, float(comp_mask[rows].sum())))
            loss, st = grpo.policy_loss(
                logp, old_mb, advantages[rows], mask[rows], clip_low=g.clip_low,
                clip_high=g.clip_high, is_weights=weights,
                ref_logp=None if ref is None else ref[rows], kl_coef=g.kl_coef,
                kl_kind=g.kl_kind, agg=g.loss_agg, denom=denom, length_norm=length_norm)
            finite = bool(torch.isfinite(loss))
            if engine is not None:  # every rank of the group takes the same branch
                finite = not agent.layout.group_any(not finite, "a non-finite loss")
            if not finite:
                bad = True
                break
            if engine is None:
                loss.backward()
            else:
                last = k == len(mbs) - 1
                engine.set_gradient_accumulation_boundary(last)
                engine.backward(loss, scale_wrt_gas=False)
                if last and _zero_stage(engine) == 0:  # stage 0 does not report the norm
                    norm = _grad_norm([p for p in model.parameters() if p.requires_grad])
                engine.step()  # steps the optimizer at the boundary only
            share = (rows.stop - rows.start) / N
            totals["loss"] += float(loss.detach())
            totals["clip_frac"] += st.get("clip_frac", 0.0) * share / g.ppo_epochs
            totals["kl"] += st.get("kl", 0.0) * share / g.ppo_epochs
        if bad:
            if engine is not None:
                engine.zero_grad()
            agent.optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        if engine is None:
            params = [p for p in model.parameters() if p.requires_grad]
            max_norm = g.max_grad_norm if g.max_grad_norm > 0 else math.inf
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            agent.optimizer.step()
        elif norm is None:
            norm = engine.get_global_grad_norm()
        totals["grad_norm"] += float(norm if norm is not None else float("nan")) / g.ppo_epochs
    agent.optimizer.zero_grad(set_to_none=True)
    model.eval()
    agent.engine.update_weights(model)
    out = {"loss": totals["loss"] / g.ppo_epochs, "clip_frac": totals["clip_frac"],
           "grad_norm": totals["grad_norm"], "skipped_updates": skipped,
           "lr": agent.optimizer.param_groups[0]["lr"]}
    if g.kl_coef > 0:
        out["kl"] = totals["kl"]
    out.update({f"is/{k.split('/', 1)[-1]}": v for k, v in merge_is_stats(is_parts).items()})
    return out


def _grad_norm(params) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def merge_is_stats(parts: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Combine per-micro-batch IS statistics: token-weighted means and shares, global
    min / max, summed counts (``grpo.importance_weights`` stat names)."""
    if not parts:
        return {}
    total = sum(n for _, n in parts) or 1.0
    out: dict[str, float] = {}
    for key in parts[0][0]:
        values = [(st[key], n) for st, n in parts]
        if key.endswith("/min"):
            out[key] = min(v for v, n in values if n > 0) if any(n > 0 for _, n in values) else 0.0
        elif key.endswith("/max"):
            out[key] = max(v for v, _ in values)
        elif key.endswith("nonfinite_tokens"):
            out[key] = sum(v for v, _ in values)
        else:
            out[key] = sum(v * n for v, n in values) / total
    return out
