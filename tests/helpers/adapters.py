"""Checks the per-family adapter tests share (``tests/processors/test_adapters.py`` and
``tests/processors/test_<family>.py``), beyond ``tests/processors/helpers.py``: image token
counts of one encoded image, and greedy generation against the core's log-prob pass."""

from __future__ import annotations

import torch

from tests.processors.helpers import problem
from vlcohort.processors import cut_at_stop
from vlcohort.training.logprobs import completion_logprobs


def count_image_tokens(adapter, img):
    """(image pad tokens in the encoded prompt of one image, the batch)."""
    batch = adapter.encode_prompts([adapter.render(problem(images=[img]))])
    return int((batch.inputs["input_ids"] == adapter.image_token_id).sum()), batch


def greedy_agrees_with_logprob_pass(adapter, model, batch, max_new_tokens=6) -> int:
    """Greedy ``generate`` (placeholders suppressed) vs the core's log-prob pass over the
    whole prompt + completion: each greedy token is the argmax of the step's logits and its
    log-prob is the pass's, to 1e-4. Returns the number of tokens compared."""
    out = model.generate(**batch.inputs, max_new_tokens=max_new_tokens, do_sample=False,
                         output_logits=True, return_dict_in_generate=True,
                         eos_token_id=adapter.stop_token_ids(), pad_token_id=adapter.pad_token_id(),
                         suppress_tokens=adapter.suppressed_token_ids() or None)
    new = out.sequences[:, batch.prompt_len:]  # [N, C]
    logits = torch.stack(out.logits, dim=1).float()  # [N, C, V]
    logits[..., adapter.suppressed_token_ids()] = float("-inf")
    gen_lp = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1)  # [N, C]
    completions = [cut_at_stop(row, adapter.stop_token_ids()) for row in new.tolist()]
    train = adapter.encode_training(batch, completions)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, train)  # [N, T]
    mask = train.completion_mask.bool()
    T = lp.shape[1]
    assert (new[:, :T] == logits[:, :T].argmax(-1))[mask].all()
    assert torch.allclose(lp[mask], gen_lp[:, :T][mask], atol=1e-4)
    return int(mask.sum())
