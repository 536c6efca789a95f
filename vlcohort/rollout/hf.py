"""The ``hf`` rollout engine: batched ``model.generate`` with left padding.

Sampling log-probs are recorded *during* generation by a logits processor that keeps one
step of log-probabilities ([N, V]) at a time, so memory does not grow with
``max_new_tokens`` x vocabulary the way ``output_logits=True`` would (64 sequences x 1k
tokens x 152k vocabulary would be 40 GB in fp32).

The recorded distribution is ``log_softmax(logits / temperature)`` over the whole
vocabulary: the same quantity ``adapter.completion_logprobs(..., temperature)`` computes
for the policy, so with ``top_p = 1`` and ``top_k = 0`` the IS weight measures only the
numeric mismatch between engine and trainer. With top-p / top-k the engine samples from a
truncated distribution; the recorded log-probs stay untruncated (as verl and TRL do).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from processors import RenderedPrompt, cut_at_stop

from vlcohort.rollout.base import Rollouts, SamplingParams


class SampledLogprobRecorder(LogitsProcessor):
    """Records log p(token) of every sampled token, one generation step behind.

    ``generate`` calls processors before sampling; at step k the processor sees the
    token sampled at step k-1 as the last column of ``input_ids``, so it gathers that
    token's log-prob from the distribution it stored at step k-1. :meth:`finish` gathers
    the last step's tokens after generation ends. Custom processors run after the
    default ones (token suppression) and before the temperature / top-k / top-p warpers,
    so ``scores`` here are the logits with the adapter's suppressed tokens at -inf:
    the distribution ``adapter.completion_logprobs`` computes.
    """

    def __init__(self, temperature: float, prompt_len: int):
        self.temperature = temperature
        self.prompt_len = prompt_len
        self.prev: torch.Tensor | None = None  # [N, V] log-probs of the previous step
        self.columns: list[torch.Tensor] = []  # each [N]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.columns.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
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
#: (List-valued ones -- bad_words_ids, sequence_bias, forced tokens -- have no neutral
#: non-None value and are not overridden; chat checkpoints do not set them.)
NEUTRAL_SAMPLING = dict(repetition_penalty=1.0, encoder_repetition_penalty=1.0,
                        no_repeat_ngram_size=0, encoder_no_repeat_ngram_size=0,
                        min_length=0, min_new_tokens=0, typical_p=1.0, epsilon_cutoff=0.0,
                        eta_cutoff=0.0)


class HFEngine:
    """Generation with the policy model itself (no second copy, no weight sync)."""

    def __init__(self, adapter, model):
        self.adapter = adapter
        self.model = model

    def update_weights(self, model) -> None:
        """The engine samples from the training model directly: nothing to sync."""
        self.model = model

    @torch.no_grad()
    def generate(self, rendered: Sequence[RenderedPrompt], group_size: int,
                 sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        G = group_size
        adapter = self.adapter
        # Each prompt G times, prompt-major: row b*G + g. Encoding the repeats (rather than
        # repeating tensors) keeps every family's per-image tensors in step.
        prompts = adapter.encode_prompts([r for r in rendered for _ in range(G)])
        recorder = SampledLogprobRecorder(sampling.temperature, prompts.prompt_len)
        stop_ids = adapter.stop_token_ids()
        if seed is not None:
            torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            sequences = self.model.generate(
                **prompts.to(device).inputs, do_sample=True, temperature=sampling.temperature,
                top_p=sampling.top_p, top_k=sampling.top_k,
                max_new_tokens=sampling.max_new_tokens, eos_token_id=stop_ids,
                pad_token_id=adapter.pad_token_id(),
                suppress_tokens=adapter.suppressed_token_ids() or None,
                logits_processor=LogitsProcessorList([recorder]), **NEUTRAL_SAMPLING,
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
