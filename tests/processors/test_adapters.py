"""The shared adapter tests, on the tiny real model of every registered family (built
offline, loaded by from_pretrained), driven by each family's declared
:class:`~vlcohort.processors.family.FamilyFacts`: class names, turn pattern, stop tokens and image
token counts derived by hand in the family module. Tests of one family's own rules live in
``tests/processors/test_<family>.py``."""

from __future__ import annotations

import re

import pytest
import torch
from PIL import Image

from tests.helpers.adapters import count_image_tokens
from vlcohort.processors import ProblemInputError, adapter_for
from vlcohort.processors.family import ADAPTERS
from vlcohort.training.logprobs import completion_logprobs

from .conftest import FAMILIES, MULTI_IMAGE_FAMILIES, SPECS, VLM_FAMILIES, facts
from .helpers import generate, image, problem


def images_for(name, *sizes):
    return [image(w, h) for w, h in sizes] if facts(name).vision else []


IMAGE_CASES = [pytest.param(n, w, h, t, id=f"{n}-{w}x{h}")
               for n, s in SPECS.items() for w, h, t in s.facts.image_token_cases]


# ------------------------------------------------------------------ registry and loading


@pytest.mark.parametrize("name", FAMILIES)
def test_registry_picks_the_family_adapter(tiny_paths, name):
    assert type(adapter_for(tiny_paths[name])) is ADAPTERS[SPECS[name].model_type]


@pytest.mark.parametrize("name", FAMILIES)
def test_model_and_processor_classes_are_the_real_ones(loaded, name):
    adapter, model = loaded[name]
    assert type(model).__name__ == facts(name).model_class
    assert type(adapter.processor).__name__ == facts(name).processor_class


# ------------------------------------------------------------------ image token counts


@pytest.mark.parametrize("name,w,h,expected", IMAGE_CASES)
def test_image_tokens_as_derived_by_hand(loaded, name, w, h, expected):
    adapter, _ = loaded[name]
    n, batch = count_image_tokens(adapter, image(w, h))
    assert n == expected == batch.image_token_counts[0][0]


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_image_token_id_is_the_models(loaded, name):
    """The base's default ``image_token_id`` (processor's, else tokenizer's) is the id the
    model's config scatters image features into."""
    adapter, model = loaded[name]
    cfg = model.config
    want = getattr(cfg, "image_token_id", None)
    want = want if want is not None else getattr(cfg, "image_token_index", None)
    if want is None:
        pytest.skip(f"{type(cfg).__name__} names no image token id")
    assert adapter.image_token_id == want


# ------------------------------------------------------------------ rendering


@pytest.mark.parametrize("name", FAMILIES)
def test_prompt_has_family_turn_structure(loaded, name):
    adapter, _ = loaded[name]
    text = adapter.render(problem()).text
    assert re.search(facts(name).turn_pattern, text, re.DOTALL), text


@pytest.mark.parametrize("name", FAMILIES)
def test_prompt_carries_system_options_and_instruction(loaded, name):
    adapter, _ = loaded[name]
    text = adapter.render(problem(text="Q?", options=["x", "y"]), system_prompt="SYS",
                          instruction="INSTR").text
    assert "SYS" in text and "Q?\nChoices:\nA. x\nB. y\nINSTR" in text, text


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_tokens_are_end_of_turn(loaded, name):
    adapter, _ = loaded[name]
    tokens = adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())
    assert set(facts(name).stop_tokens) <= set(tokens), tokens


# ------------------------------------------------------------------ generation and log-probs


@pytest.mark.parametrize("name", FAMILIES)
def test_logprobs_match_generation(loaded, name):
    adapter, model = loaded[name]
    probs = [problem("a", images=images_for(name, (100, 60))),
             problem("b", text="Solve 2+2.", images=images_for(name, (60, 130)))]
    batch = adapter.encode_prompts([adapter.render(p) for p in probs])
    completions, gen_lp = generate(adapter, model, batch)
    train = adapter.encode_training(batch, completions)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, train)
    assert lp.dtype == torch.float32 and lp.shape == train.completion_mask.shape
    mask = train.completion_mask.bool()
    assert mask.sum() >= 2
    assert torch.allclose(lp[mask], gen_lp[:, : lp.shape[1]][mask], atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_same_prompt_alone_and_in_padded_batch(loaded, name):
    """Left padding and neighbours with other image sizes must not change log-probs."""
    adapter, model = loaded[name]
    target = adapter.render(problem("t", images=images_for(name, (100, 60))))
    others = [
        adapter.render(problem("o1", text="A much longer question " * 6,
                               images=images_for(name, (250, 60)))),
        adapter.render(problem("o2", text="No image here.")),
    ]
    completion = adapter.tokenizer.encode("The answer is B.", add_special_tokens=False)
    completion += adapter.stop_token_ids()[:1]

    alone = adapter.encode_prompts([target])
    mixed = adapter.encode_prompts(others + [target])
    assert mixed.prompt_len > alone.prompt_len  # the target really is left-padded
    with torch.no_grad():
        lp_alone = completion_logprobs(adapter, model, adapter.encode_training(alone, [completion]))
        lp_mixed = completion_logprobs(
            adapter, model, adapter.encode_training(mixed, [completion[:3], completion, completion]))
    assert torch.allclose(lp_alone[0], lp_mixed[2], atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_chunking_does_not_change_logprobs(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(images=images_for(name, (60, 60))))])
    completion = adapter.tokenizer.encode("Let me think. The answer is 42.", add_special_tokens=False)
    train = adapter.encode_training(batch, [completion])
    with torch.no_grad():
        whole = completion_logprobs(adapter, model, train, chunk_tokens=10_000)
        chunked = completion_logprobs(adapter, model, train, chunk_tokens=1)
    assert torch.allclose(whole, chunked, atol=1e-6)


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_gradient_reaches_the_vision_tower(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    train = adapter.encode_training(batch, [adapter.tokenizer.encode("B", add_special_tokens=False)])
    model.zero_grad()
    completion_logprobs(adapter, model, train).sum().backward()
    vision = [p for n, p in model.named_parameters() if ("vision" in n or "visual" in n) and p.grad is not None]
    assert vision and any(p.grad.abs().sum() > 0 for p in vision)
    model.zero_grad()


@pytest.mark.parametrize("name", MULTI_IMAGE_FAMILIES)
def test_two_images_in_one_prompt(loaded, name):
    adapter, model = loaded[name]
    p = problem(text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(60, 130, "blue")])
    batch = adapter.encode_prompts([adapter.render(p)])
    counts = batch.image_token_counts[0]
    assert len(counts) == 2
    assert int((batch.inputs["input_ids"] == adapter.image_token_id).sum()) == sum(counts)
    completions, gen_lp = generate(adapter, model, batch, max_new_tokens=4)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, completions))
    n = len(completions[0])
    assert torch.allclose(lp[0, :n], gen_lp[0, :n], atol=1e-4)


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_problem_without_image_through_vlm(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(text="What is 3 + 4?"))])
    assert "pixel_values" not in batch.inputs and batch.image_token_counts == [[]]
    completions, gen_lp = generate(adapter, model, batch, max_new_tokens=4)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, completions))
    n = len(completions[0])
    assert torch.allclose(lp[0, :n], gen_lp[0, :n], atol=1e-4)


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_image_placeholders_are_never_generated(loaded, name):
    adapter, model = loaded[name]
    ids = adapter.suppressed_token_ids()
    assert adapter.image_token_id in ids
    others = [i for i in ids if i != adapter.image_token_id]  # an image pad token in the
    if not others:  # completion would ask the model for one more image's features
        return
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(60, 60)]))])
    completion = [others[0]] + adapter.tokenizer.encode("B", add_special_tokens=False)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, [completion]))
    assert lp[0, 0] == float("-inf") and torch.isfinite(lp[0, 1])


@pytest.mark.parametrize("name", FAMILIES)
def test_training_batch_extends_per_token_tensors(loaded, name):
    """Every per-token family tensor of a training batch covers prompt + completion."""
    adapter, _ = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(images=images_for(name, (60, 60))))])
    train = adapter.encode_training(batch, [[5, 6, 7]])
    P = batch.prompt_len
    assert train.inputs["attention_mask"][0, P:].tolist() == [1, 1, 1]
    for key in adapter.per_token_keys:
        if key in batch.inputs:
            assert train.inputs[key].shape[:2] == (1, P + 3), key
            assert torch.equal(train.inputs[key][:, :P], batch.inputs[key]), key


# ------------------------------------------------------------------ vLLM request form


@pytest.mark.parametrize("name", FAMILIES)
def test_vllm_request_form(loaded, name):
    adapter, _ = loaded[name]
    r = adapter.render(problem(images=images_for(name, (100, 60))))
    req = adapter.vllm_request(r)
    assert isinstance(req["prompt"], str) and req["prompt"] in r.text
    if facts(name).vision:
        assert isinstance(req["multi_modal_data"]["image"], Image.Image)
    else:
        assert set(req) == {"prompt"}
    if name in MULTI_IMAGE_FAMILIES:
        two = adapter.render(problem(images=[image(60, 60), image(90, 60)]))
        assert len(adapter.vllm_request(two)["multi_modal_data"]["image"]) == 2


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_placeholder_count_mismatch(loaded, name):
    adapter, _ = loaded[name]
    p = problem("q9", text="Look at <image1> and <image2>.", images=[image(60, 60)])
    with pytest.raises(ProblemInputError, match=r"problem 'q9'.*2 image placeholder.*holds 1"):
        adapter.render(p)
    p = problem("q10", text="Look at <image>.", images=[])
    with pytest.raises(ProblemInputError, match=r"problem 'q10'.*1 image placeholder.*holds 0"):
        adapter.render(p)


@pytest.mark.parametrize("name", FAMILIES)
def test_empty_question(loaded, name):
    adapter, _ = loaded[name]
    with pytest.raises(ProblemInputError, match=r"problem 'e1'.*'text' is empty"):
        adapter.render(problem("e1", text="   "))


@pytest.mark.parametrize("name", FAMILIES)
def test_unknown_processor_setting_names_it_and_what_the_family_accepts(tiny_paths, name):
    from vlcohort.processors import AdapterOptions
    from vlcohort.processors.base import FamilySettingsError, describe_settings

    cls = ADAPTERS[SPECS[name].model_type]
    with pytest.raises(FamilySettingsError, match=r"processor\.no_such_key") as e:
        adapter_for(tiny_paths[name], AdapterOptions(processor={"no_such_key": 1}))
    assert describe_settings(cls.settings) in str(e.value)


# ------------------------------------------------------------------ base hooks


def test_extend_per_token_defaults_to_zeros_of_any_rank(loaded):
    """[N, P] and [N, P, images, tiles] tensors alike gain T zero positions on dim 1."""
    adapter, _ = loaded[FAMILIES[0]]
    flat = torch.ones(2, 5, dtype=torch.long)
    mask = torch.ones(2, 5, 3, 4, dtype=torch.long)
    assert adapter.extend_per_token("k", flat, 3).tolist() == [[1] * 5 + [0] * 3] * 2
    out = adapter.extend_per_token("m", mask, 3)
    assert out.shape == (2, 8, 3, 4) and out[:, 5:].sum() == 0 and out[:, :5].eq(1).all()


def test_a_family_override_of_extend_per_token_is_used(loaded):
    """A family whose per-token tensor is a 4-D mask continues it by repeating its last
    row (what Mllama's cross-attention mask needs), through encode_training."""
    name = VLM_FAMILIES[0]
    base, _ = loaded[name]

    class RepeatLast(type(base)):
        per_token_keys = (*type(base).per_token_keys, "cross_mask")

        def extend_per_token(self, key, tensor, n_completion):
            if key != "cross_mask":
                return super().extend_per_token(key, tensor, n_completion)
            last = tensor[:, -1:].expand(-1, n_completion, *tensor.shape[2:])
            return torch.cat([tensor, last], dim=1)

    adapter = RepeatLast(base.path, base.options, processor=base.processor)
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(60, 60)]))])
    P = batch.prompt_len
    cross = torch.zeros(1, P, 1, 2, dtype=torch.long)
    cross[0, -1, 0, 0] = 1  # the last prompt token sees tile 0
    batch.inputs["cross_mask"] = cross
    train = adapter.encode_training(batch, [[5, 6]])
    assert train.inputs["cross_mask"].shape == (1, P + 2, 1, 2)
    assert train.inputs["cross_mask"][0, P:, 0].tolist() == [[1, 0], [1, 0]]


def test_prompt_image_token_counts_sees_the_whole_prompt(loaded):
    """The default is ``image_token_count`` per image; a family counting over all the
    prompt's images overrides the hook, and both the batch's counts and the evaluator's
    length sort key follow it."""
    from vlcohort.eval.generation import prompt_tokens

    name = MULTI_IMAGE_FAMILIES[0]
    base, _ = loaded[name]
    imgs = [image(100, 60), image(60, 130)]
    assert base.prompt_image_token_counts(imgs) == [base.image_token_count(*i.size) for i in imgs]

    class Shared(type(base)):
        def prompt_image_token_counts(self, images):
            return [1000 * len(images)] * len(images)

    adapter = Shared(base.path, base.options, processor=base.processor)
    rendered = adapter.render(problem(text="<image1> or <image2>?", images=imgs))
    assert adapter.encode_prompts([rendered]).image_token_counts == [[2000, 2000]]
    text_only = len(adapter.tokenizer(rendered.text, add_special_tokens=False)["input_ids"])
    assert prompt_tokens(adapter, rendered) == text_only + 4000
