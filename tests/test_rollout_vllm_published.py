"""The ``vllm`` rollout engine on a checkpoint with the published Qwen2.5-VL processor.

``vlcohort.processors.published.published_model_path`` gives a tiny Qwen2.5-VL body behind the
publisher's own processor files (shared data, ``qwen2_5_vl_7b_instruct/``): the real
151,665-token tokenizer, image processor and chat template, the published vocabulary size
(152,064) and token ids. vLLM loads that folder itself (its own tokenizer and its own
Qwen2.5-VL multimodal processor), so the ids it builds from ``adapter.vllm_request`` must
be the ids the ``hf`` engine and the policy see (``adapter.encode_prompts``): one image,
two images, none. Run by ``.ci/vllm-cpu`` on vLLM's CPU build (marker ``vllm``).
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vlcohort.config import VLLMConfig
from vlcohort.data.problems import Problem
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.published import published_model_path
from vlcohort.processors.tiny import sharpen
from vlcohort.rollout.base import SamplingParams
from vlcohort.rollout.vllm import build_requests
from vlcohort.training.logprobs import completion_logprobs

FOLDER = "qwen2_5_vl_7b_instruct"
#: A pixel cap below the published one (12,845,056 px): vLLM sizes its start-up memory
#: profile with a largest-possible image, which at the published cap is 16,384 tokens on
#: CPU. Every image here is under the cap, so its tokens are the published processor's.
MAX_PIXELS = 1024 * 28 * 28


def picture(w: int, h: int, colour: str) -> Image.Image:
    img = Image.new("RGB", (w, h), "white")
    img.paste(Image.new("RGB", (w // 2, h // 2), colour), (w // 4, h // 4))
    return img


def prompts(adapter):
    """One image (640 x 480: 391 tokens), two images (391 + 8), none."""
    problems = [
        Problem("one", "What colour is the shape?", [picture(640, 480, "red")], options=["red", "blue"]),
        Problem("two", "Compare <image1> with <image2>.",
                [picture(640, 480, "green"), picture(100, 60, "blue")]),
        Problem("none", "What is 3 + 4?", []),
    ]
    return [adapter.render(p) for p in problems]


@pytest.mark.vllm
def test_vllm_prompt_ids_equal_the_adapters_on_the_published_processor(
        published_path, tmp_path_factory, vllm_env, vllm_device):
    from vllm import SamplingParams as VSamplingParams

    from vlcohort.rollout.vllm import VLLMEngine

    folder = published_model_path(published_path(FOLDER),
                                  cache_dir=tmp_path_factory.mktemp("published"))
    adapter = adapter_for(folder, AdapterOptions(max_pixels=MAX_PIXELS))
    model = sharpen(adapter.load_model(), seed=1).to(vllm_device)
    cfg = VLLMConfig(dtype="float32", enforce_eager=True, sleep_mode=False, max_num_seqs=16,
                     kv_cache_memory_gib=0.25, gpu_memory_utilization=0.2, max_model_len=4096)
    engine = VLLMEngine(adapter, model, cfg, seed=0)
    vllm_env.append(engine)

    rendered = prompts(adapter)
    expected = [adapter.encode_prompts([r]).inputs["input_ids"][0].tolist() for r in rendered]
    assert [e.count(adapter.image_token_id) for e in expected] == [391, 399, 0]
    outputs = engine.llm.generate(build_requests(adapter, rendered),
                                  sampling_params=VSamplingParams(max_tokens=1), use_tqdm=False)
    for r, out, ids in zip(rendered, outputs, expected):
        assert list(out.prompt_token_ids) == ids, r.problem_id

    # the engine's own rollouts from those prompts follow the policy (the published
    # vocabulary: log-probs over 152,064 tokens)
    G, T = 2, 0.7
    rollouts = engine.generate(rendered, G, SamplingParams(max_new_tokens=6, temperature=T), seed=3)
    assert len(rollouts.completions) == 3 * G and any(rollouts.completions)
    batch = adapter.encode_training(adapter.encode_prompts([r for r in rendered for _ in range(G)]),
                                    rollouts.completions).to(vllm_device)
    with torch.no_grad():
        policy = completion_logprobs(adapter, model, batch, T).cpu()[:, : rollouts.logprobs.shape[1]]
    mask = torch.zeros_like(rollouts.logprobs, dtype=torch.bool)
    for i, c in enumerate(rollouts.completions):
        mask[i, : len(c)] = True
    gap = (rollouts.logprobs - policy).abs()[mask]
    print(f"published qwen2_5_vl: |engine - policy| log-prob mean {gap.mean():.2e} max {gap.max():.2e}")
    assert torch.isfinite(gap).all() and gap.mean() < 5e-5 and gap.max() < 1e-3
