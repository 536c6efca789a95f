"""SmolVLM2 (model_type ``smolvlm``) on its tiny real model: the optional ``num2words``
dependency (a clear error with the install line when it is missing), and, when it is
installed, the real classes, Idefics3's sub-image counts and generate / log-prob
agreement. The rest of the contract runs in the shared adapter tests."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from vlcohort.data.problems import Problem
from vlcohort.processors import AdapterOptions, adapter_for, cut_at_stop
from vlcohort.processors.smolvlm import SmolVLMAdapter
from vlcohort.training.logprobs import completion_logprobs

from .helpers import image

HAVE_NUM2WORDS = importlib.util.find_spec("num2words") is not None
needs_num2words = pytest.mark.skipif(not HAVE_NUM2WORDS,
                                     reason="tiny:smolvlm needs num2words: pip install num2words")


@pytest.mark.skipif(HAVE_NUM2WORDS, reason="num2words is installed here")
def test_missing_num2words_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "smolvlm"}))
    with pytest.raises(ImportError, match=r"num2words.*pip install num2words.*vlcohort\[smolvlm\]"):
        adapter_for(tmp_path)
    from vlcohort.processors import tiny_model_path

    with pytest.raises(ImportError, match="tiny:smolvlm needs the num2words package"):
        tiny_model_path("tiny:smolvlm", cache_dir=tmp_path / "cache")


@needs_num2words
def test_real_classes_and_token_counts(loaded, tiny_paths):
    adapter, model = loaded["smolvlm"]
    assert type(adapter) is SmolVLMAdapter
    assert type(model).__name__ == "SmolVLMForConditionalGeneration"
    assert type(adapter.processor).__name__ == "SmolVLMProcessor"
    # Idefics3's rule with the same tiny shapes (M = 56, L = 224, 4 tokens a sub-image):
    # 100 x 60 -> 224 x 134 -> 224 x 168 -> 3 x 4 + 1 = 13 -> 52; 60 x 130 -> 104 x 224
    # -> 112 x 224 -> 4 x 2 + 1 = 9 -> 36; longest_edge 112: 100 x 60 -> 112 x 68 ->
    # 112 x 112 -> 2 x 2 + 1 = 5 -> 20
    p = Problem("p", "Is <image1> bigger than <image2>?", [image(100, 60), image(60, 130, "blue")])
    batch = adapter.encode_prompts([adapter.render(p)])
    assert batch.image_token_counts == [[52, 36]]
    assert int((batch.inputs["input_ids"] == adapter.image_token_id).sum()) == 88
    small = adapter_for(tiny_paths["smolvlm"], AdapterOptions(processor={"longest_edge": 112}))
    b = small.encode_prompts([small.render(Problem("q", "Q?", [image(100, 60)]))])
    assert int((b.inputs["input_ids"] == small.image_token_id).sum()) == 20 == b.image_token_counts[0][0]
    assert "<video>" in adapter.tokenizer.convert_ids_to_tokens(adapter.suppressed_token_ids())


@needs_num2words
def test_generation_and_logprobs_agree(loaded):
    adapter, model = loaded["smolvlm"]
    batch = adapter.encode_prompts([adapter.render(Problem("a", "What colour?", [image(100, 60)])),
                                    adapter.render(Problem("b", "Solve 2+2."))])
    torch.manual_seed(0)
    out = model.generate(**batch.inputs, max_new_tokens=6, do_sample=True, top_k=0, top_p=1.0,
                         output_logits=True, return_dict_in_generate=True,
                         eos_token_id=adapter.stop_token_ids(), pad_token_id=adapter.pad_token_id(),
                         suppress_tokens=adapter.suppressed_token_ids())
    new = out.sequences[:, batch.prompt_len:]  # [N, C]
    logits = torch.stack(out.logits, dim=1).float()  # [N, C, V]
    logits[..., adapter.suppressed_token_ids()] = float("-inf")
    gen_lp = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1)
    train = adapter.encode_training(batch, [cut_at_stop(r, adapter.stop_token_ids()) for r in new.tolist()])
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, train)
    mask = train.completion_mask.bool()
    assert torch.allclose(lp[mask], gen_lp[:, : lp.shape[1]][mask], atol=1e-4)
