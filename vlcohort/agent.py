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

from . import grpo
from .config import Config, GRPOConfig, ModelConfig
from .rollout import make_engine
from .rollout.base import Rollouts
from .schedule import lr_multiplier


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


def build_agent(mc: ModelConfig, cfg: Config | None = None, weights_from: str | None = None) -> Agent:
    """Adapter + model (+ optimizer, schedule, reference, engine when ``cfg`` is given).

    ``weights_from`` loads the policy weights from a checkpoint folder instead of
    ``mc.path`` (resume); the processor always comes from ``mc.path``.
    """
    adapter = adapter_for(mc.path, adapter_options(mc))
    if weights_from is not None and mc.lora_rank == 0:
        model = _load_from(adapter, weights_from)
    else:
        model = adapter.load_model()
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
    total = max(1, cfg.run.steps)
    agent.scheduler = torch.optim.lr_scheduler.LambdaLR(
        agent.optimizer,
        lambda s: lr_multiplier(s, total, cfg.optim.warmup_ratio, cfg.optim.min_lr_ratio,
                                cfg.optim.schedule),
    )
    agent.engine = make_engine(cfg.rollout.engine, adapter, agent.model,
                               vllm=cfg.rollout.vllm, seed=cfg.run.seed)
    return agent


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
                  size: int) -> list[tuple[slice, Any]]:
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
        out.append((rows, agent.adapter.encode_training(prompts, rollouts.completions[rows])))
    return out


def _pad_to(t: torch.Tensor, C: int) -> torch.Tensor:
    return t if t.shape[1] == C else torch.nn.functional.pad(t, (0, C - t.shape[1]))


def update_agent(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 length_norm: int) -> dict[str, float]:
    """One optimizer step per PPO epoch on this agent's rollouts.

    ``advantages`` [N] per sequence. The "old" log-probs are the policy's before this
    step's update. With ``ppo_epochs == 1`` the policy has not moved when each micro-batch
    is first evaluated, so old = logp.detach() of that very forward pass (one model pass
    saved, as TRL does); with more epochs a no-grad pass computes them first. The IS
    weights compare old with the sampler's log-probs. Micro-batch losses use the full
    batch's normaliser, so their gradients add up to the full-batch gradient. A
    non-finite loss skips the optimizer step.
    """
    model = agent.model
    N, C = len(rollouts.completions), rollouts.logprobs.shape[1]
    mbs = micro_batches(agent, rendered, rollouts, g.micro_batch_seqs)
    comp_mask = torch.zeros(N, C)  # [N, C] real completion tokens
    for rows, tb in mbs:
        comp_mask[rows] = _pad_to(tb.completion_mask.float(), C)
    mask = comp_mask * torch.isfinite(rollouts.logprobs).float()  # NaN/inf rollout tokens out
    on_policy = g.ppo_epochs == 1
    old = ref = None
    with torch.no_grad(), agent.autocast():
        if not on_policy:
            old = torch.cat([_pad_to(agent.adapter.completion_logprobs(model, tb, temperature), C)
                             for _, tb in mbs])  # [N, C]
        if g.kl_coef > 0:
            with agent.reference_context():
                ref = torch.cat([_pad_to(agent.adapter.completion_logprobs(
                    agent.ref_forward_model, tb, temperature), C) for _, tb in mbs])
    denom = grpo.aggregate_denominator(mask, g.loss_agg)
    model.train()
    totals: dict[str, float] = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0}
    is_parts: list[tuple[dict, float]] = []
    skipped = 0
    for epoch in range(g.ppo_epochs):
        agent.optimizer.zero_grad(set_to_none=True)
        bad = False
        for rows, tb in mbs:
            with agent.autocast():
                logp = _pad_to(agent.adapter.completion_logprobs(model, tb, temperature), C)
            old_mb = logp.detach() if on_policy else old[rows]  # [n, C]
            weights = None
            if g.is_mode != "off":
                weights, st_is = grpo.importance_weights(  # masks and counts NaN/inf itself
                    old_mb, rollouts.logprobs[rows], comp_mask[rows], level=g.is_level,
                    mode=g.is_mode, cap=g.is_cap, low=g.is_low, high=g.is_high)
                if epoch == 0:
                    is_parts.append((st_is, float(comp_mask[rows].sum())))
            loss, st = grpo.policy_loss(
                logp, old_mb, advantages[rows], mask[rows], clip_low=g.clip_low,
                clip_high=g.clip_high, is_weights=weights,
                ref_logp=None if ref is None else ref[rows], kl_coef=g.kl_coef,
                kl_kind=g.kl_kind, agg=g.loss_agg, denom=denom, length_norm=length_norm)
            if not torch.isfinite(loss):
                bad = True
                break
            loss.backward()
            share = (rows.stop - rows.start) / N
            totals["loss"] += float(loss.detach())
            totals["clip_frac"] += st.get("clip_frac", 0.0) * share / g.ppo_epochs
            totals["kl"] += st.get("kl", 0.0) * share / g.ppo_epochs
        if bad:
            agent.optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        params = [p for p in model.parameters() if p.requires_grad]
        max_norm = g.max_grad_norm if g.max_grad_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        totals["grad_norm"] += float(norm) / g.ppo_epochs
        agent.optimizer.step()
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
