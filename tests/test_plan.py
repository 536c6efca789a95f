"""``vlcohort plan``: parameter counts against the real classes, model states against
DeepSpeed's own estimators, activations and totals against a measured CPU update, and bad
inputs (``vlcohort/plan.py``, ``docs/plan.md``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.bench import load_script
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.plan import (
    GIB,
    attention_mask_bytes,
    kv_cache_bytes_per_token,
    layer_activation_bytes_per_token,
    lora_params,
    model_facts,
    plain_state_bytes,
    plan,
    zero_state_bytes,
)
from vlcohort.typed_yaml import ConfigError

TINY = ("qwen2", "qwen2_5_vl", "internvl3_5", "gemma3")

#: The parameter count the hub lists for Qwen/Qwen2.5-VL-7B-Instruct (its safetensors
#: index's total, "8.29B params" on the model page).
QWEN25VL_7B_PARAMS = 8_292_166_656


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _ds_model_to_params(model):
    from deepspeed.runtime.zero.stage3 import model_to_params

    return model_to_params(model)


# ----------------------------------------------------------------------------- counts


@pytest.mark.parametrize("name", TINY)
def test_meta_counts_equal_the_real_models(name):
    """Meta-device counts = sum(p.numel()) and DeepSpeed's largest layer of the real model."""
    from vlcohort.processors import adapter_for

    facts = model_facts(f"tiny:{name}")
    real = adapter_for(f"tiny:{name}").load_model()
    total, largest = _ds_model_to_params(real)
    assert facts.params == sum(p.numel() for p in real.parameters()) == total
    assert facts.largest_layer_params == largest
    assert facts.model_class == type(real).__name__


def test_lora_count_equals_peft():
    from peft import LoraConfig, get_peft_model

    from vlcohort.processors import adapter_for

    facts = model_facts("tiny:qwen2_5_vl")
    for targets in ("all-linear", "q_proj,v_proj"):
        model = adapter_for("tiny:qwen2_5_vl").load_model()
        tlist = targets if targets == "all-linear" else targets.split(",")
        peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=tlist))
        trained = sum(p.numel() for p in peft.parameters() if p.requires_grad)
        assert lora_params(list(facts.linear_shapes), 8, targets, facts.output_layer) == trained


def _published_config(published_path) -> dict:
    return json.loads((published_path("qwen2_5_vl_7b_instruct") / "config.json").read_text())


def test_published_qwen25vl_7b_count(published_path, tmp_path):
    """The meta count of the published config is the hub's figure, and equals a real
    instantiation of depth- and vocabulary-reduced copies scaled back linearly."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.initialization import no_init_weights

    folder = tmp_path / "q7"
    folder.mkdir()
    published = _published_config(published_path)
    (folder / "config.json").write_text(json.dumps(published))
    facts = model_facts(str(folder))
    assert facts.params == QWEN25VL_7B_PARAMS
    assert (facts.layers, facts.hidden, facts.kv_heads, facts.head_dim, facts.vocab) == (28, 3584, 4, 128, 152064)

    def real_count(layers: int, depth: int, vocab: int) -> int:
        cfg = json.loads(json.dumps(published))
        cfg.update(num_hidden_layers=layers, vocab_size=vocab)
        cfg["vision_config"].update(depth=depth, fullatt_block_indexes=[0])
        sub = tmp_path / f"c{layers}{depth}{vocab}"
        sub.mkdir()
        (sub / "config.json").write_text(json.dumps(cfg))
        with no_init_weights():  # real CPU tensors, left uninitialised (never touched)
            model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(sub),
                                                            dtype=torch.bfloat16)
        assert next(model.parameters()).device.type == "cpu"
        return sum(p.numel() for p in model.parameters())

    base = real_count(1, 1, 1024)
    per_text_layer = real_count(2, 1, 1024) - base
    per_vision_block = real_count(1, 2, 1024) - base
    per_128_tokens = real_count(1, 1, 1152) - base
    scaled = (base + 27 * per_text_layer + 31 * per_vision_block
              + (152064 - 1024) // 128 * per_128_tokens)
    assert scaled == facts.params


# ----------------------------------------------------------------------------- DeepSpeed


def _ds_estimates(P: int, largest: int, gpus: int):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    out = {}
    for off in (False, True):
        out[(2, off, False)] = estimate_zero2_model_states_mem_needs(P, gpus, 1, cpu_offload=off)
        for off_p in ((False, True) if off else (False,)):
            cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, largest, gpus, 1, cpu_offload=off,
                                                                cpu_offload_params=off_p,
                                                                zero_init=False)
            out[(3, off, off_p)] = (cpu, gpu)
    return out


def _printed_gib(fn, *args) -> list[float]:
    """The per-GPU GiB column of a DeepSpeed ``*_all_cold`` table."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return [float(m) for m in re.findall(r"\|\s+([\d.]+)GB \|", buf.getvalue())]


def test_zero_states_equal_deepspeeds_estimators(published_path, tmp_path):
    """Bytes of zero_state_bytes = DeepSpeed's estimators (GPU and host), byte for byte,
    for the tiny models and the published 7B config over 1-8 GPUs; and the printed
    ``*_all_cold`` tables (GiB to two decimals) read the same."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_cold
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs_all_cold

    folder = tmp_path / "q7"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_published_config(published_path)))
    worst = 0.0
    for facts in [model_facts("tiny:qwen2_5_vl"), model_facts(str(folder))]:
        P, big = facts.params, facts.largest_layer_params
        for gpus in (1, 2, 4, 8):
            ds = _ds_estimates(P, big, gpus)
            for (stage, off, off_p), (cpu, gpu) in ds.items():
                ours = zero_state_bytes(P, P, stage, gpus, 2, big, off, off_p)
                worst = max(worst, abs(ours.gpu - gpu) / gpu, abs(ours.host - cpu) / cpu)
                assert abs(ours.gpu - gpu) <= 1 and abs(ours.host - cpu) <= 1, (stage, off, off_p, gpus)
            z2 = _printed_gib(estimate_zero2_model_states_mem_needs_all_cold, P, gpus)
            assert z2 == [round(zero_state_bytes(P, P, 2, gpus, 2, big, o).gpu / GIB, 2) for o in (True, False)]
            z3 = _printed_gib(estimate_zero3_model_states_mem_needs_all_cold, P, big, gpus)
            ours3 = [zero_state_bytes(P, P, 3, gpus, 2, big, True, True).gpu] * 2 + \
                    [zero_state_bytes(P, P, 3, gpus, 2, big, True, False).gpu] * 2 + \
                    [zero_state_bytes(P, P, 3, gpus, 2, big, False, False).gpu] * 2
            assert z3 == [round(b / GIB, 2) for b in ours3]
    print(f"largest relative difference from DeepSpeed's estimators: {worst:.2e}")
    assert worst < 1e-9


def test_bytes_per_parameter_by_hand():
    """Hand-computed per-parameter bytes: plain AdamW 4 x dtype; ZeRO-1 2 + 2 + 16 / R;
    ZeRO-2 2 + 18 / R; ZeRO-3 18 / R + 4 x largest; stage 0 = 20; float32 ZeRO-2 4 + 12 / R."""
    P = 1000
    assert plain_state_bytes(P, P, 2).gpu == 8 * P
    assert plain_state_bytes(P, P, 4).gpu == 16 * P
    assert plain_state_bytes(P, 100, 2, trainable_bytes=4).gpu == 900 * 2 + 100 * 16
    assert zero_state_bytes(P, P, 0, 4, 2).gpu == 20 * P
    assert zero_state_bytes(P, P, 1, 4, 2).gpu == 4 * P + 16 * P // 4
    assert zero_state_bytes(P, P, 2, 4, 2).gpu == 2 * P + 18 * P // 4
    assert zero_state_bytes(P, P, 3, 4, 2, largest_layer=10).gpu == 18 * P // 4 + 40
    assert zero_state_bytes(P, P, 2, 4, 4).gpu == 4 * P + 12 * P // 4


def test_cache_and_activation_formulas_by_hand():
    # Qwen2.5-VL-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes
    assert kv_cache_bytes_per_token(28, 4, 128, 2) == 57_344
    assert kv_cache_bytes_per_token(28, 4, 128, 2, tensor_parallel=2) == 28_672
    # h = q = 8, I = 16, bf16: norms 2 (4 + 4) 8 = 128, Q K V 2 x 24 = 48, out 2 x 2 x 8 = 32,
    # MLP 4 x 2 x 16 = 128
    assert layer_activation_bytes_per_token(8, 8, 16, 2) == 336
    assert attention_mask_bytes(2, 10, 2, 3) == 2 * 100 * 7


# ----------------------------------------------------------------------------- measured

MEASURE = r'''
import gc, json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

from vlcohort.config import load_config
from vlcohort.plan import plan
from vlcohort.processors.base import RenderedPrompt
from vlcohort.rollout.base import Rollouts
from vlcohort.training.agent import build_agent
from vlcohort.training.update import update_agent
G, N, T, words = 2, 8, 128, (200, 150, 200, 150)
for folder, dtype, ckpt, shared in json.loads(sys.argv[1]):
    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: '%s', dtype: %s, "
                             "gradient_checkpointing: %s}]" % (folder, dtype, str(ckpt).lower()),
                             f"grpo.shared_prefix={str(shared).lower()}",
                             f"rollout.prompts_per_step={N // G}", f"rollout.rollouts_per_prompt={G}",
                             f"rollout.max_new_tokens={T}", f"grpo.micro_batch_seqs={N // 2}",
                             "grpo.max_grad_norm=0", "grpo.packing=false", "optim.warmup_ratio=0",
                             "optim.schedule=constant", "data.max_prompt_tokens=0"])
    agent = build_agent(cfg.agents[0], cfg)
    rendered = [RenderedPrompt(f"p{b}", " ".join(["apple"] * w), []) for b, w in enumerate(words)]
    gen = torch.Generator().manual_seed(0)
    comps = [torch.randint(10, 500, (T,), generator=gen).tolist() for _ in range(N)]
    ro = Rollouts(prompts=None, completions=comps, texts=[""] * N, logprobs=torch.full((N, T), -1.0),
                  finished=[False] * N, group_size=G)
    adv = torch.tensor([1.0, -1.0] * (N // 2))
    update_agent(agent, rendered, ro, adv, cfg.grpo, 1.0, length_norm=T)  # Adam states, one-time work
    base = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM)
    update_agent(agent, rendered, ro, adv, cfg.grpo, 1.0, length_norm=T)
    peak = status("VmHWM")
    P = agent.adapter.encode_prompts([rendered[0]]).inputs["input_ids"].shape[1]
    a = plan(cfg, 1000.0, 1, prompt_tokens=P, suggest=False).agents[0]
    print(json.dumps({"measured": peak - base, "parts": a.parts, "shared": a.shared_prefix}), flush=True)
    del agent
    gc.collect()
'''

#: (dtype, gradient checkpointing, layers, vocabulary (0: the tokenizer's), grpo.shared_prefix)
#: of each measured update.
MEASURED = [("float32", False, 4, 0, False), ("bfloat16", True, 4, 0, False),
            ("float32", False, 2, 65536, False), ("float32", False, 4, 0, True)]


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """``(layers, vocab) -> folder``: a real-class Qwen2 checkpoint big enough for
    activations (or, with a large vocabulary, the logits) to dominate the update (hidden
    256, MLP 768, 4 heads), with the tiny model's tokenizer (its ids are all < 577)."""
    from transformers import AutoConfig, Qwen2ForCausalLM

    from vlcohort.processors.tiny import tiny_model_path

    src = tiny_model_path("tiny:qwen2")
    root = tmp_path_factory.mktemp("plan")

    def build(layers: int, vocab: int) -> Path:
        folder = root / f"qwen2-{layers}-{vocab}"
        if folder.is_dir():
            return folder
        folder.mkdir()
        for f in src.iterdir():
            if f.suffix != ".safetensors" and f.name != "config.json":
                shutil.copy(f, folder / f.name)
        cfg = AutoConfig.from_pretrained(src)
        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 256, 768, layers
        cfg.num_attention_heads = cfg.num_key_value_heads = 4
        cfg.layer_types = ["full_attention"] * layers
        cfg.vocab_size = max(cfg.vocab_size, vocab)
        cfg.tie_word_embeddings = False
        torch.manual_seed(0)
        Qwen2ForCausalLM(cfg).save_pretrained(folder)
        return folder

    return build


@pytest.fixture(scope="module")
def measured_updates(small_checkpoint, tmp_path_factory) -> list[dict]:
    """One real update per :data:`MEASURED` case (``update_agent``, two micro-batches of 4
    padded sequences of ~400-550 tokens), in one fresh process: the peak resident memory
    above the state before it (weights and Adam states already there), and the plan of
    the same config. glibc returns every block above 64 KiB to the system
    (MALLOC_MMAP_THRESHOLD_), so RSS follows the tensors."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc (clear_refs resets the peak RSS)")
    script = tmp_path_factory.mktemp("measure") / "measure.py"
    script.write_text(MEASURE)
    cases = [[str(small_checkpoint(layers, vocab)), dtype, ckpt, shared]
             for dtype, ckpt, layers, vocab, shared in MEASURED]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script), json.dumps(cases)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.strip().splitlines()[-len(MEASURED):]]


@pytest.mark.parametrize("case", range(len(MEASURED)),
                         ids=["fp32", "bf16-ckpt", "fp32-vocab64k", "fp32-shared-prefix"])
def test_planned_update_against_measured_peak(measured_updates, case):
    """The plan's gradients + activations + logits against the measured peak. The plan is
    an upper bound: it must not fall below the measurement, and it over-counts by at most
    15% (measured: +1.8%, +2.3% and, logits first with a 65,536-token vocabulary, +0.8%;
    with grpo.shared_prefix, each micro-batch's two prompts once beside their two
    completions each, +0.9%; docs/plan.md)."""
    dtype, ckpt, _, vocab, shared = MEASURED[case]
    rec = measured_updates[case]
    parts = rec["parts"]
    planned = parts["grads"] + max(parts["activations"] + parts["logits"], parts["embedding_grad"])
    error = planned / rec["measured"] - 1
    print(f"{dtype} checkpointing={ckpt} vocab={vocab or 577} shared_prefix={shared}: measured "
          f"{rec['measured'] / 2**20:.0f} MiB, planned {planned / 2**20:.0f} MiB, error {error:+.1%}")
    assert 0.0 <= error <= 0.15
    assert rec["shared"] == shared  # the plan counted each prompt once where the update did


def test_shared_prefix_measured_below_the_unshared(measured_updates):
    """The shared-prefix update's measured peak is below the same update unshared (318 ->
    199 MiB measured: the update did share), and the plan's activations fall with it."""
    plain, shared = measured_updates[0], measured_updates[3]
    assert shared["measured"] < plain["measured"]
    assert shared["parts"]["activations"] < plain["parts"]["activations"]


# ----------------------------------------------------------------------------- the plan


def _cfg(*overrides):
    return load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2', device: cuda}, "
                              "{name: B, path: 'tiny:qwen2_5_vl', device: cuda}]",
                              "data.max_prompt_tokens=512", *overrides])


def test_vllm_engine_by_hand(published_path, tmp_path):
    """Qwen2.5-VL-7B at the recipes' 45% of 80 GiB: 36 GiB, 16-bit weights, 1 GiB + the
    profile (8,192 tokens x (2 x 18,944 + 4 x 3,584) x 2 B + 256 x 152,064 x 4 B), the rest
    KV cache at 57,344 B per token."""
    from vlcohort.config import VLLMConfig
    from vlcohort.plan import vllm_engine_bytes

    folder = tmp_path / "q7"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_published_config(published_path)))
    f = model_facts(str(folder))
    eng = vllm_engine_bytes(f, VLLMConfig(gpu_memory_utilization=0.45), 80 * GIB)
    other = GIB + 8192 * (2 * 18944 + 4 * 3584) * 2 + 256 * 152064 * 4
    assert eng["total"] == int(0.45 * 80 * GIB) and eng["weights"] == 2 * QWEN25VL_7B_PARAMS
    assert eng["other"] == other and eng["kv_per_token"] == 57_344
    assert eng["kv_cache"] == eng["total"] - 2 * QWEN25VL_7B_PARAMS - other
    tp2 = vllm_engine_bytes(f, VLLMConfig(tensor_parallel_size=2, kv_cache_memory_gib=4.0), 80 * GIB)
    assert tp2["weights"] == QWEN25VL_7B_PARAMS and tp2["kv_cache"] == 4 * GIB
    assert tp2["total"] == tp2["weights"] + 4 * GIB + tp2["other"]
    # dtype auto serves the policy's own dtype (vlcohort/rollout/vllm.py): float32 weights
    # for a float32 policy, whatever the checkpoint holds; a named dtype wins
    fp32 = vllm_engine_bytes(f, VLLMConfig(gpu_memory_utilization=0.45), 80 * GIB, policy_bytes=4)
    assert fp32["weights"] == 4 * QWEN25VL_7B_PARAMS
    named = vllm_engine_bytes(f, VLLMConfig(dtype="bfloat16"), 80 * GIB, policy_bytes=4)
    assert named["weights"] == 2 * QWEN25VL_7B_PARAMS


def test_plan_sums_its_parts_and_places_agents():
    p = plan(_cfg("rollout.engine=vllm"), 80, 1)
    a, b = p.agents
    assert a.gpu == b.gpu == 0 and a.optimizer == "adamw"
    assert a.resident == a.parts["weights"] + a.parts["grads"] + a.parts["optimizer"]
    # the first engine sleeps in one process, the second cannot
    assert a.engine_sleeps and not b.engine_sleeps
    gen = a.resident + b.resident + b.engine_awake + a.engine_awake
    assert p.gpu_phases[0]["generation"] == gen
    assert p.gpu_phases[0]["update"] == a.resident + b.resident + b.engine_awake + max(
        a.update_extra, b.update_extra)
    q = plan(_cfg("distributed.zero_stage=3"), 80, 4)
    assert [x.gpu for x in q.agents] == [0, 2] and q.agents[0].optimizer == "zero-3"
    assert q.agents[0].parts["weights"] == q.agents[0].params * 4 // 2


def test_plan_names_the_first_knob():
    """An agent whose activations overflow the GPU gets gradient checkpointing first
    (the unshared plan: shared prefixes shrink the need this test scales from)."""
    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2', device: cuda}]",
                             "rollout.prompts_per_step=8", "rollout.rollouts_per_prompt=8",
                             "grpo.micro_batch_seqs=64", "rollout.max_new_tokens=1024",
                             "data.max_prompt_tokens=3072", "grpo.shared_prefix=false"])
    need = plan(cfg, 1000, 1).gpu_peaks[0]
    p = plan(cfg, need / GIB * 0.9, 1)
    assert not p.fits
    assert p.agents[0].knob.startswith("agents.0.gradient_checkpointing=true"), p.agents[0].knob
    smaller = plan(cfg, need / GIB * 0.02, 1).agents[0].knob  # checkpointing alone is not enough
    assert smaller.startswith("grpo.micro_batch_seqs="), smaller


def test_token_budget_micro_batches_and_their_knob():
    """grpo.micro_batch_tokens sets the forward's tokens (a longer sequence alone), and the
    knob halves it rather than switching to micro_batch_seqs (unshared; the shared split:
    tests/test_plan_shared_prefix.py)."""
    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2', device: cuda}]",
                             "rollout.max_new_tokens=64", "data.max_prompt_tokens=192",
                             "grpo.micro_batch_tokens=1024", "grpo.shared_prefix=false"])
    a = plan(cfg, 80, 1).agents[0]
    f = model_facts("tiny:qwen2")
    per_layer = layer_activation_bytes_per_token(f.hidden, f.heads * f.head_dim, f.mlp_width, 4)
    assert a.micro_seqs == 4 and a.seq_tokens == 256
    assert a.parts["activations"] == 1024 * (f.layers * per_layer + 12 * f.hidden) + \
        attention_mask_bytes(4, 256, 4, f.layers)
    need = plan(cfg, 1000, 1).gpu_peaks[0]
    cfg.agents[0].gradient_checkpointing = True  # leave the budget as the first knob
    knob = plan(cfg, need / GIB * 0.5, 1).agents[0].knob
    assert knob.startswith("grpo.micro_batch_tokens="), knob


def test_vision_patches_per_image_token():
    from types import SimpleNamespace as NS

    from vlcohort.plan import patches_per_image_token

    assert patches_per_image_token(NS(vision_config=NS(spatial_merge_size=2))) == 4  # Qwen-VL 2 x 2
    assert patches_per_image_token(NS(vision_config=NS(), downsample_ratio=0.5)) == 4  # InternVL
    gemma = NS(vision_config=NS(image_size=896, patch_size=14), mm_tokens_per_image=256)
    assert patches_per_image_token(gemma) == 16  # 64 x 64 patches pooled to 256 tokens
    cfg = _cfg("grpo.shared_prefix=false")  # every sequence's images (shared: each prompt's once)
    f = model_facts("tiny:qwen2_5_vl")
    plain, seen = plan(cfg, 80, 1).agents[1], plan(cfg, 80, 1, image_tokens=10).agents[1]
    vpl = layer_activation_bytes_per_token(f.vision_hidden, f.vision_hidden, f.vision_mlp, 4)
    patches = seen.micro_seqs * 10 * 4
    extra = patches * (f.vision_layers * vpl + 12 * f.vision_hidden)
    assert seen.parts["activations"] - plain.parts["activations"] == extra


def test_cli_plan_table_and_json(capsys):
    assert main(["plan", "agents.0.path=tiny:qwen2", "--gpus", "2", "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert "fits: yes" in out and "zero-2" in out
    assert main(["plan", "--json", "--gpus", "2", "--prompt-tokens", "64"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] and data["gpus"] == 2 and len(data["agents"]) == 2


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("case", ["no_config", "unknown_type", "uncached_hub", "gpu_size", "gpus",
                                  "device"])
def test_bad_inputs_are_one_line_errors(case, tmp_path, capsys):
    args = ["plan", "--gpus", "1"]
    if case == "no_config":
        (tmp_path / "empty").mkdir()
        args.append(f"agents.0.path={tmp_path / 'empty'}")
        want = "agents.0.path"
    elif case == "unknown_type":
        (tmp_path / "odd").mkdir()
        (tmp_path / "odd" / "config.json").write_text('{"model_type": "no_such_model"}')
        args.append(f"agents.1.path={tmp_path / 'odd'}")
        want = "no_such_model"
    elif case == "uncached_hub":
        args.append("agents.1.path=someone/not-cached-model")
        want = "hf download someone/not-cached-model config.json"
    elif case == "gpu_size":
        args += ["--gpu-gib", "0"]
        want = "--gpu-gib"
    elif case == "gpus":
        args = ["plan", "--gpus", "3"]
        want = "distributed.ranks_per_agent"
    else:
        args.append("agents.0.device=cuda:1")
        want = "agents.0.device"
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert want in err and len(err.splitlines()) == 1, err
    if case == "uncached_hub":
        assert "agents.1.path" in err
    if case == "gpu_size":
        for bad in (-5, float("nan")):
            with pytest.raises(ConfigError, match="--gpu-gib"):
                plan(load_config(None, []), bad, 1)


def test_bench_gpu_step_full_size_configs_plan_at_the_published_counts(tmp_path):
    """The configs of ``bench/gpu_step.py`` (the device check's full-size pair), written as
    config.json files: the planner's meta counts are the published models' (Qwen2.5-VL-3B
    3,754,622,976, as its model card; InternVL3.5-2B 2.35 B) and equal a meta-device
    instantiation of the real classes."""

    import torch
    from transformers import (
        InternVLConfig,
        InternVLForConditionalGeneration,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    bench = load_script("gpu_step")
    q, i = bench.QWEN2_5_VL_3B, bench.INTERNVL3_5_2B
    configs = {
        "qwen": (Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLConfig(
            text_config=q["text_config"], vision_config=q["vision_config"],
            tie_word_embeddings=q["tie_word_embeddings"])),
        "intern": (InternVLForConditionalGeneration, InternVLConfig(
            vision_config=i["vision_config"], text_config=i["text_config"],
            downsample_ratio=i["downsample_ratio"], projector_hidden_act=i["projector_hidden_act"],
            tie_word_embeddings=i["tie_word_embeddings"])),
    }
    counts = {}
    for name, (cls, config) in configs.items():
        config.save_pretrained(tmp_path / name)
        facts = model_facts(str(tmp_path / name))
        with torch.device("meta"):
            real = cls._from_config(config, dtype=torch.bfloat16)
        assert facts.params == sum(p.numel() for p in real.parameters()), name
        counts[name] = facts.params
    assert counts["qwen"] == 3_754_622_976
    assert round(counts["intern"] / 1e9, 2) == 2.35
