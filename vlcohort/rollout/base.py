"""What every rollout engine takes and returns.

The trainer hands an engine B rendered prompts and asks for G completions each; the
engine returns N = B x G sequences in prompt-major order (row b*G + g is rollout g of
prompt b), with the token ids it sampled, their text, and the log-probability of each
sampled token *under the distribution it sampled from* (logits / temperature) for the
importance-sampling correction between rollout and policy.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from vlcohort.processors import PromptBatch, RenderedPrompt


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off


@dataclass
class Rollouts:
    """N = B x G completions, prompt-major.

    Attributes:
        prompts: the prompt batch, each prompt repeated G times (N rows of inputs), ready for
            ``adapter.encode_training(prompts, completions)``.
        completions: token ids per sequence, stop token included (list of N lists).
        texts: decoded completions without special tokens (N strings).
        logprobs: [N, T] sampling log-probs of each completion token (0 beyond its end);
            T = the longest completion.
        finished: [N] True when the completion ended with a stop token (False: cut at
            max_new_tokens).
        group_size: G.
    """

    prompts: PromptBatch | None  # None in a subset (select_prompts) and from the vllm engine
    completions: list[list[int]]
    texts: list[str]
    logprobs: torch.Tensor
    finished: list[bool]
    group_size: int

    @property
    def num_prompts(self) -> int:
        return len(self.completions) // self.group_size

    def select_prompts(self, prompt_indices: list[int]) -> "Rollouts":
        """The rollouts of some prompts only (rows b*G .. b*G+G-1 of each), in that order.

        ``prompts`` is not carried over (per-image tensors cannot be sliced without family
        knowledge); the update re-encodes its micro-batches from the rendered prompts.
        """
        G = self.group_size
        rows = [b * G + g for b in prompt_indices for g in range(G)]
        return Rollouts(prompts=None, completions=[self.completions[r] for r in rows],
                        texts=[self.texts[r] for r in rows],
                        logprobs=self.logprobs[torch.tensor(rows, dtype=torch.long)],
                        finished=[self.finished[r] for r in rows], group_size=G)

    def concat(self, other: "Rollouts") -> "Rollouts":
        """The rows of ``self`` then those of ``other`` [N_a + N_b]; log-probs [N, T]
        zero-padded to the longer T (0 beyond a completion's end, as an engine pads them).
        ``prompts`` is not carried, as in :meth:`select_prompts`."""
        T = max(self.logprobs.shape[1], other.logprobs.shape[1])

        def pad(t: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(t, (0, T - t.shape[1]))  # [n, t] -> [n, T]

        return Rollouts(prompts=None, completions=self.completions + other.completions,
                        texts=self.texts + other.texts,
                        logprobs=torch.cat([pad(self.logprobs), pad(other.logprobs)]),
                        finished=list(self.finished) + list(other.finished),
                        group_size=self.group_size)

    def lengths(self) -> torch.Tensor:
        return torch.tensor([len(c) for c in self.completions])  # [N]

    def texts_by_prompt(self) -> list[list[str]]:
        """[B][G] texts."""
        G = self.group_size
        return [self.texts[b * G:(b + 1) * G] for b in range(self.num_prompts)]


class Engine(Protocol):
    def generate(self, rendered: Sequence[RenderedPrompt], group_size: int,
                 sampling: SamplingParams, seed: int | None = None) -> Rollouts: ...

    def update_weights(self, model) -> None: ...

    def generate_with(self, weights: AbstractContextManager, model,
                      rendered: Sequence[RenderedPrompt], group_size: int,
                      sampling: SamplingParams, seed: int | None = None) -> Rollouts:
        """Sample as :meth:`generate`, from the weights ``model`` holds while the context
        ``weights`` is entered (it puts other weights into the policy module and restores
        them on exit: Co-rewarding-II's EMA teacher, ``training/ema.py``); afterwards the
        engine samples from the policy's own weights again. No second engine is built."""
        ...
