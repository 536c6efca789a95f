"""Benchmark: two-agent cohort steps with full-size Qwen2.5-VL-3B and InternVL3.5-2B (random
weights) on one GPU, through the real trainer, with the ``hf`` engine.

The full-size run needs a CUDA GPU and is not part of the CPU CI; its ``--tiny`` mode, the
same code path with shrunk models on the CPU, is what ``tests/test_bench_gpu_step.py`` runs.
On a machine with one CUDA GPU (H100 / H200 class: an estimated 60-80 GB at the defaults,
about 8 bytes per parameter for bf16 weights, gradients and AdamW states of both models,
plus activations and KV cache), offline, from the project root::

    python bench/gpu_step.py --out gpu_step.json
    python bench/gpu_step.py --steps 4 --prompts 8 --rollouts 8 --max-new-tokens 1024 --out gpu_step.json
    python bench/gpu_step.py --tiny --out tiny.json        # CPU, seconds: the same code path

What it builds (no download: the values below are the checkpoints' published config.json)
----------------------------------------------------------------------------------------
- **Qwen2.5-VL-3B-Instruct**: ``Qwen2_5_VLForConditionalGeneration``; text 36 layers, hidden
  2048, MLP 11008, 16 heads / 2 KV heads, vocabulary 151,936, tied embeddings, M-RoPE
  [16, 24, 24]; vision tower 32 blocks of width 1280 (MLP 3420, 16 heads, window 112,
  full attention in blocks 7/15/23/31), merged 2x2 into the text width.
- **InternVL3.5-2B-HF**: ``InternVLForConditionalGeneration``; InternViT-300M (24 layers,
  width 1024, MLP 4096, 16 heads, 448 px tiles of 14 px patches, pixel shuffle 0.5: 256
  tokens per tile) and a Qwen3-1.7B text model (28 layers, hidden 2048, MLP 6144, 16 heads /
  8 KV heads, head dim 128, vocabulary 151,936, untied LM head).
- Tokenizers: ``vlcohort.processors.tiny``'s in-process byte-level BPE with each family's special
  tokens and published chat template, **padded with plain word tokens to the full
  vocabulary** (" A2001", " B2002"... ; building takes seconds), so every id a random model
  samples decodes; the padding reads as option letters, so answers are extracted, votes
  are formed and groups have unequal rewards: every update really runs. The real processor
  classes (``Qwen2_5_VLProcessor`` + ``Qwen2VLImageProcessor``, ``InternVLProcessor`` +
  ``GotOcr2ImageProcessor``) with the checkpoints' image rules.
- Both are initialised randomly in bf16 on the GPU, written with ``save_pretrained`` to a
  temporary folder and loaded back by ``vlcohort.recipes.cohort.setup`` from a ``Config`` naming the
  folders (``agents.N.device=cuda``), exactly as a user's checkpoint is.

What one step is: ``vlcohort.recipes.step.train_step`` (the step ``vlcohort train`` runs): B
synthetic multiple-choice prompts with a ``--image-size`` picture each -> each agent
generates G completions (batched ``generate``, left padding; random weights never emit an
end-of-turn, so every completion runs to ``--max-new-tokens``: a fixed workload) ->
answers, plurality votes, ring teachers (Co-RL), rewards, group advantages -> each agent's
GRPO update (bf16 weights, AdamW, gradient checkpointing, no KL, token-level IS weights).

Figures (per measured step; the summary takes medians over steps after ``--warmup``)
----------------------------------------------------------------------------------
- time per phase: the step record's own ``timing/rollout`` (both agents generating),
  ``timing/grading`` (extract, vote, reward, advantage), ``timing/update`` (both agents'
  encode + log-prob / forward / backward passes + optimizer steps), ``timing/step``, and
  the rest of the step (rendering the B prompts and their images, metrics); each phase's
  share of the step is the ratios table.
- peak GPU memory: ``torch.cuda.max_memory_allocated`` over the step, and over generation
  alone.
- generated tokens/s: completion tokens of both agents / ``timing/rollout``.
- training MFU against ``--peak-tflops`` (790 TFLOP/s, dense bf16):

      MFU = update FLOPs / (timing/update x peak)
      update FLOPs = sum over agents of (6 x E + 2 x L) x F, per trained token class:
        F = P_dec x T_seq + V x d x T_comp + P_vis x 4 x T_img

  with ``E`` the PPO epochs (6 = forward + backward per parameter and token) and ``L`` the
  extra no-grad log-prob passes (old log-probs when ``E > 1``, reference when KL > 0; 0
  here); ``P_dec`` the text decoder's parameters without its input embedding table (a
  lookup costs nothing), ``T_seq`` the real (unpadded) prompt + completion tokens it runs
  over; ``V x d`` the LM head, which the trainer applies to completion positions only
  (``T_comp``); ``P_vis`` the vision tower and projector, run over 4 patches per image token
  (a 2 x 2 merge in both families; ``T_img`` image tokens). **Attention score / value
  FLOPs are not included**, nor the recomputation of gradient checkpointing (this is model
  FLOPs utilisation, not hardware FLOPs), nor padding: MFU is understated, not flattered.
  The update phase also holds CPU work (re-encoding prompts and images for the training
  batches), which is counted in its time.

In ``--tiny`` mode the configs shrink (hidden 64, 2 layers, 56 px images, a vocabulary of
2,048) but keep the architecture classes, processors and every line of the code path; its
MFU and memory figures mean nothing and are printed only to show the fields.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path


def _quiet_environment() -> None:
    """Offline, quiet libraries for this script's own run. Called from :func:`main`, never
    at import: ``tests/test_bench_gpu_step.py`` imports this module, and a
    ``TRANSFORMERS_VERBOSITY=error`` set at import leaked into the test session and every
    subprocess it started (transformers' warnings vanished from later tests' runs). No
    DS_ACCELERATOR either: DeepSpeed picks cuda itself when a GPU is visible."""
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - after the environment settings and sys.path above

PEAK_TFLOPS = 790.0  # dense bf16 tensor-core peak the issue asks MFU against
TASKS = ["shape_colour", "shape_kind", "compare_bars"]  # multiple choice: letter golds

# ============================================================================ the models

# Qwen/Qwen2.5-VL-3B-Instruct config.json (the token ids come from the tokenizer built here).
QWEN2_5_VL_3B = {
    "text_config": dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
        num_attention_heads=16, num_key_value_heads=2, hidden_act="silu",
        max_position_embeddings=128000, rms_norm_eps=1e-6, tie_word_embeddings=True,
        sliding_window=32768, use_sliding_window=False, max_window_layers=70,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                         "mrope_section": [16, 24, 24]},
    ),
    "vision_config": dict(
        depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
        patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
        fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu",
    ),
    "tie_word_embeddings": True,
}

# OpenGVLab/InternVL3_5-2B-HF: InternViT-300M-448px + Qwen3-1.7B.
INTERNVL3_5_2B = {
    "text_config": dict(
        model_type="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False,
    ),
    "vision_config": dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
        hidden_act="gelu", image_size=[448, 448], patch_size=[14, 14], attention_bias=True,
        use_qk_norm=False, norm_type="layer_norm", layer_norm_eps=1e-6,
        layer_scale_init_value=0.1, use_mean_pooling=True,
    ),
    "downsample_ratio": 0.5, "projector_hidden_act": "gelu", "tie_word_embeddings": False,
    "tile": 448,
}

# --tiny: the same classes, shrunk (kept: patch sizes, merge rules, head structure).
TINY_VOCAB = 2048
TINY = {
    "qwen": {"text_config": dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                  "mrope_section": [2, 3, 3]}),
             "vision_config": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                   out_hidden_size=64, window_size=56, fullatt_block_indexes=[1])},
    "internvl": {"text_config": dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=16),
                 "vision_config": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, image_size=[56, 56]),
                 "tile": 56},
}


def _merged(base: dict, shrink: dict | None) -> dict:
    out = copy.deepcopy(base)
    for key, value in (shrink or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def _init_and_save(cls, config, out: Path, device: torch.device, seed: int, eos: list[int],
                   pad: int) -> None:
    """Random bf16 weights, initialised on ``device`` (seconds on a GPU), saved as a
    checkpoint; freed before the trainer loads it back."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.save_pretrained(out)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build_qwen2_5_vl(out: Path, device: torch.device, tiny: bool, seed: int = 0) -> None:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    from vlcohort.processors.tiny import QWEN_VL_SPECIALS, qwen_chat_template, train_byte_level_bpe

    spec = _merged(QWEN2_5_VL_3B, TINY["qwen"] if tiny else None)
    tok = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS,
                                pad_to=spec["text_config"]["vocab_size"])
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_VL_SPECIALS}
    text = dict(spec["text_config"], bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                eos_token_id=ids["<|im_end|>"], pad_token_id=tok.pad_token_id)
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=spec["vision_config"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    _init_and_save(Qwen2_5_VLForConditionalGeneration, config, out, device, seed,
                   [ids["<|im_end|>"]], tok.pad_token_id)
    # the checkpoint's image rule: 14 px patches merged 2 x 2, 3,136 .. 12,845,056 pixels
    images = Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                   min_pixels=3136, max_pixels=12845056)
    Qwen2_5_VLProcessor(image_processor=images, tokenizer=tok, video_processor=Qwen2VLVideoProcessor(),
                        chat_template=qwen_chat_template()).save_pretrained(out)


def build_internvl3_5(out: Path, device: torch.device, tiny: bool, seed: int = 1) -> None:
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    from vlcohort.processors.tiny import INTERNVL_SPECIALS, internvl_chat_template, train_byte_level_bpe

    spec = _merged(INTERNVL3_5_2B, TINY["internvl"] if tiny else None)
    named = {"start_image_token": "<img>", "end_image_token": "</img>",
             "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
    tok = train_byte_level_bpe(["<|endoftext|>"] + INTERNVL_SPECIALS, named,
                                pad_to=spec["text_config"]["vocab_size"])
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    ids = {t: tok.convert_tokens_to_ids(t) for t in INTERNVL_SPECIALS}
    tile = spec["tile"]
    seq = (tile // 14) ** 2 // 4  # patches per tile after the 0.5 pixel shuffle
    text = dict(spec["text_config"], bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                eos_token_id=ids["<|im_end|>"], pad_token_id=tok.pad_token_id)
    config = InternVLConfig(
        vision_config=spec["vision_config"], text_config=text, image_token_id=ids["<IMG_CONTEXT>"],
        image_seq_length=seq, downsample_ratio=spec["downsample_ratio"],
        projector_hidden_act=spec["projector_hidden_act"],
        tie_word_embeddings=spec["tie_word_embeddings"])
    _init_and_save(InternVLForConditionalGeneration, config, out, device, seed,
                   [ids["<|im_end|>"]], tok.pad_token_id)
    images = GotOcr2ImageProcessor(size={"height": tile, "width": tile}, crop_to_patches=True,
                                   min_patches=1, max_patches=12,
                                   image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    InternVLProcessor(image_processor=images, tokenizer=tok, video_processor=InternVLVideoProcessor(),
                      image_seq_length=seq, chat_template=internvl_chat_template()).save_pretrained(out)


BUILDERS = {"qwen25vl3b": build_qwen2_5_vl, "internvl35_2b": build_internvl3_5}

# ============================================================================ measuring


class RecordingEngine:
    """Wraps an agent's engine without changing what it does: keeps the last step's
    rollouts (for token counts) and the GPU memory peak of generation."""

    def __init__(self, inner, device: torch.device):
        self.inner, self.device = inner, device
        self.last = None
        self.peak_bytes = 0

    def generate(self, *args, **kwargs):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.last = self.inner.generate(*args, **kwargs)
        if self.device.type == "cuda":
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
        return self.last

    def update_weights(self, model) -> None:
        self.inner.update_weights(model)


def param_counts(model) -> dict[str, int]:
    """Parameters by role for the FLOP count (module docstring): the text decoder without
    its input embedding table, the LM head's V x d, and the vision tower + projector."""
    base = model.model
    lm = base.language_model
    emb = lm.get_input_embeddings().weight.numel()
    lm_all = sum(p.numel() for p in lm.parameters())
    base_all = sum(p.numel() for p in base.parameters())
    head = model.get_output_embeddings().weight
    return {"total": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "decoder_no_embedding": lm_all - emb, "lm_head": head.numel(),
            "vision": base_all - lm_all, "vocab": head.shape[0], "hidden": head.shape[1]}


def step_tokens(rollouts) -> dict[str, int]:
    """Real (unpadded) token counts of one agent's step."""
    mask = rollouts.prompts.inputs["attention_mask"]
    completion = sum(len(c) for c in rollouts.completions)
    return {"sequences": len(rollouts.completions), "prompt": int(mask.sum()),
            "completion": completion,
            "image": int(sum(sum(c) for c in rollouts.prompts.image_token_counts))}


def update_flops(p: dict[str, int], t: dict[str, int], ppo_epochs: int, logprob_passes: int) -> float:
    """6 x E + 2 x L times (decoder x all tokens + head x completion + vision x patches)."""
    per_pass = (p["decoder_no_embedding"] * (t["prompt"] + t["completion"])
                + p["lm_head"] * t["completion"] + p["vision"] * 4 * t["image"])
    return float((6 * ppo_epochs + 2 * logprob_passes) * per_pass)


# ============================================================================ the run


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="cohort steps (default 3)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="first steps left out of the summary (default 1, 0 with --steps 1)")
    ap.add_argument("--prompts", type=int, default=8, help="B, prompts per step (default 8)")
    ap.add_argument("--rollouts", type=int, default=8, help="G, completions per prompt (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=512, help="completion length (default 512)")
    ap.add_argument("--micro-batch", type=int, default=8,
                    help="sequences per training forward/backward (default 8; divides B x G)")
    ap.add_argument("--image-size", type=int, default=448, help="picture side in px (default 448)")
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--device", default=None, help="cuda | cuda:N | cpu (default: cuda; --tiny: cpu)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    ap.add_argument("--tiny", action="store_true",
                    help="shrunk models on the CPU: the same code path, figures meaningless")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--keep", default=None, help="keep the built checkpoints and run in this folder")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.tiny:
        for name, small in (("max_new_tokens", 8), ("image_size", 56), ("prompts", 2),
                            ("rollouts", 4)):
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, small)
        if args.micro_batch == ap.get_default("micro_batch"):
            args.micro_batch = args.prompts * args.rollouts
    args.device = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    if args.device.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA GPU visible: run on a GPU machine, or pass --tiny (CPU)")
    if args.warmup is None:
        args.warmup = 1 if args.steps > 1 else 0
    if args.steps < 1 or args.warmup >= args.steps:
        ap.error(f"--steps {args.steps} must be >= 1 and exceed --warmup {args.warmup}")
    if (args.prompts * args.rollouts) % args.micro_batch:
        ap.error(f"--micro-batch {args.micro_batch} must divide B x G = {args.prompts * args.rollouts}")
    return args


def run_config(args, folders: dict[str, Path], out_dir: Path):
    from vlcohort.config import load_config

    gc = "false" if args.no_gradient_checkpointing else "true"
    agents = ", ".join(f"{{name: {name}, path: '{path}', dtype: bfloat16, device: '{args.device}', "
                       f"attn_implementation: sdpa, gradient_checkpointing: {gc}}}"
                       for name, path in folders.items())
    B, G = args.prompts, args.rollouts
    return load_config(None, [
        "method=co_rl", f"agents=[{agents}]", "reward.topology=ring", "reward.tie=first",
        "reward.min_share=0", "reward.answer_style=last_letter",
        "data.source=synthetic", f"data.tasks=[{', '.join(TASKS)}]",
        f"data.num_problems={max(64, B * args.steps)}", f"data.image_size={args.image_size}",
        "rollout.engine=hf", f"rollout.prompts_per_step={B}", f"rollout.rollouts_per_prompt={G}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.temperature=1.0",
        "grpo.kl_coef=0", f"grpo.micro_batch_seqs={args.micro_batch}", "grpo.is_mode=truncate",
        "grpo.is_cap=3.0", "optim.lr=1e-6", "optim.warmup_ratio=0", "eval.every=0", "arms=[]",
        "log.plot=false", "log.tensorboard=false", "log.progress=false",
        "checkpoint.at_end=false", "checkpoint.every=0", f"run.steps={args.steps}",
        f"run.seed={args.seed}", f"run.output_dir={out_dir}",
        # one torch thread on the CPU: small models gain nothing from more (README)
        f"run.threads={1 if args.device.type == 'cpu' else 0}",
    ])


def measure(args) -> dict:
    from transformers.utils import logging as hf_logging

    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import train_step

    hf_logging.disable_progress_bar()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu_step-"))
    work.mkdir(parents=True, exist_ok=True)
    dev = args.device
    try:
        t0 = time.perf_counter()
        folders = {}
        for name, build in BUILDERS.items():
            folders[name] = work / name
            build(folders[name], dev, args.tiny)
        t_build = time.perf_counter() - t0
        cfg = run_config(args, folders, work / "run")
        t0 = time.perf_counter()
        run = setup(cfg)
        t_setup = time.perf_counter() - t0
        for agent in run.agents:
            agent.engine = RecordingEngine(agent.engine, dev)
        params = {a.name: param_counts(a.model) for a in run.agents}
        passes = int(cfg.grpo.ppo_epochs > 1) + int(cfg.grpo.kl_coef > 0)
        steps = []
        for step in range(1, args.steps + 1):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            record = train_step(run, step)
            run.step = step
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            row = {k.split("/", 1)[1]: record[k] for k in
                   ("timing/rollout", "timing/grading", "timing/update", "timing/step")}
            row = {"step": step, **{f"{k}_s": v for k, v in row.items()}}
            tokens = {a.name: step_tokens(a.engine.last) for a in run.agents}
            updated = [a.name for a in run.agents if f"agent/{a.name}/loss" in record]
            flops = sum(update_flops(params[n], tokens[n], cfg.grpo.ppo_epochs, passes)
                        for n in updated)
            generated = sum(t["completion"] for t in tokens.values())
            row.update({
                "generated_tokens": generated,
                "generated_tokens_per_s": generated / row["rollout_s"],
                "trained_tokens": sum(tokens[n]["prompt"] + tokens[n]["completion"] for n in updated),
                "agents_updated": updated,
                "update_tflop": flops / 1e12,
                "train_tflops_per_s": flops / row["update_s"] / 1e12,
                "mfu": flops / row["update_s"] / (args.peak_tflops * 1e12),
                "peak_mem_gb": (torch.cuda.max_memory_allocated(dev) / 2**30
                                if dev.type == "cuda" else None),
                "peak_mem_rollout_gb": (max(a.engine.peak_bytes for a in run.agents) / 2**30
                                        if dev.type == "cuda" else None),
                "tokens": tokens,
                "reward_mean": {a.name: record[f"agent/{a.name}/reward/mean"] for a in run.agents},
            })
            # the rest of the step: rendering the prompts (images processed), metrics
            row["other_s"] = row["step_s"] - row["rollout_s"] - row["grading_s"] - row["update_s"]
            for phase in ("rollout", "grading", "update", "other"):
                row[f"{phase}_share"] = row[f"{phase}_s"] / row["step_s"]
            steps.append(row)
            print_row(row)
        return {
            "what": "two-agent Co-RL cohort steps, random-weight Qwen2.5-VL-3B x InternVL3.5-2B "
                    "(full size)" + (" -- TINY shrunk configs, CPU code-path check" if args.tiny else ""),
            "tiny": args.tiny, "device": str(dev), "gpu": (torch.cuda.get_device_name(dev)
                                                           if dev.type == "cuda" else None),
            "versions": {"torch": torch.__version__, "transformers": _version("transformers"),
                         "python": platform.python_version()},
            "settings": {"steps": args.steps, "warmup": args.warmup, "prompts": args.prompts,
                         "rollouts": args.rollouts, "max_new_tokens": args.max_new_tokens,
                         "micro_batch": args.micro_batch, "image_size": args.image_size,
                         "gradient_checkpointing": not args.no_gradient_checkpointing,
                         "engine": "hf", "dtype": "bfloat16", "peak_tflops": args.peak_tflops},
            "params": params,
            "build_s": t_build, "setup_s": t_setup,
            "flops_formula": "(6 x ppo_epochs + 2 x logprob_passes) x (P_decoder_no_embedding x "
                             "(prompt + completion tokens) + V x d x completion tokens + "
                             "P_vision x 4 x image tokens); attention FLOPs and "
                             "gradient-checkpointing recompute not included",
            "steps": steps,
            "summary": summarise(steps[args.warmup:]),
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


SUMMARY_KEYS = ("rollout_s", "grading_s", "update_s", "other_s", "step_s", "rollout_share",
                "grading_share", "update_share", "other_share", "generated_tokens_per_s", "train_tflops_per_s", "mfu",
                "peak_mem_gb", "peak_mem_rollout_gb")


def summarise(rows: list[dict]) -> dict:
    out = {"steps": [r["step"] for r in rows]}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = (max(values) if key.startswith("peak") else statistics.median(values)) \
            if values else None
    return out


def _fmt(v, unit="") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"
    return f"{v}{unit}"


def _count(n: int) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e8 else f"{n / 1e6:.3f} M"


def print_row(r: dict) -> None:
    print(f"step {r['step']}: rollout {_fmt(r['rollout_s'], ' s')} | grading "
          f"{_fmt(r['grading_s'], ' s')} | update {_fmt(r['update_s'], ' s')} | step "
          f"{_fmt(r['step_s'], ' s')} | {_fmt(r['generated_tokens_per_s'])} gen tok/s | MFU "
          f"{_fmt(r['mfu'])} | peak {_fmt(r['peak_mem_gb'], ' GB')} | updated "
          f"{','.join(r['agents_updated']) or 'none'}", flush=True)


def print_summary(res: dict) -> None:
    s, st = res["summary"], res["settings"]
    print()
    print(f"{res['what']}")
    print(f"device {res['device']} ({res['gpu'] or 'no GPU'}); B={st['prompts']} x G={st['rollouts']} "
          f"x {st['max_new_tokens']} new tokens per agent, micro-batch {st['micro_batch']}, "
          f"{st['image_size']} px images, bf16, gradient checkpointing "
          f"{'on' if st['gradient_checkpointing'] else 'off'}; build {res['build_s']:.1f} s, "
          f"setup {res['setup_s']:.1f} s; median of steps {s['steps']}")
    for name, p in res["params"].items():
        print(f"  {name}: {_count(p['total'])} parameters (decoder {_count(p['decoder_no_embedding'])}, "
              f"LM head {_count(p['lm_head'])}, vision + projector {_count(p['vision'])})")
    rows = [("rollout (both agents)", s["rollout_s"], s["rollout_share"]),
            ("grading (answers, votes, rewards)", s["grading_s"], s["grading_share"]),
            ("update (both agents)", s["update_s"], s["update_share"]),
            ("other (render prompts, metrics)", s["other_s"], s["other_share"]),
            ("step", s["step_s"], 1.0 if s["step_s"] else None)]
    print(f"  {'phase':36s} {'seconds':>10s} {'share of step':>14s}")
    for name, sec, share in rows:
        print(f"  {name:36s} {_fmt(sec):>10s} {_fmt(share):>14s}")
    print(f"  {'generated tokens / s':36s} {_fmt(s['generated_tokens_per_s']):>10s}")
    print(f"  {'training TFLOP/s (model FLOPs)':36s} {_fmt(s['train_tflops_per_s']):>10s}")
    print(f"  {'MFU vs ' + _fmt(st['peak_tflops']) + ' TFLOP/s bf16':36s} {_fmt(s['mfu']):>10s}")
    print(f"  {'peak GPU memory, step (GB)':36s} {_fmt(s['peak_mem_gb']):>10s}")
    print(f"  {'peak GPU memory, generation (GB)':36s} {_fmt(s['peak_mem_rollout_gb']):>10s}")
    print(f"mfu={_fmt(s['mfu'])} generated_tokens_per_s={_fmt(s['generated_tokens_per_s'])} "
          f"step_s={_fmt(s['step_s'])}")


def main(argv=None) -> int:
    _quiet_environment()
    args = parse_args(argv)
    res = measure(args)
    print_summary(res)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
