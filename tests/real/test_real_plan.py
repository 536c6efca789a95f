"""``vlcohort plan``'s update memory against a measured update of a real checkpoint.

``tests/test_plan.py`` checks the plan's gradients + activations + logits against the peak
of real ``update_agent`` calls on small Qwen2-class models built for the test; here the
same measurement runs on the real SmolLM2-135M-Instruct (30 layers, hidden 576, grouped
KV heads, tied embeddings, a 49,152-token vocabulary), float32, with and without gradient
checkpointing: one update of two micro-batches of four padded sequences (two prompts of
~180 and ~100 tokens, 48 completion tokens each), in
a fresh process, its peak resident memory above the state before it (weights, gradients'
first allocation and Adam's states already there from a short warm-up update), against
the plan of the same config (``vlcohort/plan.py``, ``docs/plan.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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

folder, G, N, T, words = sys.argv[1], 2, 8, 48, (180, 100, 180, 100)

def rollouts(n, t, seed):
    gen = torch.Generator().manual_seed(seed)
    comps = [torch.randint(10, 500, (t,), generator=gen).tolist() for _ in range(n)]
    return Rollouts(prompts=None, completions=comps, texts=[""] * n, logprobs=torch.full((n, t), -1.0),
                    finished=[False] * n, group_size=G)

for ckpt in json.loads(sys.argv[2]):
    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: '%s', dtype: float32, "
                             "gradient_checkpointing: %s}]" % (folder, str(ckpt).lower()),
                             f"rollout.prompts_per_step={N // G}", f"rollout.rollouts_per_prompt={G}",
                             f"rollout.max_new_tokens={T}", f"grpo.micro_batch_seqs={N // 2}",
                             "grpo.max_grad_norm=0", "grpo.packing=false", "grpo.shared_prefix=false",
                             "optim.warmup_ratio=0",
                             "optim.schedule=constant", "data.max_prompt_tokens=0"])
    agent = build_agent(cfg.agents[0], cfg)
    rendered = [RenderedPrompt(f"p{b}", " ".join(["apple"] * w), []) for b, w in enumerate(words)]
    # a short warm-up update allocates the gradients' and Adam's states (one-time work)
    update_agent(agent, [RenderedPrompt("w", "apple", [])], rollouts(G, 4, 1),
                 torch.tensor([1.0, -1.0]), cfg.grpo, 1.0, length_norm=4)
    adv = torch.tensor([1.0, -1.0] * (N // 2))
    ro = rollouts(N, T, 0)
    base = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM)
    update_agent(agent, rendered, ro, adv, cfg.grpo, 1.0, length_norm=T)
    peak = status("VmHWM")
    P = agent.adapter.encode_prompts([rendered[0]]).inputs["input_ids"].shape[1]
    a = plan(cfg, 1000.0, 1, prompt_tokens=P, suggest=False).agents[0]
    print(json.dumps({"measured": peak - base, "parts": a.parts, "prompt_tokens": P}), flush=True)
    del agent
    gc.collect()
'''

#: Gradient checkpointing of each measured update.
CKPT = [False, True]


def _planned(rec: dict) -> int:
    parts = rec["parts"]
    return parts["grads"] + max(parts["activations"] + parts["logits"], parts["embedding_grad"])


@pytest.fixture(scope="module")
def measured(smollm2_path, tmp_path_factory) -> list[dict]:
    """One real update of SmolLM2-135M-Instruct per :data:`CKPT` case, in one fresh process
    (glibc returns every block above 64 KiB to the system, MALLOC_MMAP_THRESHOLD_, so RSS
    follows the tensors), with the plan of the same config."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc (clear_refs resets the peak RSS)")
    script = tmp_path_factory.mktemp("measure") / "measure.py"
    script.write_text(MEASURE)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script), smollm2_path, json.dumps(CKPT)], capture_output=True,
                         text=True, env=env, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.strip().splitlines()[-len(CKPT):]]


#: With checkpointing the peak is not the activations but the embedding's backward at the
#: end of the pass: SmolLM2 ties its embedding to the LM head, so in a micro-batch after the
#: first the head's weight gradient waits in autograd's buffer for the whole backward pass
#: ([V, h] float32), then the embedding's dense gradient and their sum are made next to it:
#: 3 x 49,152 x 576 x 4 B = 324 MiB above the gradients (measured 321-323 MiB), more than the
#: checkpointed activations + logits (254 MiB). ``plan.embedding_grad_bytes`` counts it; before
#: it did, this case was 8% under the measurement.
@pytest.mark.parametrize("case", [0, 1], ids=["fp32", "fp32-ckpt"])
def test_planned_update_against_measured_peak_real(measured, case):
    """The plan's gradients + the larger of (activations + logits) and the embedding's
    backward, against the measured peak of the real checkpoint's update: an upper bound,
    over by at most 15% (docs/plan.md)."""
    rec = measured[case]
    planned = _planned(rec)
    error = planned / rec["measured"] - 1
    print(f"SmolLM2-135M fp32 checkpointing={CKPT[case]} prompt={rec['prompt_tokens']} tokens: "
          f"measured {rec['measured'] / 2**20:.0f} MiB, planned {planned / 2**20:.0f} MiB, error {error:+.1%}")
    assert 0.0 <= error <= 0.15


def test_the_tolerance_tells_checkpointing_apart(measured):
    """The check can fail: each case's plan held against the other case's measurement
    (the activations of every layer against one layer's recomputation) is outside 0..+15%."""
    off, on = measured
    over = _planned(off) / on["measured"] - 1
    under = _planned(on) / off["measured"] - 1
    print(f"plan without checkpointing vs measured with it: {over:+.1%}; "
          f"plan with checkpointing vs measured without it: {under:+.1%}")
    assert over > 0.15 and under < 0.0
