"""The ``hf`` rollout engine: batched ``model.generate`` with left padding.

Sampling log-probs are recorded *during* generation by a logits processor that keeps one
step of log-probabilities ([N, V]) at a time, so memory does not grow with
``max_new_tokens`` x vocabulary the way ``output_logits=True`` would (64 sequences x 1k
tokens x 152k vocabulary would be 40 GB in fp32).

The recorded distribution is the one each token was sampled from:
``log_softmax(logits / temperature)``, truncated to the top-k / nucleus and renormalised
when ``top_k > 0`` / ``top_p < 1`` (what vLLM reports as its processed log-probs, so the
two engines give the IS correction the same numbers). With ``top_p = 1`` and ``top_k = 0``
it is what ``completion_logprobs(..., temperature)`` computes for the policy, and the IS
weight measures only the numeric mismatch between engine and trainer; with truncation the
weight also corrects for it (weights <= 1 on sampled tokens).

The engine applies temperature, top-k and top-p itself, as transformers' own warpers in
transformers' order, ahead of the recorder (custom logits processors run before
``generate``'s warpers, so a recorder there would see the untruncated logits); ``generate``
is then told to sample from the processed scores as they are (temperature 1, no top-k /
top-p, every other sampling setting neutral: ``NEUTRAL_SAMPLING``).

The G rows of one prompt share their prompt: for a text-only prompt batch the engine runs
the prompt once per group (B rows, not B x G) into the KV cache, repeats the cache G times
and lets ``generate`` start from it (:func:`shared_prompt_cache`). The prompt's forward
is the largest single cost of a short rollout (measured with SmolLM2-135M on one CPU
thread, 2 prompts x 4 samples of a 77-token prompt, 48 new tokens: the prefill of the 8
rows took 2.5 s, a quarter of the rollout, that of 2 rows 0.6 s), and the repeats computed
the same keys and values G times. The sampled tokens and their log-probs are those of a
prefill per row up to float noise (tested).
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from vlcohort.processors import RenderedPrompt, cut_at_stop
from vlcohort.rollout.base import Rollouts, SamplingParams


class SampledLogprobRecorder(LogitsProcessor):
    """Records log p(token) of every sampled token, one generation step behind.

    ``generate`` calls processors before sampling; at step k the processor sees the
    token sampled at step k-1 as the last column of ``input_ids``, so it gathers that
    token's log-prob from the distribution it stored at step k-1. :meth:`finish` gathers
    the last step's tokens after generation ends. Custom processors run after the
    default ones (token suppression) and before generate's own warpers; the engine gives
    generate no warpers of its own and puts its temperature / top-k / top-p warpers
    (:func:`sampling_warpers`) ahead of the recorder, so ``scores`` here are exactly what
    is sampled from: the logits with the adapter's suppressed tokens at -inf, divided by
    the temperature, -inf outside the top-k / nucleus.
    """

    def __init__(self, prompt_len: int):
        self.prompt_len = prompt_len
        self.prev: torch.Tensor | None = None  # [N, V] log-probs of the previous step
        self.columns: list[torch.Tensor] = []  # each [N]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.columns.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)  # [N, V] the sampled distribution
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[N, T] log-probs of ``sequences[:, prompt_len:]``."""
        T = sequences.shape[1] - self.prompt_len
        if self.prev is not None and len(self.columns) < T:
            self.columns.append(self.prev.gather(-1, sequences[:, -1:]).squeeze(-1))
        self.prev = None
        if not self.columns:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.columns, dim=1)  # [N, T]


#: Sampling settings a checkpoint's ``generation_config`` may carry (published chat models
#: ship e.g. ``repetition_penalty=1.05``) set to their neutral values, explicitly: generate()
#: fills every setting the call leaves unset from the model's generation_config, and any of
#: these would make the sampled distribution differ from the policy's, so the recorded
#: log-probs would not be the policy's and the IS correction would undo a penalty.
#: An explicit None is kept by generate() (transformers 5: call kwargs override the
#: checkpoint's values, None included), so the settings whose neutral value is "unset"
#: (min_p, top_h, bad words, sequence bias, forced tokens, guidance, watermarking, ...) are
#: passed as None. Temperature, top-k and top-p are the engine's own (``sampling_warpers``)
#: and go to generate() as 1, 0 and 1. The decoding mode is plain sampling of one sequence
#: per row (no beams, no contrastive search / DoLa, no stop strings).
NEUTRAL_SAMPLING = dict(repetition_penalty=1.0, encoder_repetition_penalty=1.0,
                        no_repeat_ngram_size=0, encoder_no_repeat_ngram_size=0,
                        min_length=0, min_new_tokens=0, typical_p=1.0, epsilon_cutoff=0.0,
                        eta_cutoff=0.0, min_p=None, top_h=None, bad_words_ids=None,
                        sequence_bias=None, forced_bos_token_id=None, forced_eos_token_id=None,
                        begin_suppress_tokens=None, exponential_decay_length_penalty=None,
                        guidance_scale=None, watermarking_config=None, renormalize_logits=False,
                        remove_invalid_values=False, num_beams=1, num_return_sequences=1,
                        penalty_alpha=None, dola_layers=None, stop_strings=None)


def sampling_warpers(sampling: SamplingParams) -> list[LogitsProcessor]:
    """Temperature, then top-k, then top-p (transformers' own warpers, in the order
    ``generate`` applies them, vLLM's too), only those that change anything: the chain
    whose output the engine samples from and records."""
    warpers: list[LogitsProcessor] = []
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
    return warpers


def shared_prompt_cache(model, inputs: dict[str, torch.Tensor], group_size: int):
    """The KV cache of a prompt batch whose rows come in groups of ``group_size`` equal
    prompts (row b*G + g), computed once per group and repeated G times; None where it
    cannot be shared.

    ``inputs``: ``input_ids`` / ``attention_mask`` [N, P], left-padded, N = B x G. The
    cache covers the first P - 1 positions of every row, so ``generate`` (given the cache
    and the whole prompt) runs only the last prompt token and then decodes as usual. The
    positions are ``generate``'s own for a left-padded batch (attention-mask cumsum), so
    the cached keys are the ones its own prefill would store. Shared only for prompts of
    ids and mask alone (family tensors such as images or multimodal rope offsets are
    prepared per row by the model's own prefill) and caches that can repeat their rows;
    returns (cache, the keyword ``generate`` takes it by).
    """
    G = group_size
    if G < 2 or set(inputs) != {"input_ids", "attention_mask"}:
        return None
    ids, mask = inputs["input_ids"], inputs["attention_mask"]  # [N, P]
    N, P = ids.shape
    if P < 2 or N % G:
        return None
    first = slice(0, N, G)  # row b*G: the group's prompt (the G rows are equal)
    if not (torch.equal(ids.reshape(N // G, G, P), ids[first, None].expand(N // G, G, P))
            and torch.equal(mask.reshape(N // G, G, P), mask[first, None].expand(N // G, G, P))):
        return None
    params = inspect.signature(model.forward).parameters
    key = "cache" if "cache" in params else "past_key_values"  # transformers 5.2x: cache
    if key not in params:
        return None
    m = mask[first, :-1]  # [B, P - 1]
    position_ids = (m.long().cumsum(-1) - 1).masked_fill(m == 0, 0)  # generate's positions
    extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(input_ids=ids[first, :-1], attention_mask=m, position_ids=position_ids,
                use_cache=True, **extra)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        return None
    cache.batch_repeat_interleave(G)  # [B, ...] -> [B x G, ...], row b*G + g
    return cache, key


class HFEngine:
    """Generation with the policy model itself (no second copy, no weight sync)."""

    def __init__(self, adapter, model):
        self.adapter = adapter
        self.model = model

    def update_weights(self, model) -> None:
        """The engine samples from the training model directly: nothing to sync."""
        self.model = model

    def generate_with(self, weights, model, rendered: Sequence[RenderedPrompt], group_size: int,
                      sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        """Sample from the weights the module holds inside ``weights`` (the engine reads the
        module itself, so entering the context is the whole swap; leaving it restores
        the policy's values)."""
        with weights:
            return self.generate(rendered, group_size, sampling, seed=seed)

    @torch.no_grad()
    def generate(self, rendered: Sequence[RenderedPrompt], group_size: int,
                 sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        G = group_size
        adapter = self.adapter
        # Each prompt G times, prompt-major: row b*G + g. Encoding the repeats (rather than
        # repeating tensors) keeps every family's per-image tensors in step.
        prompts = adapter.encode_prompts([r for r in rendered for _ in range(G)])
        recorder = SampledLogprobRecorder(prompts.prompt_len)
        stop_ids = adapter.stop_token_ids()
        if seed is not None:
            torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            inputs = prompts.to(device).inputs
            # multimodal prompts: the family's own prefill (image features, rope offsets)
            shared = None if adapter.is_multimodal else shared_prompt_cache(self.model, inputs, G)
            cache = {shared[1]: shared[0]} if shared is not None else {}  # the KV cache kwarg
            sequences = self.model.generate(
                **inputs, **cache, do_sample=True, temperature=1.0, top_p=1.0,
                top_k=0,  # the engine's warpers below, ahead of the recorder
                max_new_tokens=sampling.max_new_tokens, eos_token_id=stop_ids,
                pad_token_id=adapter.pad_token_id(),
                suppress_tokens=adapter.suppressed_token_ids() or None,
                logits_processor=LogitsProcessorList([*sampling_warpers(sampling), recorder]),
                **NEUTRAL_SAMPLING,
            )
        finally:
            self.model.train(was_training)
        new = sequences[:, prompts.prompt_len:]  # [N, T]
        logprobs = recorder.finish(sequences).cpu()  # [N, T]; rollouts live on the CPU
        stops = set(stop_ids)
        completions, finished = [], []
        for row in new.tolist():
            c = cut_at_stop(row, stop_ids)
            completions.append(c)
            finished.append(bool(c) and c[-1] in stops)
        T = max((len(c) for c in completions), default=0)
        mask = torch.zeros(len(completions), T)
        for i, c in enumerate(completions):
            mask[i, : len(c)] = 1
        logprobs = logprobs[:, :T] * mask  # [N, T]
        texts = adapter.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return Rollouts(prompts=prompts, completions=completions, texts=texts,
                        logprobs=logprobs, finished=finished, group_size=G)
