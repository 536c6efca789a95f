"""``vlcohort plan``: whether a cohort fits its GPUs, said before launch.

Per GPU and per agent: the policy's weights, gradients and optimizer states (DeepSpeed
ZeRO 0-3 in agent groups, plain ``torch.optim.AdamW`` in one process), the KL reference,
the vLLM engine (its weights and KV cache within ``rollout.vllm.gpu_memory_utilization``;
asleep during the update where sleep mode applies), the activations of one micro-batch
(with and without gradient checkpointing; under ``grpo.shared_prefix``, where the agent's
family shares its prompts, each distinct prompt of a micro-batch counted once) and the LM
head's float32 logits. Everything is
computed from the checkpoints' ``config.json`` alone: parameter counts come from the real
model class instantiated on the ``meta`` device (no weight is read or allocated), so
``tiny:`` specs, local folders, hub ids in a folder of published config.json copies
(``--configs``; by default a clone's ``bench/published_configs``) and hub ids already in the
hub cache work offline; any other hub id is a one-line error naming the agent and the
download (or the folder) that fixes it.

The maths lives in small pure functions (bytes per parameter per ZeRO stage, activation
bytes per token per layer, KV-cache bytes per token, logits bytes), each saying where its
formula comes from; ``docs/plan.md`` documents the model and its measured error
(``tests/test_plan.py`` checks it against DeepSpeed's own estimators, real parameter
counts and a measured CPU update).

Dimension letters (docs/design.md, rule 5): P parameters, N sequences of a micro-batch,
L tokens per sequence (prompt + completion), T completion tokens, V vocabulary, h hidden
size, I MLP width, R ranks per agent; in a shared-prefix micro-batch (as
``vlcohort/training/shared_prefix.py`` names them) U distinct prompts of P tokens, laid
out in R rows of W tokens, G completions per prompt in the rollouts.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vlcohort.typed_yaml import ConfigError

GIB = 2**30

#: Bytes per element of the dtypes an agent may name (``agents.N.dtype``).
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}

#: vLLM memory that is neither weights nor KV cache: the CUDA context, NCCL / cuBLAS
#: workspaces and CUDA graphs (vLLM counts them as "non-torch" memory in its start-up
#: profile). An assumption, not measured here (CPU CI has no GPU): typical start-up logs
#: of vLLM on H100-class GPUs report 0.5-1.5 GiB.
VLLM_NON_TORCH_BYTES = 1 * GIB

#: vLLM's token budget per engine step on a GPU when ``rollout.vllm.max_num_batched_tokens``
#: is 0 (the offline ``LLM`` class's default with chunked prefill): the profile run's
#: activations scale with it.
VLLM_DEFAULT_BATCHED_TOKENS = 8192

#: LoRA rank the planner tries as a knob for an agent that does not fit.
KNOB_LORA_RANK = 64


# ============================================================================ pure maths


def dtype_bytes(dtype: str, checkpoint_dtype: str = "float32") -> int:
    """Bytes per element of ``dtype`` (``auto``: the checkpoint's own dtype)."""
    name = checkpoint_dtype if dtype == "auto" else dtype
    name = str(name).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ConfigError(f"dtype {dtype!r}: not one of {', '.join(DTYPE_BYTES)} | auto")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class StateBytes:
    """Model-state bytes of one rank (``gpu``: weights, gradients, optimizer states and the
    ZeRO-3 gather buffer) and the host memory DeepSpeed needs on the node."""

    weights: float
    grads: float
    optimizer: float
    gather: float = 0.0
    host: float = 0.0

    @property
    def gpu(self) -> int:
        return int(self.weights + self.grads + self.optimizer + self.gather)


def plain_state_bytes(params: int, trainable: int, weight_bytes: int,
                      trainable_bytes: int | None = None) -> StateBytes:
    """One process, no DeepSpeed (``vlcohort/training/agent.py``'s ``_adamw``):
    ``torch.optim.AdamW`` keeps exp_avg and exp_avg_sq in each parameter's own dtype, and
    the gradient has the parameter's dtype, so a trained parameter costs
    weight + gradient + 2 moments = 4 x its bytes (bf16: 8, float32: 16) and a frozen one
    its weight only. ``trainable_bytes``: the trained parameters' dtype when it differs
    (PEFT keeps LoRA adapters in float32 over a bf16 base)."""
    tb = weight_bytes if trainable_bytes is None else trainable_bytes
    frozen = params - trainable
    return StateBytes(weights=frozen * weight_bytes + trainable * tb, grads=trainable * tb,
                      optimizer=2 * trainable * tb)


def zero_state_bytes(params: int, trainable: int, stage: int, ranks: int, weight_bytes: int,
                     largest_layer: int = 0, offload_optimizer: bool = False,
                     offload_params: bool = False, gpus_per_node: int | None = None,
                     nodes: int = 1) -> StateBytes:
    """DeepSpeed ZeRO model states of one rank of an agent group of ``ranks`` ranks.

    Per trained parameter DeepSpeed holds (ZeRO paper, arXiv 1910.02054, sec. 3, "2 + 2 + K"
    with DeepSpeed's own estimator's K): the 16-bit weight (2), its 16-bit gradient (2), a
    float32 gradient of the partition (4), the float32 master weight (4) and Adam's two
    float32 moments (8): 20 bytes, of which stage s partitions over the R ranks

    - stage 0: nothing (DeepSpeed's bf16 wrapper of a client optimizer keeps the same
      float32 copies, unpartitioned): 2 + 18 per rank (DeepSpeed's ZeRO-2 estimate at R = 1);
    - stage 1: the float32 states (4 + 4 + 8) / R; weights and 16-bit gradients whole;
    - stage 2: the gradients too: 2 + 18 / R, exactly
      ``stage_1_and_2.estimate_zero2_model_states_mem_needs``;
    - stage 3: everything, 18 / R in all (the weight 2, the float32 gradient partition 4,
      into which the 16-bit gradients are reduced bucket by bucket, and the float32 states
      12), plus 4 x the largest module's parameters (the gathered layer): exactly
      ``stage3.estimate_zero3_model_states_mem_needs``.

    With float32 weights (DeepSpeed's bf16 off) there is no master copy and no second
    gradient: 4 + 4 + 8 = 16 bytes, split the same way. Offload (``offload_optimizer``)
    moves the float32 states (and the gradients of stages 1-2) to the host, as DeepSpeed's
    estimators assume; ``offload_params`` (stage 3) the 16-bit weights too. Frozen
    parameters (a LoRA base) cost their weight only, partitioned at stage 3. ``host``:
    DeepSpeed's estimate of the node's CPU memory (its ``additional_buffer_factor`` 1.5;
    ``zero_init`` off at stage 3, as ``vlcohort/training/agent.py`` loads the whole model on
    every rank before wrapping it; without offload the figure is what that loading takes).
    """
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"distributed.zero_stage: {stage} is not 0 | 1 | 2 | 3")
    R = max(1, ranks)
    w = weight_bytes
    mixed = w < 4  # 16-bit weights: float32 master and float32 gradient partition
    g32, master, moments = (4, 4, 8) if mixed else (0, 0, 8)
    per_node = gpus_per_node or R
    factor = 1.5
    if stage == 0:
        offload_optimizer = offload_params = False
    if stage < 3:
        offload_params = False
    if stage == 3:
        gather = 4 * largest_layer
        weights = 0.0 if offload_params else (params * w) / R
        if offload_optimizer:
            grads = optimizer = 0.0
        else:  # reduced bucket by bucket into the float32 partition (4 / R)
            grads, optimizer = trainable * 4 / R, trainable * (master + moments) / R
        if offload_optimizer:
            host = trainable * max(4 * per_node, (18 if offload_params else 16) / nodes) * factor
        else:
            host = params * 4 * per_node * factor
        return StateBytes(weights, grads, optimizer, gather, host)
    weights = float(params * w)
    if offload_optimizer:
        host = trainable * max(4 * per_node * nodes, 16) * factor
        return StateBytes(weights, 0.0, 0.0, 0.0, host)
    host = params * 4 * per_node * factor
    if stage == 0:
        return StateBytes(weights, trainable * (w + g32), trainable * (master + moments), 0.0, host)
    if stage == 1:
        return StateBytes(weights, trainable * w + trainable * g32 / R,
                          trainable * (master + moments) / R, 0.0, host)
    return StateBytes(weights, trainable * (w + g32) / R, trainable * (master + moments) / R,
                      0.0, host)


def layer_activation_bytes_per_token(hidden: int, q_width: int, mlp_width: int,
                                     act_bytes: int, kv_width: int | None = None) -> int:
    """Bytes autograd keeps per token for one pre-norm decoder layer (attention + gated MLP)
    in the backward pass.

    Source: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
    Models" (arXiv 2205.05198), sec. 4.1, eq. 1 (34 s b h + 5 a s^2 b bytes per layer in
    16 bit), redone term by term for the layers transformers builds here:

    - two RMSNorms, as transformers computes them (upcast to float32, normalise, cast back,
      scale): the float32 input (4 h), the cast-back input of the weight's product (e h)
      and the normed output, the next projection's input (e h): 2 (4 + 2 e) h;
    - the attention's inputs: Q after RoPE (e q) and K, V; training batches are padded, so
      transformers' sdpa path gets a mask and repeats K and V to every query head
      (``repeat_kv``): e q each (``kv_width``: the un-repeated width where a kernel takes
      grouped heads directly);
    - the attention output, saved by the fused kernel, and its contiguous copy, the output
      projection's input: 2 e q. No s^2 term: the fused (flash / memory-efficient) kernels
      keep only a log-sum-exp per query head, and there is no dropout (``grpo.disable_dropout``);
    - the gated MLP (SwiGLU / GeGLU): gate output, its activation, up output and their
      product, the down projection's input: 4 e I (Korthikanti's 19 s b h is the 4h
      GELU MLP with a dropout mask).
    """
    e = act_bytes
    kv = q_width if kv_width is None else kv_width
    return 2 * (4 + 2 * e) * hidden + e * (q_width + 2 * kv) + 2 * e * q_width + 4 * e * mlp_width


def activation_bytes(tokens: int, layers: int, per_token_layer: int, hidden: int, act_bytes: int,
                     checkpointing: bool) -> int:
    """Activations of ``tokens`` tokens through ``layers`` layers kept for the backward pass.

    Without checkpointing every layer keeps ``per_token_layer`` bytes per token, plus the
    final norm. With gradient checkpointing (transformers' per-layer checkpoint) only each
    layer's input survives the forward (e h per token and layer: Korthikanti et al., sec.
    4.2, "full activation recomputation", 2 s b h L) and one layer is recomputed at a time
    in the backward pass, whose activations are alive while it runs."""
    final_norm = (4 + 2 * act_bytes) * hidden
    if checkpointing:
        return tokens * (layers * act_bytes * hidden + per_token_layer + final_norm)
    return tokens * (layers * per_token_layer + final_norm)


def kv_cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes_: int,
                             tensor_parallel: int = 1) -> int:
    """One token's keys and values over every layer: 2 x layers x kv_heads x head_dim x bytes
    (the page size per token of vLLM's paged KV cache, full-attention layers), the KV
    heads split over the tensor-parallel ranks (replicated when there are fewer heads than
    ranks). Sliding-window layers are counted at full length: an upper bound."""
    heads = max(1, math.ceil(kv_heads / max(1, tensor_parallel)))
    return 2 * layers * heads * head_dim * dtype_bytes_


def logits_bytes(seqs: int, completion_tokens: int, vocab: int, chunk_tokens: int,
                 head_bytes: int, budget_bytes: int, temperature_scaled: bool = False) -> int:
    """Peak bytes of the LM head's float32 pass over the completion positions, as
    ``vlcohort/training/logprobs.py`` runs it: chunks of ``c`` positions
    (``chunk_positions``), each [N, c, V]. Autograd keeps each chunk's float32
    ``log_softmax`` (4 N c V) until the backward pass, so all T positions' unless 4 N T V
    exceeds ``budget_bytes``, in which case each chunk is recomputed in the backward pass
    and one chunk is kept. The chunk being differentiated holds four float32 [N, c, V]
    buffers at once (its kept log-softmax, that output's gradient, the exp inside the
    log-softmax backward and the logits' gradient): 16 N c V, more than its forward
    (the head's output, its float32 copy and the log-softmax, at most 12 N c V); + 4 N c V
    for the temperature-scaled copy. ``head_bytes`` is the head output's dtype, whose
    16-bit gradient is cast after the float32 buffers are gone. Measured on CPU with a
    65,536-token vocabulary: within 14% above the peak (``tests/test_plan.py``)."""
    from vlcohort.training.logprobs import chunk_positions

    del head_bytes  # the float32 buffers dominate in every dtype
    c = min(chunk_positions(seqs, vocab, chunk_tokens, budget_bytes), completion_tokens)
    recompute = 4 * seqs * completion_tokens * vocab > budget_bytes
    other_chunks = 0 if recompute else 4 * seqs * vocab * (completion_tokens - c)
    return other_chunks + seqs * c * vocab * (16 + (4 if temperature_scaled else 0))


def embedding_grad_bytes(vocab: int, hidden: int, grad_bytes: int, tied: bool, trained: bool) -> int:
    """Transient bytes of the input embedding's backward, at the very end of the backward
    pass, when the activations are mostly freed: a dense [V, h] gradient, accumulated into
    the weight's ``.grad`` (counted with the gradients). With the LM head tying the same
    weight, the head's gradient of that weight is held through the backward and the
    embedding's gradient and their sum are made beside it: 3 V h. Measured on the real
    SmolLM2-135M (tied, V 49,152, h 576, float32): 322 MiB above the gradients against
    3 V h x 4 B = 324 MiB (``tests/real/test_real_plan.py``). Untied: the one dense
    gradient, V h. 0 when the embedding is not trained (a LoRA agent)."""
    if not trained:
        return 0
    return (3 if tied else 1) * vocab * hidden * grad_bytes


def attention_mask_bytes(seqs: int, seq_tokens: int, act_bytes: int, layers_alive: int,
                         mask_bytes: int = 1) -> int:
    """The attention masks a micro-batch's forward keeps. transformers builds one boolean
    4-D mask, [N, 1, L, L] for a padded batch (a packed batch's rows are no wider than its
    longest sequence, so no more cells); torch's SDPA turns it into an additive mask in the
    query's dtype at every layer's call and keeps that copy for the backward pass. So
    ``layers_alive`` copies (every layer without gradient checkpointing, the recomputed
    one with it) in ``act_bytes``, plus the boolean one. Measured on CPU: one float32
    [1, 1, S, S] tensor per layer among the saved activations of a packed float32 forward.
    A batch without padding needs none (the causal kernel): then this over-counts.
    ``mask_bytes``: the 4-D mask's own element, 1 (boolean) unless the batch brings an
    additive one (a shared-prefix batch under eager attention: ``act_bytes``)."""
    return seqs * seq_tokens * seq_tokens * (layers_alive * act_bytes + mask_bytes)


def shared_prefix_refusal(family_shares: bool, prefix_masks: str, attn_implementation: str) -> str:
    """Why ``grpo.shared_prefix`` leaves an agent's update unshared, "" when it applies:
    the facts ``Adapter.can_share_prefix`` reads, from the config alone. The family's
    adapter must share for this ``model_type`` (``Adapter.shares_prefix_for``: a model
    type the text adapter serves as the causal-LM fallback does not), the attention must
    take an explicit 4-D mask (sdpa or eager: flash-attention takes none), and the
    layers must take the layout's masks (``prefix_masks``:
    ``processors.base.prefix_masks_fit``'s reason, "" when they do)."""
    if not family_shares:
        return "this model type's adapter does not declare shared_prefix"
    if attn_implementation not in ("sdpa", "eager"):
        return f"attn_implementation={attn_implementation} takes no 4-D attention mask"
    return prefix_masks


@dataclass(frozen=True)
class MicroBatchShape:
    """One micro-batch of ``seqs`` sequences as the language model runs it: ``rows`` x
    ``width`` positions in its input and 4-D attention mask, ``tokens`` of them counted
    for the activations (``rows`` x ``width``, or a token budget), ``prompts`` prompt
    copies (each a vision-tower pass of its images), ``shared``: laid out by prompt
    (shared prefix)."""

    seqs: int
    rows: int
    width: int
    tokens: int
    prompts: int
    shared: bool = False


def shared_prefix_shape(prompt_of: list[int], prompt_tokens: int, completion_tokens: int,
                        pair_cost: float, min_saving: float) -> MicroBatchShape:
    """The shape of one micro-batch under ``grpo.shared_prefix``, every sequence at its
    longest (the plan's worst case): ``prompt_of[n]`` is the prompt of its n-th
    sequence (rollout row n // G).

    As ``vlcohort/training/shared_prefix.py`` lays it out (``units_per_prompt``): a
    prompt's k_u completions in units of at most k, each the prompt's P tokens then its
    completions of T tokens (k all of them, unless long completions make one wide row's
    attention cost more than prompt copies); units fill rows of the widest unit's width
    by next fit, so R rows of W = max over rows of their units' widths. Shared, the
    language model runs R x W positions (with N = sum k_u sequences in a micro-batch of
    consecutive rows, U = ceil(N / G) when it starts at a group's first row; its real
    tokens are U P + N T against the unshared N (P + T)) and the attention mask is
    [R, 1, W, W]. The update keeps the unshared [N, P + T] batch when the shared one
    would cost more than ``min_saving`` x it (``shared_prefix.use_shared``: positions
    plus ``pair_cost`` per attention pair; one completion per prompt shares nothing),
    and so does this shape."""
    from vlcohort.training.shared_prefix import units_per_prompt, use_shared

    N, L = len(prompt_of), prompt_tokens + completion_tokens
    unshared = MicroBatchShape(seqs=N, rows=N, width=L, tokens=N * L, prompts=N)
    if not N:
        return unshared
    counts: dict[int, int] = {}
    for p in prompt_of:  # distinct prompts, in order of first appearance
        counts[p] = counts.get(p, 0) + 1
    k, (R, W) = units_per_prompt([prompt_tokens] * len(counts),
                                 [[completion_tokens] * c for c in counts.values()], pair_cost)
    if not use_shared((R, W), (N, L), min_saving, pair_cost):
        return unshared
    copies = sum(-(-c // k) for c in counts.values())  # units: a prompt copy each
    return MicroBatchShape(seqs=N, rows=R, width=W, tokens=R * W, prompts=copies, shared=True)


def lora_params(linear_shapes: list[tuple[str, int, int]], rank: int, targets: str,
                output_layer: str = "") -> int:
    """Parameters PEFT's LoRA adds: rank x (in + out) per wrapped linear layer. ``all-linear``
    wraps every ``nn.Linear`` but the output layer (PEFT's rule); a comma list wraps the
    linears whose name ends in one of its entries."""
    if targets == "all-linear":
        chosen = [s for s in linear_shapes if s[0] != output_layer]
    else:
        names = [t.strip() for t in targets.split(",") if t.strip()]
        chosen = [s for s in linear_shapes
                  if any(s[0] == n or s[0].endswith("." + n) for n in names)]
    return sum(rank * (i + o) for _, i, o in chosen)


# ============================================================================ model facts


@dataclass(frozen=True)
class ModelFacts:
    """What the plan needs of one checkpoint, from its ``config.json`` and a meta-device
    instantiation of its real model class."""

    path: str
    model_type: str
    model_class: str
    params: int
    largest_layer_params: int
    checkpoint_dtype: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_width: int
    vocab: int
    vision_layers: int = 0
    vision_hidden: int = 0
    vision_mlp: int = 0
    linear_shapes: tuple[tuple[str, int, int], ...] = ()
    output_layer: str = ""
    patches_per_image_token: int = 4
    tied_embeddings: bool = False  # the input embedding and the LM head share one weight
    shares_prefix: bool = False  # the adapter declares shared_prefix for this model_type
    prefix_masks: str = ""  # why its layers take no shared-prefix masks ("" : they do)
    pair_cost: float = 0.0  # row_layout.attention_pair_cost of the config


#: The repository's copies of the paper recipes' published config.json files, beside the
#: package's source tree in a clone (``bench/published_configs/README.md`` says where each
#: came from); absent from an installed wheel, where ``--configs`` names such a folder.
SOURCE_TREE_CONFIGS = Path(__file__).resolve().parent.parent / "bench" / "published_configs"

#: Where a folder of config.json copies is found relative to a clone's root (the working
#: folder named in the offline error when vlcohort runs from another install).
CLONE_CONFIGS = Path("bench") / "published_configs"


def hub_id(folder_name: str) -> str | None:
    """``<org>--<name>`` -> ``<org>/<name>``: a configs folder names
    each checkpoint by its hub id with ``/`` written ``--`` (a folder name cannot hold
    ``/``); None for a name not of that form."""
    org, sep, name = folder_name.partition("--")
    return f"{org}/{name}" if sep and org and name and "/" not in name else None


def published_configs(folder: Path, where: str = "--configs") -> dict[str, Path]:
    """Hub id -> config.json of each ``<org>--<name>/config.json`` in ``folder`` (its
    hidden folders and plain files, such as a README, left alone)."""
    if not folder.is_dir():
        raise ConfigError(f"{where} {folder}: not a folder; give a folder of "
                          f"<org>--<name>/config.json, such as a clone's {CLONE_CONFIGS}")
    out = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        repo, cfg = hub_id(sub.name), sub / "config.json"
        if repo is None:
            raise ConfigError(f"{where}: {sub}: not named <org>--<name> (the hub id with / "
                              "written --); rename it or move it out of that folder")
        if not cfg.is_file():
            raise ConfigError(f"{where}: {sub} has no config.json; put the checkpoint's "
                              "published config.json there or remove the folder")
        out[repo] = cfg
    return out


def default_configs() -> Path | None:
    """The folder ``vlcohort plan`` reads hub ids' config.json from when ``--configs`` is
    not given: :data:`SOURCE_TREE_CONFIGS` where vlcohort runs from a clone, else none."""
    return SOURCE_TREE_CONFIGS if SOURCE_TREE_CONFIGS.is_dir() else None


def shown_path(path: Path) -> str:
    """``path`` as a person would type it: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _uncached_message(spec: str, where: str, configs: Path | None) -> str:
    """The one-line error for a hub id whose config.json is nowhere offline: where it was
    looked for and the fixes, naming a clone's folder of copies when one holds it."""
    fixes = (f"fetch it once with `hf download {spec} config.json`, or point {where} at a "
             "local folder")
    if configs is not None:
        return (f"{where}: {spec}'s config.json is neither in {shown_path(configs)} (as "
                f"{spec.replace('/', '--')}/config.json) nor in the hub cache, and `vlcohort "
                f"plan` never downloads; {fixes}")
    clone = CLONE_CONFIGS / spec.replace("/", "--") / "config.json"
    if clone.is_file():
        return (f"{where}: {spec}'s config.json is not in the hub cache and `vlcohort plan` "
                f"never downloads, but {CLONE_CONFIGS} here holds a copy: pass --configs "
                f"{CLONE_CONFIGS}")
    return f"{where}: {spec}'s config.json is not in the hub cache and `vlcohort plan` never downloads; {fixes}"


def config_folder(spec: str, where: str, configs: Path | None = None) -> Path:
    """The folder holding ``spec``'s config.json: a ``tiny:`` spec's built folder, a local
    folder, or for a hub id its copy in ``configs`` (a folder of ``<org>--<name>/
    config.json``, see :func:`published_configs`), else its snapshot in the hub cache
    (never downloaded). The copy comes first: the documented plans were made from the
    copies, and a config.json (the architecture) seldom changes between revisions."""
    from vlcohort.processors.registry import resolve_model_path
    from vlcohort.processors.tiny import is_tiny_spec

    if is_tiny_spec(spec):
        try:
            return Path(resolve_model_path(spec))
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{where}: {spec}: {e}") from None
    local = Path(spec)
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(f"{where}: {spec} has no config.json; point it at a checkpoint "
                              "folder written by save_pretrained")
        return local
    if local.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ConfigError(f"{where}: {spec} is not a checkpoint folder nor a hub id "
                          "(owner/name); give a folder holding config.json")
    copy = published_configs(configs).get(spec) if configs is not None else None
    if copy is not None:
        return copy.parent
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(spec, "config.json")
    if not isinstance(cached, str):
        raise ConfigError(_uncached_message(spec, where, configs))
    return Path(cached).parent


@functools.lru_cache(maxsize=32)
def _facts_from_folder(folder: str, trust_remote_code: bool) -> ModelFacts:
    import torch
    from transformers import AutoConfig

    from vlcohort.processors.registry import adapter_class_for_type, unserved_message
    from vlcohort.training.row_layout import attention_pair_cost

    raw = json.loads((Path(folder) / "config.json").read_text())
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not model_type:
        raise ConfigError(f"{folder}/config.json: no model_type; it is not a transformers "
                          "checkpoint config")
    cls = adapter_class_for_type(str(model_type))
    if cls is None:
        raise ConfigError(unserved_message(folder, str(model_type)).replace("\n", " "))
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as e:
        raise ConfigError(f"{folder}/config.json: transformers cannot read it "
                          f"({str(e).splitlines()[0]})") from None
    auto = cls._model_class(None)  # the family's Auto class (no processor is loaded)
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    params = sum(p.numel() for p in model.parameters())  # tied weights counted once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    linears = tuple((n, m.in_features, m.out_features) for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear))
    out = model.get_output_embeddings()
    output_layer = next((n for n, m in model.named_modules() if m is out), "") if out is not None else ""
    inp = model.get_input_embeddings()
    tied = bool(out is not None and inp is not None and out.weight is inp.weight)
    text = config.get_text_config(decoder=True)
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    vision = getattr(config, "vision_config", None)
    from vlcohort.processors.base import prefix_masks_fit

    masks = prefix_masks_fit(config, "sdpa")  # the layer rules; the agent's attention later
    ckpt_dtype = str(raw.get("dtype") or raw.get("torch_dtype")
                     or (raw.get("text_config") or {}).get("dtype") or "float32")
    return ModelFacts(
        path=folder, model_type=str(model_type), model_class=type(model).__name__,
        params=int(params), largest_layer_params=int(largest), checkpoint_dtype=ckpt_dtype,
        layers=int(text.num_hidden_layers), hidden=int(text.hidden_size), heads=heads,
        kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
        mlp_width=int(getattr(text, "intermediate_size", None) or 4 * text.hidden_size),
        vocab=int(text.vocab_size),
        vision_layers=int(_first(vision, "depth", "num_hidden_layers") or 0),
        vision_hidden=int(_first(vision, "hidden_size") or 0),
        vision_mlp=int(_first(vision, "intermediate_size") or 0),
        linear_shapes=linears, output_layer=output_layer,
        patches_per_image_token=patches_per_image_token(config), tied_embeddings=tied,
        shares_prefix=cls.shares_prefix_for(str(model_type)),
        prefix_masks=masks, pair_cost=attention_pair_cost(config))


def patches_per_image_token(config) -> int:
    """Vision-tower patches behind one image token of the decoder, from the config: a
    spatial merge of m x m patches (``vision_config.spatial_merge_size``), a pixel shuffle
    by ``downsample_ratio`` (0.5 -> 4), or a fixed token count per image (e.g. (896 / 14)^2
    patches pooled to ``mm_tokens_per_image`` 256 -> 16); else 4. The config's keys decide,
    never a family name."""
    vision = getattr(config, "vision_config", None)
    merge = _first(vision, "spatial_merge_size")
    if merge:
        return int(merge) ** 2
    ratio = getattr(config, "downsample_ratio", None)
    if ratio:
        return max(1, round(1 / float(ratio) ** 2))
    per_image = getattr(config, "mm_tokens_per_image", None)
    size, patch = _first(vision, "image_size"), _first(vision, "patch_size")
    if per_image and isinstance(size, int) and isinstance(patch, int):
        return max(1, (size // patch) ** 2 // int(per_image))
    return 4


def _first(cfg, *names):
    for n in names:
        v = getattr(cfg, n, None) if cfg is not None else None
        if v:
            return v
    return None


def model_facts(spec: str, where: str = "agents.N.path", trust_remote_code: bool = False,
                configs: Path | None = None) -> ModelFacts:
    """The facts of ``spec`` (``tiny:`` spec, folder, hub id in ``configs`` or cached),
    offline."""
    return _facts_from_folder(str(config_folder(spec, where, configs)), trust_remote_code)


# ============================================================================ the plan


@dataclass
class AgentPlan:
    """One agent's memory on each GPU that hosts it (one rank of its group), in bytes."""

    index: int
    name: str
    model_class: str
    params: int
    trainable: int
    gpu: int  # the GPU index it sits on (the first of its group's)
    ranks: int
    optimizer: str  # "adamw" (one process) or "zero-<stage>"
    parts: dict[str, int] = field(default_factory=dict)
    seq_tokens: int = 0
    micro_seqs: int = 0
    shared_prefix: bool = False  # grpo.shared_prefix applies: a prompt counted once per micro-batch
    micro_rows: int = 0  # the largest micro-batch's input: micro_rows x micro_width positions
    micro_width: int = 0
    kv_seqs: float | None = None  # full-length sequences the vLLM KV cache holds
    engine_sleeps: bool = False
    host: int = 0
    notes: list[str] = field(default_factory=list)
    resident: int = 0
    generation_extra: int = 0
    update_extra: int = 0
    engine_awake: int = 0
    fits: bool = True
    knob: str = ""


@dataclass
class Plan:
    gpu_gib: float
    gpus: int
    mode: str
    agents: list[AgentPlan]
    gpu_peaks: dict[int, int]
    gpu_phases: dict[int, dict[str, int]]
    node_bytes: int
    host_bytes: int
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return all(a.fits for a in self.agents)

    def as_dict(self) -> dict:
        return {"gpu_gib": self.gpu_gib, "gpus": self.gpus, "mode": self.mode, "fits": self.fits,
                "node_bytes": self.node_bytes, "host_bytes": self.host_bytes,
                "gpu_peaks": {str(k): v for k, v in self.gpu_peaks.items()},
                "gpu_phases": {str(k): v for k, v in self.gpu_phases.items()},
                "notes": self.notes,
                "agents": [dataclasses.asdict(a) for a in self.agents]}


def _layout(cfg, gpus: int) -> tuple[str, int]:
    """(mode line, ranks per agent); one GPU: one process, no DeepSpeed."""
    A = len(cfg.agents)
    if gpus == 1:
        return "one process (no launcher): every agent on its agents.N.device GPU, torch AdamW", 1
    R = cfg.distributed.ranks_per_agent or gpus // A
    if R < 1 or A * R != gpus:
        raise ConfigError(f"distributed.ranks_per_agent: {A} agents x {R} ranks = {A * R} ranks, "
                          f"but --gpus {gpus}; set distributed.ranks_per_agent={max(1, gpus // A)} "
                          f"(with --gpus {A * max(1, gpus // A)}) or 0 (W / A)")
    return f"torchrun, {gpus} ranks: {A} agent groups of {R} (DeepSpeed ZeRO-{cfg.distributed.zero_stage})", R


def _agent_gpu(mc, i: int, gpus: int) -> tuple[int, str]:
    """The GPU a one-process agent sits on, and a note when its device is not a GPU."""
    dev = str(mc.device)
    if dev.startswith("cuda"):
        idx = int(dev.split(":")[1]) if ":" in dev else 0
        if idx >= gpus:
            raise ConfigError(f"agents.{i}.device: {dev}, but --gpus {gpus} (one process uses "
                              f"cuda:0 .. cuda:{gpus - 1})")
        return idx, ""
    return 0, f"agents.{i}.device={dev}: planned on cuda:0 (set agents.N.device=cuda to train there)"


def prompt_tokens_for(cfg) -> int:
    """Longest prompt the run admits: ``data.max_prompt_tokens``, cut to what vLLM's
    ``max_model_len`` leaves beside ``max_new_tokens``."""
    limit = cfg.data.max_prompt_tokens or 4096
    v = cfg.rollout.vllm
    if cfg.rollout.engine == "vllm" and v.max_model_len:
        limit = min(limit, max(1, v.max_model_len - cfg.rollout.max_new_tokens))
    return limit


def micro_batch_prompts(seqs: int, group: int, micro: int, micro_tokens: int, seq_tokens: int,
                        mini: int = 0, prompt_tokens: int | None = None) -> list[tuple[int, ...]]:
    """The distinct micro-batches of one rank's update, each as the prompt of each of its
    sequences (rollout row n belongs to prompt n // ``group``), every sequence
    ``seq_tokens`` long: ``micro`` consecutive rows each, or with ``micro_tokens`` > 0
    the update's own token-budget split within mini-batches of ``mini`` rows
    (``update.token_micro_batches``; with ``prompt_tokens``, the shared-prefix update's,
    ``update.shared_token_micro_batches``, which keeps a prompt's rows together at
    ``prompt_tokens`` once plus their completions). Prompt indices are taken relative to
    the micro-batch's first, so micro-batches alike count once."""
    from vlcohort.training.update import shared_token_micro_batches, token_micro_batches

    if micro_tokens > 0 and prompt_tokens is not None:
        n_prompts = -(-seqs // max(1, group))
        groups = [b.tolist() for b in shared_token_micro_batches(
            [prompt_tokens] * n_prompts, [seq_tokens - prompt_tokens] * seqs, group, micro_tokens,
            mini or seqs)]
    elif micro_tokens > 0:
        groups = [b.tolist() for b in token_micro_batches([seq_tokens] * seqs, micro_tokens,
                                                          mini or seqs)]
    else:
        groups = [list(range(s, min(seqs, s + micro))) for s in range(0, seqs, max(1, micro))]
    out = set()
    for rows in groups:
        first = rows[0] // group
        out.add(tuple(n // group - first for n in rows))
    return sorted(out)


def plan(cfg, gpu_gib: float, gpus: int, prompt_tokens: int | None = None,
         image_tokens: int = 0, suggest: bool = True, configs: Path | None = None) -> Plan:
    """The memory plan of ``cfg`` on one node of ``gpus`` GPUs of ``gpu_gib`` GiB each;
    hub ids' config.json from the folder ``configs`` where it holds them
    (:func:`config_folder`)."""
    if not (isinstance(gpu_gib, (int, float)) and gpu_gib > 0 and math.isfinite(gpu_gib)):
        raise ConfigError(f"--gpu-gib: {gpu_gib} is not a GPU size; give the GiB of one GPU (> 0), e.g. 80")
    if not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"--gpus: {gpus} is not a GPU count; give 1 or more")
    if prompt_tokens is not None and prompt_tokens < 0:
        raise ConfigError(f"--prompt-tokens: {prompt_tokens} must be >= 0")
    gpu_bytes = int(gpu_gib * GIB)
    mode, R = _layout(cfg, gpus)
    one_process = gpus == 1
    P_tok = prompt_tokens_for(cfg) if prompt_tokens is None else prompt_tokens
    T = cfg.rollout.max_new_tokens
    L = P_tok + T
    g, ro, v, d = cfg.grpo, cfg.rollout, cfg.rollout.vllm, cfg.distributed
    seqs_rank = ro.prompts_per_step * ro.rollouts_per_prompt // R
    micro_tokens = int(getattr(g, "micro_batch_tokens", 0) or 0)
    if micro_tokens > 0:
        micro = max(1, micro_tokens // max(1, L))
        tokens = max(micro_tokens, L)  # a longer sequence goes alone
    else:
        micro = max(1, min(g.micro_batch_seqs, seqs_rank))
        tokens = micro * L
    from vlcohort.training.update import PACK_MIN_SAVING

    share_asked = bool(getattr(g, "shared_prefix", False))
    micro_prompts = (micro_batch_prompts(seqs_rank, ro.rollouts_per_prompt, micro, micro_tokens, L,
                                         getattr(g, "mini_batch_seqs", 0), prompt_tokens=P_tok)
                     if share_asked else [])
    agents: list[AgentPlan] = []
    plan_notes: list[str] = []
    from_configs: list[str] = []  # hub ids whose config.json came from ``configs``
    sleeping = 0
    for i, mc in enumerate(cfg.agents):
        where = f"agents.{i}.path"
        f = model_facts(mc.path, where, mc.trust_remote_code, configs)
        if configs is not None and Path(f.path).parent == configs and mc.path not in from_configs:
            from_configs.append(mc.path)
        w = dtype_bytes(mc.dtype, f.checkpoint_dtype)
        e = 2 if mc.autocast_bf16 else w
        lora = mc.lora_rank > 0
        trainable = (lora_params(list(f.linear_shapes), mc.lora_rank, mc.lora_targets, f.output_layer)
                     if lora else f.params)
        params_total = f.params + (trainable if lora else 0)
        notes = []
        if one_process:
            gpu_idx, note = _agent_gpu(mc, i, gpus)
            if note:
                notes.append(note)
            st = plain_state_bytes(params_total, trainable, w, trainable_bytes=4 if lora else None)
            opt_name = "adamw"
        else:
            gpu_idx = i * R
            if lora:  # frozen base in its dtype, float32 adapters trained through ZeRO
                base = zero_state_bytes(f.params, 0, d.zero_stage, R, w, f.largest_layer_params,
                                        d.offload_optimizer, d.offload_params)
                ad = zero_state_bytes(trainable, trainable, d.zero_stage, R, 4, 0,
                                      d.offload_optimizer, d.offload_params)
                st = StateBytes(base.weights + ad.weights, ad.grads, ad.optimizer, base.gather,
                                base.host + ad.host)
            else:
                st = zero_state_bytes(f.params, f.params, d.zero_stage, R, w,
                                      f.largest_layer_params, d.offload_optimizer,
                                      d.offload_params)
            opt_name = f"zero-{d.zero_stage}" + ("+offload" if d.offload_optimizer and d.zero_stage else "")
        # a KL reference copy: a full fine-tune's starting weights; none for LoRA (the base
        # with the adapters off) or grpo.kl_reference=teacher (the EMA teacher, kept where
        # reward.ema.device says, is swapped into the policy's own parameters)
        ref = f.params * w if (g.kl_coef > 0 and not lora and g.kl_reference == "start") else 0
        per_layer = layer_activation_bytes_per_token(f.hidden, f.heads * f.head_dim, f.mlp_width, e)
        vpl = layer_activation_bytes_per_token(f.vision_hidden, f.vision_hidden, f.vision_mlp, e)
        shapes = [MicroBatchShape(seqs=micro, rows=micro, width=L, tokens=tokens, prompts=micro)]
        refusal = (shared_prefix_refusal(f.shares_prefix, f.prefix_masks, mc.attn_implementation)
                   if share_asked else "")
        if share_asked and refusal:
            notes.append(f"grpo.shared_prefix: not for {f.model_type} ({refusal}); planned unshared")
        elif share_asked:
            laid = [shared_prefix_shape(list(q), P_tok, T, f.pair_cost, PACK_MIN_SAVING)
                    for q in micro_prompts]
            if any(sh.shared for sh in laid):  # else the unshared plan, as without the option
                shapes = laid
        eager = mc.attn_implementation == "eager"

        def micro_bytes(shape: MicroBatchShape, ckpt: bool) -> int:
            """One micro-batch's activations, attention mask and vision tower (over the
            patches behind each prompt copy's image tokens)."""
            act = activation_bytes(shape.tokens, f.layers, per_layer, f.hidden, e, ckpt)
            mask = attention_mask_bytes(shape.rows, shape.width, e, 1 if ckpt else f.layers,
                                        e if shape.shared and eager else 1)
            vis = 0
            if image_tokens and f.vision_layers:
                patches = shape.prompts * image_tokens * f.patches_per_image_token
                vis = activation_bytes(patches, f.vision_layers, vpl, f.vision_hidden, e, ckpt)
            return act + mask + vis

        worst = max(shapes, key=lambda sh: micro_bytes(sh, mc.gradient_checkpointing))
        if share_asked and not refusal:
            if worst.shared:
                notes.append(
                    f"grpo.shared_prefix: each prompt counted once per micro-batch: "
                    f"{worst.prompts} prompt(s) x {P_tok} + {worst.seqs} completions x {T} "
                    f"tokens in {worst.rows} row(s) x {worst.width} (4-D mask [{worst.rows}, 1, "
                    f"{worst.width}, {worst.width}]), not {worst.seqs} x {L}")
            else:
                notes.append("grpo.shared_prefix: no micro-batch gains by sharing its prompts "
                             "(one completion per prompt, or the mask outweighs them); planned unshared")
        from vlcohort.training.logprobs import LOGITS_BUDGET_BYTES

        logit = logits_bytes(micro, T, f.vocab, mc.logprob_chunk_tokens, e, LOGITS_BUDGET_BYTES,
                             ro.temperature != 1.0)
        parts = {"weights": int(st.weights), "grads": int(st.grads), "optimizer": int(st.optimizer),
                 "zero3_gather": int(st.gather), "reference": int(ref),
                 "activations": int(micro_bytes(worst, mc.gradient_checkpointing)),
                 "activations_no_ckpt": int(max(micro_bytes(sh, False) for sh in shapes)),
                 "activations_ckpt": int(max(micro_bytes(sh, True) for sh in shapes)),
                 "logits": int(logit),
                 "embedding_grad": embedding_grad_bytes(f.vocab, f.hidden, w, f.tied_embeddings,
                                                        trained=not lora)}
        ap = AgentPlan(index=i, name=mc.name, model_class=f.model_class, params=f.params,
                       trainable=trainable, gpu=gpu_idx, ranks=R, optimizer=opt_name, parts=parts,
                       seq_tokens=L, micro_seqs=micro, notes=notes, shared_prefix=worst.shared,
                       micro_rows=worst.rows, micro_width=worst.width,
                       host=int(st.host) if (not one_process and d.offload_optimizer and d.zero_stage) else 0)
        ap.resident = st.gpu + ref
        # the backward's peak: the activations and logits, or at its very end (activations
        # freed) the embedding's gradient beside the head's, whichever is larger
        ap.update_extra = max(parts["activations"] + parts["logits"], parts["embedding_grad"])
        if ro.engine == "vllm":
            eng = vllm_engine_bytes(f, v, gpu_bytes, policy_bytes=w)
            ctx = v.max_model_len or L
            kv, per_tok = eng["kv_cache"], eng["kv_per_token"]
            ap.kv_seqs = kv / (per_tok * ctx)
            parts.update(vllm_weights=eng["weights"], vllm_kv_cache=max(0, kv),
                         vllm_other=eng["other"], vllm_total=eng["total"])
            can_sleep = v.sleep_mode in ("auto", True) and (not one_process or sleeping == 0)
            if v.sleep_mode is True and one_process and sleeping:
                notes.append("rollout.vllm.sleep_mode=true with a second engine in one process is "
                             "refused at start (vLLM sleeps one engine per process): this engine "
                             "is planned awake")
            ap.engine_sleeps = can_sleep
            sleeping += int(can_sleep)
            ap.engine_awake = eng["total"]
            if kv < per_tok * ctx:
                notes.append(f"vLLM's KV cache ({_gib(kv)} GiB) holds no sequence of "
                             f"{ctx} tokens: vLLM refuses to start")
                ap.fits = False
        else:  # hf generate: the policy's own KV cache over the rank's sequences
            per_tok = kv_cache_bytes_per_token(f.layers, f.kv_heads, f.head_dim, e)
            gen = seqs_rank * L * per_tok + seqs_rank * f.vocab * 4
            if not one_process and d.zero_stage == 3:
                gen += f.params * w - int(st.weights)  # generation gathers the whole policy
            parts["hf_generation"] = int(gen)
            ap.generation_extra = int(gen)
        agents.append(ap)
    gpu_peaks, gpu_phases = _gpu_peaks(agents, one_process)
    for ap in agents:
        if gpu_peaks[ap.gpu] > gpu_bytes:
            ap.fits = False
    by_gpu = {k: gpu_peaks[k] for k in gpu_peaks}
    if one_process:
        node = sum(by_gpu.values())
    else:
        node = sum(gpu_peaks[a.gpu] * a.ranks for a in agents)
    result = Plan(gpu_gib=gpu_gib, gpus=gpus, mode=mode, agents=agents, gpu_peaks=by_gpu,
                  gpu_phases=gpu_phases, node_bytes=node,
                  host_bytes=sum(a.host for a in agents) if not one_process else 0, notes=plan_notes)
    if from_configs:
        plan_notes.append(f"config.json of {', '.join(from_configs)}: the copies in "
                          f"{shown_path(configs)} (--configs DIR for another folder)")
    plan_notes.append(f"micro-batch: {micro} sequences x {L} tokens ({P_tok} prompt + {T} new) = "
                      f"{tokens} tokens per forward")
    if suggest:
        for ap in agents:
            if not ap.fits:
                ap.knob = first_knob(cfg, ap.index, gpu_gib, gpus, prompt_tokens, image_tokens,
                                     configs)
    return result


def vllm_engine_bytes(f: ModelFacts, v, gpu_bytes: int, policy_bytes: int = 2) -> dict[str, int]:
    """One vLLM engine's GPU memory (``rollout.vllm`` settings ``v``): its total is
    ``gpu_memory_utilization`` x the GPU (vLLM's budget for weights + KV cache + the rest),
    or, with ``kv_cache_memory_gib``, weights + that cache + the rest. Weights: every
    parameter in the engine's dtype (``auto``: the policy's own, ``policy_bytes`` per
    element, as ``vlcohort/rollout/vllm.py`` builds it), split over the tensor-parallel
    ranks. The rest: :data:`VLLM_NON_TORCH_BYTES` plus the start-up profile's peak,
    estimated as one step of ``max_num_batched_tokens`` tokens through the widest layer
    (the gated MLP's two I-wide outputs and a few h-wide tensors) and the sampler's
    float32 logits for ``max_num_seqs`` sequences. The KV cache is what remains,
    ``kv_per_token`` bytes per token (:func:`kv_cache_bytes_per_token`)."""
    tp = max(1, v.tensor_parallel_size)
    ev = policy_bytes if v.dtype == "auto" else dtype_bytes(v.dtype)
    weights = f.params * ev // tp
    batched = v.max_num_batched_tokens or VLLM_DEFAULT_BATCHED_TOKENS
    profile = batched * (2 * f.mlp_width // tp + 4 * f.hidden) * ev + v.max_num_seqs * f.vocab * 4
    other = VLLM_NON_TORCH_BYTES + profile
    if v.kv_cache_memory_gib:
        kv = int(v.kv_cache_memory_gib * GIB)
        total = weights + kv + other
    else:
        total = int(v.gpu_memory_utilization * gpu_bytes)
        kv = total - weights - other
    return {"weights": int(weights), "kv_cache": int(kv), "other": int(other), "total": int(total),
            "kv_per_token": kv_cache_bytes_per_token(f.layers, f.kv_heads, f.head_dim, ev, tp)}


def _gpu_peaks(agents: list[AgentPlan], one_process: bool) -> tuple[dict[int, int], dict[int, dict[str, int]]]:
    """Peak of each GPU over the step's two phases. Generation: every agent's resident
    training state, every awake engine (a sleeping one only while it generates, one at a
    time) and the hf engine's cache. Update: resident state, engines that do not sleep, and
    one agent's activations and logits at a time (agents update one after another)."""
    peaks: dict[int, int] = {}
    phases: dict[int, dict[str, int]] = {}
    for idx in sorted({a.gpu for a in agents}):
        group = [a for a in agents if a.gpu == idx]
        resident = sum(a.resident for a in group)
        awake = sum(a.engine_awake for a in group if not a.engine_sleeps)
        sleeper = max([a.engine_awake for a in group if a.engine_sleeps] or [0])
        gen = resident + awake + sleeper + max([a.generation_extra for a in group] or [0])
        upd = resident + awake + max([a.update_extra for a in group] or [0])
        phases[idx] = {"generation": gen, "update": upd}
        peaks[idx] = max(gen, upd)
    return peaks, phases


#: Single changes tried, in order, for an agent that does not fit: (label, overrides).
def _knobs(cfg, i: int, one_process: bool) -> list[tuple[str, dict]]:
    mc, g, v, d = cfg.agents[i], cfg.grpo, cfg.rollout.vllm, cfg.distributed
    out: list[tuple[str, dict]] = []
    if not mc.gradient_checkpointing:
        out.append((f"agents.{i}.gradient_checkpointing=true", {"ckpt": True}))
    if getattr(g, "micro_batch_tokens", 0):
        t = g.micro_batch_tokens
        while t > 256:
            t //= 2
            out.append((f"grpo.micro_batch_tokens={t}", {"micro_tokens": t}))
    else:
        m = g.micro_batch_seqs
        while m > 1:
            m //= 2
            out.append((f"grpo.micro_batch_seqs={m}", {"micro": m}))
    if cfg.rollout.engine == "vllm":
        if v.sleep_mode is False and (not one_process or i == 0):
            out.append(("rollout.vllm.sleep_mode=auto", {"sleep": "auto"}))
        u = round(v.gpu_memory_utilization - 0.05, 2)
        while u >= 0.1:
            out.append((f"rollout.vllm.gpu_memory_utilization={u:g}", {"util": u}))
            u = round(u - 0.05, 2)
    if not one_process:
        for s in range(d.zero_stage + 1, 4):
            out.append((f"distributed.zero_stage={s}", {"stage": s}))
        if not d.offload_optimizer:
            stage = max(d.zero_stage, 1)
            extra = "" if stage == d.zero_stage else f" distributed.zero_stage={stage}"
            out.append((f"distributed.offload_optimizer=true{extra}", {"offload": True, "stage": stage}))
    if mc.lora_rank == 0:
        out.append((f"agents.{i}.lora_rank={KNOB_LORA_RANK}", {"lora": KNOB_LORA_RANK}))
    return out


def _apply(cfg, i: int, change: dict):
    new = copy.deepcopy(cfg)
    if "ckpt" in change:
        new.agents[i].gradient_checkpointing = True
    if "micro" in change:
        new.grpo.micro_batch_seqs = change["micro"]
    if "micro_tokens" in change:
        new.grpo.micro_batch_tokens = change["micro_tokens"]
    if "sleep" in change:
        new.rollout.vllm.sleep_mode = change["sleep"]
    if "util" in change:
        new.rollout.vllm.gpu_memory_utilization = change["util"]
    if "stage" in change:
        new.distributed.zero_stage = change["stage"]
    if "offload" in change:
        new.distributed.offload_optimizer = True
    if "lora" in change:
        new.agents[i].lora_rank = change["lora"]
    return new


def first_knob(cfg, i: int, gpu_gib: float, gpus: int, prompt_tokens: int | None = None,
               image_tokens: int = 0, configs: Path | None = None) -> str:
    """The first single change (in the order of :func:`_knobs`: least disruptive first)
    after which agent ``i`` fits; else the one that frees the most memory on its GPU."""
    base = plan(cfg, gpu_gib, gpus, prompt_tokens, image_tokens, suggest=False, configs=configs)
    gpu = base.agents[i].gpu
    best, best_peak = "", base.gpu_peaks[gpu]
    for label, change in _knobs(cfg, i, gpus == 1):
        p = plan(_apply(cfg, i, change), gpu_gib, gpus, prompt_tokens, image_tokens, suggest=False,
                 configs=configs)
        if p.agents[i].fits:
            return f"{label} (peak {_gib(p.gpu_peaks[gpu])} GiB)"
        if p.gpu_peaks[gpu] < best_peak:
            best, best_peak = label, p.gpu_peaks[gpu]
    if best:
        return (f"no single knob fits it; {best} frees the most (peak {_gib(best_peak)} GiB): "
                "combine it with others, or give the agent more GPUs")
    return "no single knob fits it: give the agent more GPUs or a larger GPU"


# ============================================================================ output


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _gib(b: float) -> str:
    return f"{b / GIB:.1f}"


COLUMNS = (("agent", 14), ("params", 8), ("optim", 15), ("weights", 8), ("grads", 7),
           ("optim st", 8), ("ref", 5), ("act", 6), ("act ckpt", 8), ("act none", 8),
           ("logits", 6), ("vllm w", 6), ("vllm kv", 7), ("kv seqs", 7), ("peak", 6), ("fits", 4))


def render_table(p: Plan) -> str:
    """The plan as a readable table (GiB per GPU of the agent's group), notes and knobs."""
    lines = [f"# plan: {p.gpus} x {p.gpu_gib:g} GiB; {p.mode}", *(f"# {n}" for n in p.notes)]
    header = "  ".join(f"{name:>{w}}" if k else f"{name:<{w}}" for k, (name, w) in enumerate(COLUMNS))
    lines += [header, "-" * len(header)]
    for a in p.agents:
        pt = a.parts
        kv = "-" if a.kv_seqs is None else f"{a.kv_seqs:.1f}"
        vals = [a.name[:14], _count(a.params), a.optimizer, _gib(pt["weights"] + pt["zero3_gather"]),
                _gib(pt["grads"]), _gib(pt["optimizer"]), _gib(pt["reference"]), _gib(pt["activations"]),
                _gib(pt["activations_ckpt"]), _gib(pt["activations_no_ckpt"]), _gib(pt["logits"]),
                _gib(pt.get("vllm_weights", 0)), _gib(pt.get("vllm_kv_cache", 0)), kv,
                _gib(p.gpu_peaks[a.gpu]), "yes" if a.fits else "NO"]
        lines.append("  ".join(f"{s:>{w}}" if k else f"{s:<{w}}" for k, (s, (_, w)) in enumerate(zip(vals, COLUMNS))))
    lines.append("")
    for idx, ph in p.gpu_phases.items():
        who = ", ".join(a.name for a in p.agents if a.gpu == idx)
        span = "" if p.gpus == 1 else f"-{idx + next(a.ranks for a in p.agents if a.gpu == idx) - 1}"
        lines.append(f"GPU {idx}{span} ({who}): generation {_gib(ph['generation'])} GiB, update "
                     f"{_gib(ph['update'])} GiB of {p.gpu_gib:g}")
    lines.append(f"node: {_gib(p.node_bytes)} GiB of {p.gpus} x {p.gpu_gib:g} = "
                 f"{p.gpus * p.gpu_gib:g} GiB" + (f"; host (DeepSpeed) {_gib(p.host_bytes)} GiB"
                                                  if p.host_bytes else ""))
    for a in p.agents:
        for n in a.notes:
            lines.append(f"note {a.name}: {n}")
        if not a.fits:
            lines.append(f"{a.name} does not fit; first knob: {a.knob}")
    lines.append("fits: yes" if p.fits else "fits: NO")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML recipe (default: the embedded default)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable)")
    p.add_argument("--gpu-gib", type=float, default=80.0, help="GiB of one GPU (default 80)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the node (default 8; 1: one "
                   "process, no DeepSpeed)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt tokens per sequence (default: data.max_prompt_tokens, cut to "
                        "rollout.vllm.max_model_len - max_new_tokens)")
    p.add_argument("--image-tokens", type=int, default=0,
                   help="image tokens per sequence whose vision-tower activations to count "
                        "(default 0: the decoder's only)")
    p.add_argument("--configs", metavar="DIR", default=None,
                   help="folder of <org>--<name>/config.json copies read for hub ids before "
                        "the hub cache, e.g. bench/published_configs (default: that folder of "
                        "the source tree when vlcohort runs from a clone)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    """``vlcohort plan``: exit 0 when every agent fits, 1 when one does not."""
    from vlcohort.config import load_config, train_base

    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config:
        config, overrides = None, [config, *overrides]
    configs = Path(args.configs) if args.configs is not None else default_configs()
    if configs is not None:
        published_configs(configs)  # a wrong --configs is an error even when no agent needs it
    base, overrides, _ = train_base(config, [*overrides, *args.sets])
    cfg = load_config(base, overrides)
    p = plan(cfg, args.gpu_gib, args.gpus, args.prompt_tokens, args.image_tokens, configs=configs)
    if args.json:
        print(json.dumps(p.as_dict(), indent=1))
    else:
        print(render_table(p))
    return 0 if p.fits else 1


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="vlcohort plan")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
