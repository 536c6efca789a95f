"""Helpers the adapter test files share: test images and problems, sampled generation with
the log-probs it sampled from, and the check that the core's log-prob pass reproduces them."""

from __future__ import annotations

import torch
from PIL import Image

from vlcohort.data.problems import Problem
from vlcohort.processors import cut_at_stop
from vlcohort.training.logprobs import completion_logprobs


def image(w, h, colour="red"):
    return Image.new("RGB", (w, h), colour)


def problem(pid="p", text="What colour is the shape?", images=(), options=None):
    return Problem(pid, text, list(images), options=options)


def image_tokens(adapter, batch, row=None) -> int:
    """Image pad tokens in a batch's ``input_ids`` (or in one row of it)."""
    ids = batch.inputs["input_ids"] if row is None else batch.inputs["input_ids"][row]
    return int((ids == adapter.image_token_id).sum())


def generate(adapter, model, batch, max_new_tokens=8, seed=0):
    """Sampled completions (cut at the stop token) and the log-probs of each sampled token
    under the distribution it was sampled from (raw logits, placeholders suppressed)."""
    torch.manual_seed(seed)
    out = model.generate(
        **batch.inputs, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0,
        top_k=0, top_p=1.0, output_logits=True, return_dict_in_generate=True,
        eos_token_id=adapter.stop_token_ids(), pad_token_id=adapter.pad_token_id(),
        suppress_tokens=adapter.suppressed_token_ids() or None,
    )
    new = out.sequences[:, batch.prompt_len:]  # [B, C]
    logits = torch.stack(out.logits, dim=1).float()  # [B, C, V], raw (before processors)
    logits[..., adapter.suppressed_token_ids()] = float("-inf")  # what was sampled from
    gen_lp = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1)
    completions = [cut_at_stop(row, adapter.stop_token_ids()) for row in new.tolist()]
    return completions, gen_lp


def assert_logprobs_match(adapter, model, batch, max_new_tokens=6):
    """The core's log-prob pass over sampled completions equals generation's own."""
    completions, gen_lp = generate(adapter, model, batch, max_new_tokens=max_new_tokens)
    train = adapter.encode_training(batch, completions)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, train)
    mask = train.completion_mask.bool()
    assert mask.sum() >= 2
    assert torch.allclose(lp[mask], gen_lp[:, : lp.shape[1]][mask], atol=1e-4)
