"""Per-token log-probabilities of completions, and statistics of the distributions they
were drawn from: the model-agnostic maths over any family's adapter.

One chunked pass serves every caller (the policy loss, the "old" and reference log-probs,
the intrinsic rewards' token statistics, the warm-up): the decoder runs once to hidden
states, then the LM head and ``log_softmax`` run over chunks of completion positions in
float32, so that [N, T, V] logits never exist whole.

Memory bound. A chunk is ``c`` completion positions of all N sequences, and each float32
buffer of a chunk is [N, c, V] (4 N c V bytes): the logits, their ``log_softmax``, a
temperature-scaled copy, a statistics buffer. ``c`` is the options' chunk
(``logprob_chunk_tokens``) but never more than :data:`LOGITS_BUDGET_BYTES` allows:
c = max(1, budget // (4 N V)). A fixed chunk of positions is not a bound on its own: 256
positions of 16 sequences over a 262k vocabulary are 4.3 GB per buffer. With gradient
enabled, autograd would keep every chunk's ``log_softmax`` for the backward pass, so the
chunks together would hold [N, T, V] again; when that whole would exceed the budget, each
chunk is recomputed in the backward pass instead (activation checkpointing of the head
and ``log_softmax``: one more LM-head matmul per chunk, and at most one chunk's buffers
alive at a time). Peak memory of a pass is then about (buffers per chunk) x budget above
the decoder's own activations, whatever T and V are.

The family knowledge it needs comes from the adapter's hooks (``vlcohort.processors.base.Adapter``):
``decoder_hidden_states`` (vision features merged in), ``lm_head``, ``logit_softcap``,
``suppressed_token_ids`` (placeholders generation never samples) and the default chunk
``options.logprob_chunk_tokens``.

Dimension letters (docs/design.md, rule 5): N sequences (B prompts x G rollouts), L tokens per sequence
(L = P + T: P prompt tokens, left-padded, then T completion tokens, right-padded), V
vocabulary, H hidden size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch.utils.checkpoint import checkpoint

from vlcohort.processors.base import Adapter, TrainingBatch, unwrap

#: Most bytes of one [N, c, V] float32 buffer of a chunk: the chunk's positions c are cut to
#: fit (at least 1). 256 MiB: 16 sequences x 16 positions of a 262k vocabulary, or x 27 of a
#: 152k one; the LM-head matmul still sees N x c >= 256 rows, which keeps it efficient.
LOGITS_BUDGET_BYTES = 256 * 2**20


@dataclass
class CompletionStats:
    """Per completion token, from one pass (:func:`completion_token_stats`); each [N, T],
    0 on padding."""

    logprobs: torch.Tensor  # [N, T] log-prob of the sampled token under logits / temperature
    self_certainty: torch.Tensor  # [N, T] KL(U || p) of the next-token distribution
    entropy: torch.Tensor  # [N, T] H(p) of the next-token distribution


def completion_logprobs(adapter: Adapter, model, batch: TrainingBatch, temperature: float = 1.0,
                        chunk_tokens: int | None = None, budget_bytes: int | None = None
                        ) -> torch.Tensor:
    """Per-token log-probabilities of the completion tokens under ``model``.

    ``batch``: the adapter's ``encode_training`` output (``input_ids`` [N, L],
    ``completion_ids`` / ``completion_mask`` [N, T]). ``temperature`` divides the logits
    first (the distribution the sampler drew from); the family's suppressed placeholder ids
    are outside the distribution (probability 0). ``chunk_tokens``: completion positions
    per LM-head chunk ([N, chunk, V] at a time; None: ``adapter.options``'), at most what
    ``budget_bytes`` per [N, chunk, V] float32 buffer allows (None:
    :data:`LOGITS_BUDGET_BYTES`). Returns [N, T] float32; padded positions hold 0.
    Differentiable: the trainer calls it with grad enabled for the policy loss.
    """
    return _chunked_pass(adapter, model, batch, temperature, chunk_tokens, stats=None,
                         budget_bytes=budget_bytes)[0]


def completion_logprobs_and_entropy(adapter: Adapter, model, batch: TrainingBatch,
                                    temperature: float = 1.0, chunk_tokens: int | None = None,
                                    budget_bytes: int | None = None
                                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` (with gradient) and, from the same chunks, the entropy
    [N, T] of the distribution each completion token is scored under:
    H = -sum_v p_v log p_v, p = softmax((logits, suppressed ids out) / temperature), the
    distribution the sampler drew from (TRL and verl log the entropy of logits /
    temperature). The entropy is a metric: computed without gradient from the chunk's
    ``log_softmax`` the loss already needs, so the update's forward gives it for one more
    [N, chunk, V] buffer at a time and no second pass. Padded positions hold 0.
    """
    lp, _, _, ent = _chunked_pass(adapter, model, batch, temperature, chunk_tokens, stats=None,
                                  sampled_entropy=True, budget_bytes=budget_bytes)
    return lp, ent


def completion_token_stats(adapter: Adapter, model, batch: TrainingBatch,
                           temperature: float = 1.0, chunk_tokens: int | None = None,
                           stats_temperature_scaled: bool = False,
                           budget_bytes: int | None = None) -> CompletionStats:
    """Log-probs of the completion tokens *and* statistics of the distribution each was
    drawn from, from one chunked pass (the LM head runs once per chunk for both).

    ``logprobs`` [N, T] are exactly :func:`completion_logprobs`' (under logits /
    ``temperature``). ``self_certainty`` and ``entropy`` [N, T] are
    :func:`distribution_stats` of the next-token distribution at each completion position:
    of softmax(logits / temperature) when ``stats_temperature_scaled``, else of
    softmax(logits) (the model's own distribution, whatever the sampler's temperature).
    The family's suppressed placeholder ids are outside the distribution (probability 0)
    in both. Padded positions hold 0. A no-grad pass (rewards are data): nothing it
    returns carries a gradient. A chunk holds one or two [N, chunk, V] float32 buffers
    more than the log-prob pass.
    """
    with torch.no_grad():
        lp, sc, ent, _ = _chunked_pass(adapter, model, batch, temperature, chunk_tokens,
                                       stats=stats_temperature_scaled,
                                       budget_bytes=budget_bytes)
    return CompletionStats(logprobs=lp, self_certainty=sc, entropy=ent)


def _chunked_pass(adapter: Adapter, model, batch: TrainingBatch, temperature: float,
                  chunk_tokens: int | None, stats: bool | None, sampled_entropy: bool = False,
                  budget_bytes: int | None = None):
    """The one chunk loop behind :func:`completion_logprobs`,
    :func:`completion_logprobs_and_entropy` and :func:`completion_token_stats`. ``stats``:
    None = log-probs only; True / False = also per-token statistics, of the
    temperature-scaled / unscaled distribution. ``sampled_entropy``: also the entropy of
    the scored distribution (no gradient). ``budget_bytes``: see the module docstring.
    Returns (logprobs, self_certainty or None, entropy or None, sampled entropy or None),
    each [N, T]. A packed batch (``TrainingBatch.packed_index``) runs the head on its C
    real completion tokens as one [1, C] row, scattered back to [N, T] at the end: no head
    work on padding."""
    model = unwrap(model)
    hidden = adapter.decoder_hidden_states(model, batch.inputs)  # [N, L, H], L = P + T
    P, T = batch.prompt_len, batch.completion_ids.shape[1]
    chunk_tokens = chunk_tokens or adapter.options.logprob_chunk_tokens
    ids = batch.completion_ids  # [N, T]
    if batch.packed:  # hidden [R, W, H]: the C real completion tokens as one row
        rows = batch.completion_ids.shape[0]
        h = hidden.reshape(-1, hidden.shape[-1])[batch.packed_index][None]  # [1, C, H]
        ids = batch.completion_ids[batch.completion_mask.bool()][None]  # [1, C]
        T = h.shape[1]
        chunk_tokens = chunk_tokens * rows  # the padded pass's N x c rows per LM-head call
    else:
        h = hidden[:, P - 1: P + T - 1]  # [N, T, H]: position t predicts completion token t
    head = adapter.lm_head(model)
    softcap = adapter.logit_softcap(model)
    suppressed = adapter.suppressed_token_ids()
    N = h.shape[0]
    V = _vocab_size(head, h)
    budget = LOGITS_BUDGET_BYTES if budget_bytes is None else budget_bytes
    chunk = chunk_positions(N, V, chunk_tokens, budget)
    # With gradient, autograd keeps each chunk's [N, c, V] log_softmax for backward: past the
    # budget, recompute each chunk in backward instead of keeping them all.
    recompute = torch.is_grad_enabled() and h.requires_grad and 4 * N * T * V > budget

    def one_chunk(h_c: torch.Tensor, ids_c: torch.Tensor):
        """Log-probs (and statistics) of c positions: h_c [N, c, H], ids_c [N, c]."""
        logits = head(h_c).float()  # [N, c, V]
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        sc = ent = h_ent = None
        if stats is not None:  # on the finite logits, before the in-place -inf below
            z = logits / temperature if stats and temperature != 1.0 else logits
            sc, ent = distribution_stats(z, suppressed)  # [N, c] each
        if suppressed:
            logits[..., suppressed] = float("-inf")
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1)  # [N, c, V]
        lp = logp.gather(-1, ids_c[..., None]).squeeze(-1)  # [N, c]
        if sampled_entropy:
            with torch.no_grad():  # a metric: no graph kept; entr(0) = 0 on suppressed ids
                h_ent = torch.special.entr(logp.detach().exp()).sum(-1)  # [N, c]
        return lp, sc, ent, h_ent

    out, out_sc, out_ent, out_h = [], [], [], []
    for s in range(0, T, chunk):
        args = (h[:, s: s + chunk], ids[:, s: s + chunk])
        if recompute:
            lp, sc, ent, h_ent = checkpoint(one_chunk, *args, use_reentrant=False,
                                            preserve_rng_state=False)  # no sampling inside
        else:
            lp, sc, ent, h_ent = one_chunk(*args)
        out.append(lp)
        out_sc.append(sc)
        out_ent.append(ent)
        out_h.append(h_ent)
    mask = batch.completion_mask  # [N, T]
    if batch.packed:
        def place(parts: list) -> torch.Tensor:
            """[1, C] chunks -> [N, T], each value at its completion token, 0 on padding."""
            flat = torch.cat(parts, dim=1)[0]  # [C]
            return flat.new_zeros(mask.shape).masked_scatter(mask.bool(), flat)
    else:
        def place(parts: list) -> torch.Tensor:
            return torch.cat(parts, dim=1) * mask  # [N, T]
    logprobs = place(out)  # [N, T]
    h_sampled = place(out_h) if sampled_entropy else None  # [N, T]
    if stats is None:
        return logprobs, None, None, h_sampled
    return logprobs, place(out_sc), place(out_ent), h_sampled


def chunk_positions(n_seqs: int, vocab: int, chunk_tokens: int,
                    budget_bytes: int = LOGITS_BUDGET_BYTES) -> int:
    """Completion positions per chunk: ``chunk_tokens``, cut so that one [N, c, V] float32
    buffer fits ``budget_bytes`` (at least 1 position)."""
    fit = budget_bytes // (4 * max(1, n_seqs) * max(1, vocab))
    return max(1, min(int(chunk_tokens), int(fit)))


def _vocab_size(head: torch.nn.Module, h: torch.Tensor) -> int:
    """V of the LM head: a linear layer's output features (a wrapped head's weight rows),
    else measured on one position without gradient."""
    features = getattr(head, "out_features", None)
    if isinstance(features, int):
        return features
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0])
    with torch.no_grad():
        return int(head(h[:1, :1]).shape[-1])


def distribution_stats(logits: torch.Tensor, excluded: Sequence[int] = ()
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-certainty and entropy of the next-token distributions p = softmax(logits) over
    the V' = V - len(excluded) ids that are not ``excluded`` (suppressed placeholders).

    logits: [..., V] finite floats (exclusion is by index, not by -inf). Returns
    (self_certainty, entropy), each [...]:

    - self_certainty = KL(U || p) = -log V' - (1/V') sum_v log p_v
      = logsumexp(z) - mean(z) - log V', U uniform over the V' ids (INTUITOR, arXiv
      2505.19590): 0 for the uniform distribution, larger when confident. INTUITOR's code
      drops the constant -log V' (it cancels in group-normalised advantages); it is kept
      here so the value reads as a KL.
    - entropy = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v (RENT): 0 when certain,
      log V' at most.

    One [..., V] buffer besides the input (the softmax, built in place).
    """
    excluded = sorted(set(excluded))
    p = logits.clone()  # [..., V] becomes the softmax, in place
    if excluded:
        p[..., excluded] = float("-inf")
    m = p.amax(-1, keepdim=True)  # [..., 1] largest allowed logit: a stable exp
    p.sub_(m).exp_()  # unnormalised, 0 on excluded ids
    total = p.sum(-1, keepdim=True)  # [..., 1]
    lse = (m + total.log()).squeeze(-1)  # [...] logsumexp over the allowed ids
    p.div_(total)  # [..., V] softmax
    n = logits.shape[-1] - len(excluded)
    z_sum = logits.sum(-1)  # [...]
    if excluded:
        z_sum = z_sum - logits[..., excluded].sum(-1)
    self_certainty = lse - z_sum / n - math.log(n)
    entropy = lse - torch.linalg.vecdot(p, logits)
    return self_certainty, entropy
