"""The Qwen2.5-VL adapter against the published Qwen2.5-VL-7B-Instruct processor.

The checkpoint under test is built by ``vlcohort.processors.published.published_model_path`` from
the publisher's own processor files (shared data, ``qwen2_5_vl_7b_instruct/``): the real
tokenizer (151,665 tokens, 22 added), image processor and chat template, on a random tiny
body with the published vocabulary size (152,064) and token ids. The reference is the
published processor itself, ``AutoProcessor.from_pretrained`` on the shared folder, used
directly (its own ``apply_chat_template``, its own image resizing): every adapter output
(rendered text, prompt batch, training batch, image-token counts, stop ids, vLLM request)
must equal what it produces.
"""

from __future__ import annotations

import json

import pytest
import torch

from vlcohort.processors import adapter_for
from vlcohort.processors.published import published_model_path

from .helpers import image, problem

FOLDER = "qwen2_5_vl_7b_instruct"
SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def published(published_path):
    return published_path(FOLDER)


@pytest.fixture(scope="module")
def reference(published):
    """The published processor, loaded from the publisher's files (no tokenizer.json:
    transformers converts vocab.json + merges.txt itself)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(published)


@pytest.fixture(scope="module")
def checkpoint(published, tmp_path_factory):
    return published_model_path(published, cache_dir=tmp_path_factory.mktemp("published"))


@pytest.fixture(scope="module")
def adapter(checkpoint):
    return adapter_for(checkpoint)


def user(*content) -> list[dict]:
    """System + user messages in the content-list form, written out by hand."""
    return [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {"role": "user", "content": list(content)}]


def text(t: str) -> dict:
    return {"type": "text", "text": t}


IMG = {"type": "image"}


def reference_text(reference, messages) -> str:
    return reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# ------------------------------------------------------------------ the checkpoint


def test_checkpoint_carries_the_published_processor(adapter, checkpoint, published, reference):
    """The published files byte for byte, the real processor classes, the published
    vocabulary size and special-token ids in the tiny body's config."""
    for name in ("tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.json",
                 "preprocessor_config.json", "generation_config.json"):
        assert (checkpoint / name).read_bytes() == (published / name).read_bytes(), name
    assert type(adapter).__name__ == "Qwen2_5_VLAdapter"
    assert type(adapter.processor).__name__ == "Qwen2_5_VLProcessor"
    assert type(adapter.processor.image_processor) is type(reference.image_processor)
    assert len(adapter.tokenizer) == len(reference.tokenizer) == 151_665
    assert adapter.tokenizer.get_vocab() == reference.tokenizer.get_vocab()
    assert adapter.processor.chat_template == reference.chat_template
    assert adapter.image_token_id == 151_655
    cfg = json.loads((checkpoint / "config.json").read_text())
    published_cfg = json.loads((published / "config.json").read_text())
    assert cfg["text_config"]["vocab_size"] == published_cfg["vocab_size"] == 152_064
    for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                "vision_end_token_id"):
        assert cfg[key] == published_cfg[key], key
    assert cfg["text_config"]["hidden_size"] == 64 and cfg["vision_config"]["patch_size"] == 14


def test_tiny_body_runs_on_published_ids(adapter, reference):
    """The random body takes the published processor's batch: logits over the whole
    published vocabulary at every position."""
    model = adapter.load_model()
    rendered = adapter.render(problem(text="What colour is the shape?", images=[image(100, 60)]))
    batch = adapter.encode_prompts([rendered])
    with torch.no_grad():
        logits = model(**batch.inputs).logits  # [1, P, V]
    assert logits.shape == (1, batch.prompt_len, 152_064)
    assert torch.isfinite(logits).all()


# ------------------------------------------------------------------ rendering


RENDER_CASES = [
    # (problem kwargs, render kwargs, the messages written by hand)
    (dict(text="What is 3 + 4?"), {}, user(text("What is 3 + 4?"))),
    (dict(text="What colour is the shape?", images=[image(100, 60)], options=["red", "blue"]),
     dict(instruction="Answer with the letter."),
     user(IMG, text("What colour is the shape?\nChoices:\nA. red\nB. blue\nAnswer with the letter."))),
    (dict(text="Compare <image1> with <image2>.", images=[image(100, 60), image(60, 130)]), {},
     user(text("Compare "), IMG, text(" with "), IMG, text("."))),
]


@pytest.mark.parametrize("case", range(len(RENDER_CASES)))
def test_render_equals_the_published_template(adapter, reference, case):
    kwargs, render_kwargs, messages = RENDER_CASES[case]
    got = adapter.render(problem(**kwargs), **render_kwargs).text
    assert got == reference_text(reference, messages)


def test_render_without_system_prompt_gets_the_templates_default(adapter, reference):
    """No system message: the published template writes its own default system turn."""
    got = adapter.render(problem(text="Q?"), system_prompt=None).text
    assert got == reference_text(reference, [{"role": "user", "content": [text("Q?")]}])
    assert got.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")


# ------------------------------------------------------------------ prompt batches

# Published image rule (patch 14, merge 2: 28 px cells; 3,136 to 12,845,056 px): each side
# rounded to a multiple of 28, scaled into the pixel range; (H' / 28) x (W' / 28) tokens.
#  640 x 480: W' = round(22.86) = 23 cells, H' = round(17.14) = 17 cells -> 391 tokens
#             (grid 1 x 34 x 46 patches)
#   28 x 28 : 784 px < 3136 -> scaled by 2 -> 2 x 2 cells -> 4 tokens
#  100 x 60 : W' = round(3.57) = 4, H' = round(2.14) = 2 -> 8 tokens
# 1000 x 200: W' = round(35.71) = 36, H' = round(7.14) = 7 -> 252 tokens
#  333 x 777: W' = round(11.89) = 12, H' = round(27.75) = 28 -> 336 tokens
IMAGE_CASES = [(640, 480, 391), (28, 28, 4), (100, 60, 8), (1000, 200, 252), (333, 777, 336)]


def reference_batch(reference, texts, images, **kwargs):
    """The published processor on raw images (its own resizing), padded on the left as a
    generation batch is."""
    if any(images):
        kwargs["images"] = images
    return reference(text=texts, padding=True, padding_side="left", return_tensors="pt",
                     **kwargs)


@pytest.mark.parametrize("w,h,tokens", IMAGE_CASES)
def test_image_token_counts_equal_the_published_processor(adapter, reference, w, h, tokens):
    raw = image(w, h, "blue")
    r = adapter.render(problem(text="What colour is the shape?", images=[raw]))
    batch = adapter.encode_prompts([r])
    ref = reference_batch(reference, [reference_text(reference, user(IMG, text("What colour is the shape?")))],
                          [[raw]])
    ref_count = int((ref["input_ids"] == adapter.image_token_id).sum())
    assert ref_count == tokens
    assert adapter.image_token_count(*r.images[0].size) == tokens
    assert batch.image_token_counts == [[tokens]]
    assert int((batch.inputs["input_ids"] == adapter.image_token_id).sum()) == tokens
    assert torch.equal(batch.inputs["input_ids"], ref["input_ids"])
    assert torch.equal(batch.inputs["image_grid_thw"], ref["image_grid_thw"])
    assert int(batch.inputs["image_grid_thw"].prod()) == 4 * tokens


def test_encode_prompts_equals_the_published_processor(adapter, reference):
    """A left-padded batch of three prompts (one image, two images, none): ids, masks,
    grids and M-RoPE token types as the published processor gives them on the raw images;
    pixel values exactly its own on the adapter's prepared images (on raw images the
    processor resizes with its own resampler, so values differ by interpolation only)."""
    raws = [[image(640, 480, "red")], [image(640, 480, "green"), image(100, 60, "blue")], []]
    probs = [problem("a", "What colour is the shape?", raws[0]),
             problem("b", "Compare <image1> with <image2>.", raws[1]),
             problem("c", "What is 3 + 4?")]
    rendered = [adapter.render(p) for p in probs]
    batch = adapter.encode_prompts(rendered)
    texts = [reference_text(reference, m) for m in (
        user(IMG, text("What colour is the shape?")),
        user(text("Compare "), IMG, text(" with "), IMG, text(".")),
        user(text("What is 3 + 4?")))]
    assert [r.text for r in rendered] == texts
    ref = reference_batch(reference, texts, raws)
    assert set(batch.inputs) == set(ref)
    for key in ("input_ids", "attention_mask", "image_grid_thw", "mm_token_type_ids"):
        assert torch.equal(batch.inputs[key], ref[key]), key
    assert batch.image_token_counts == [[391], [391, 8], []]
    assert ref["attention_mask"][2].sum() < ref["attention_mask"].shape[1], "weak test: no padding"
    same_pixels = reference_batch(reference, texts, [r.images for r in rendered])
    assert torch.equal(batch.inputs["pixel_values"], same_pixels["pixel_values"])
    assert torch.equal(same_pixels["input_ids"], ref["input_ids"])


def test_encode_training_equals_the_published_processor_on_prompt_plus_completion(adapter, reference):
    """Prompt + completion rows: each row's real tokens are the published processor's
    encoding of the prompt text followed by the completion text."""
    raws = [[image(640, 480)], []]
    probs = [problem("a", "What colour is the shape?", raws[0]), problem("b", "What is 3 + 4?")]
    rendered = [adapter.render(p) for p in probs]
    completions_text = ["The answer is A.<|im_end|>", "7<|im_end|>"]
    completions = [reference.tokenizer(c, add_special_tokens=False)["input_ids"]
                   for c in completions_text]
    prompts = adapter.encode_prompts(rendered)
    train = adapter.encode_training(prompts, completions)
    P, T = prompts.prompt_len, max(len(c) for c in completions)
    assert train.inputs["input_ids"].shape == (2, P + T) and train.prompt_len == P
    for i, (r, c) in enumerate(zip(rendered, completions_text)):
        ref = reference(text=[r.text + c], images=[raws[i]] if raws[i] else None,
                        return_tensors="pt")
        real = train.inputs["attention_mask"][i].bool()
        assert torch.equal(train.inputs["input_ids"][i][real], ref["input_ids"][0])
        assert torch.equal(train.inputs["mm_token_type_ids"][i][real], ref["mm_token_type_ids"][0])
        assert train.completion_mask[i].sum() == len(completions[i])
        assert train.completion_ids[i, : len(completions[i])].tolist() == completions[i]
    assert train.inputs["input_ids"][1, P + len(completions[1]):].eq(adapter.pad_token_id()).all()
    assert torch.equal(train.inputs["image_grid_thw"], prompts.inputs["image_grid_thw"])


# ------------------------------------------------------------------ stops and vLLM


def test_stop_ids_are_the_published_ones(adapter, reference, published):
    """``<|im_end|>`` (the turn end) and the generation config's eos ids, nothing else."""
    generation_eos = json.loads((published / "generation_config.json").read_text())["eos_token_id"]
    im_end = reference.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert generation_eos == [151_645, 151_643] and im_end == 151_645
    stops = adapter.stop_token_ids()
    assert stops[0] == im_end
    assert set(stops) == {im_end, *generation_eos}
    assert reference.tokenizer.convert_ids_to_tokens(stops) == ["<|im_end|>", "<|endoftext|>"]


VLLM_CASES = [
    (dict(text="What colour is the shape?", images=[image(640, 480)]),
     user(IMG, text("What colour is the shape?")), [391]),
    (dict(text="Compare <image1> with <image2>.", images=[image(640, 480), image(100, 60)]),
     user(text("Compare "), IMG, text(" with "), IMG, text(".")), [391, 8]),
    (dict(text="What is 3 + 4?"), user(text("What is 3 + 4?")), []),
]


@pytest.mark.parametrize("case", range(len(VLLM_CASES)))
def test_vllm_request_tokenises_to_the_published_processors_ids(adapter, reference, case):
    """vLLM tokenises the request's prompt with special tokens (one ``<|image_pad|>`` per
    image, as the template wrote it), then its processor expands each pad to the image's
    tokens with the request's ``mm_processor_kwargs``. Before expansion the ids are the
    published tokenizer's ids of the published template's text; after it, the adapter's
    ``encode_prompts`` ids."""
    kwargs, messages, counts = VLLM_CASES[case]
    r = adapter.render(problem(**kwargs))
    req = adapter.vllm_request(r)
    unexpanded = reference.tokenizer(req["prompt"])["input_ids"]
    assert unexpanded == reference.tokenizer(reference_text(reference, messages),
                                             add_special_tokens=False)["input_ids"]
    assert unexpanded.count(adapter.image_token_id) == len(counts)
    expected = adapter.encode_prompts([r]).inputs["input_ids"][0].tolist()
    if counts:
        images = req["multi_modal_data"]["image"]
        images = images if isinstance(images, list) else [images]
        expanded = reference(text=[req["prompt"]], images=[images], return_tensors="pt",
                             **req["mm_processor_kwargs"])["input_ids"][0].tolist()
    else:
        assert "multi_modal_data" not in req
        expanded = unexpanded
    assert expanded == expected
    assert expected.count(adapter.image_token_id) == sum(counts)


def test_the_mmupt_recipe_renders_as_mmupt_built_its_prompts(adapter, reference):
    """MM-UPT (verl/utils/dataset.py) appends ``" " + format_prompt.strip()`` to the
    problem, splits it at ``<image>`` into content pieces and applies the template with no
    system turn. Its launcher's format prompt reached the model with a literal backslash-n
    (bash and OmegaConf leave ``\\n`` alone); the recipe reproduces that string."""
    from pathlib import Path

    from vlcohort.config import load_config

    cfg = load_config(Path(__file__).parents[2] / "configs" / "mmupt_qwen25vl7b_mmr1.yaml")
    question = "<image>In the triangle shown, what is the value of x?"
    format_prompt = "\\nPlease reason step by step, and put your final answer within \\boxed{}."
    prompt_str = question + " " + format_prompt.strip()
    pieces = prompt_str.split("<image>")
    content = [pieces[0] and text(pieces[0])] + [c for p in pieces[1:] for c in (IMG, p and text(p))]
    messages = [{"role": "user", "content": [c for c in content if c]}]
    got = adapter.render(problem(text=question, images=[image(100, 60)]),
                         cfg.prompt.system_prompt, cfg.prompt.instruction).text
    assert got == reference_text(reference, messages)
    assert "x? \\nPlease reason" in got
