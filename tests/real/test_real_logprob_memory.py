"""The chunked log-prob pass within a stated memory bound, on Gemma-3-270M's 262,144-token
vocabulary, where a fixed chunk of positions is no bound at all: 256 positions x 16
sequences x 262,144 x 4 bytes = 4.3 GB per float32 buffer.

The bound (``vlcohort/training/logprobs.py``): a chunk's positions are cut so that one
[N, c, V] float32 buffer fits the budget, and with gradient each chunk is recomputed in
backward once the kept [N, T, V] log-softmaxes would exceed it. A pass then holds a few
budget-sized buffers above the decoder's own activations. Measured here, each in a fresh
process, as the peak of the process's anonymous resident memory during the pass above its level before it (sampled
from ``/proc/self/statm``; torch's CPU allocator hands large buffers back to the OS when
freed, so the anonymous resident set follows the live tensors), with the model's weights
copied out of their file mapping first.

Below, the same maths on a toy model: the budget's chunk arithmetic, and recomputation in
backward giving the gradients of the plain pass.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from vlcohort.data.problems import Problem
from vlcohort.processors.base import Adapter, AdapterOptions, TrainingBatch
from vlcohort.training.logprobs import (
    LOGITS_BUDGET_BYTES,
    chunk_positions,
    completion_logprobs,
    completion_token_stats,
)

MiB = 2**20
N, T = 8, 64  # sequences, completion tokens of the real-model batch
BUDGET = 32 * MiB  # bytes per [N, c, V] float32 buffer in the bounded passes
#: Buffers of one chunk alive at once at most (logits, log_softmax, the statistics' softmax,
#: a temperature-scaled copy), and room for the decoder's activations (a no-grad forward of
#: 8 x ~165 tokens through a 640-wide, 18-layer body: ~10 MB at a time) and allocator slack.
BUFFERS, SLACK = 4, 96 * MiB
BOUND = BUFFERS * BUDGET + SLACK
GRAD_BUFFERS = 6  # with gradient: see test_grad_pass_recomputes_chunks_...


def _anon_bytes() -> int:
    """Anonymous resident bytes of this process (heap and anonymous mappings: where tensors
    live), from ``/proc/self/statm``: resident minus file-backed and shared pages."""
    fields = Path("/proc/self/statm").read_text().split()
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    """Hand memory that malloc keeps free-but-resident back to the OS (glibc), so that the
    pass's buffers cannot hide in it: they must grow the resident set to exist."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _peak_above_now(fn):
    """(fn's result, peak anonymous resident bytes of this process while fn ran, above the
    anonymous resident bytes before it), sampled every ~0.2 ms by a thread (torch's kernels
    release the GIL). Anonymous memory only: file-backed pages (library code) that memory
    pressure evicts or faults back in meanwhile are not the pass's, and would blur the
    kernel's own peak counter (VmHWM) either way."""
    if not Path("/proc/self/statm").is_file():
        pytest.skip("no /proc/self/statm here: the peak is measured on Linux")
    gc.collect()
    _trim()
    before = _anon_bytes()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _anon_bytes())
            time.sleep(0.0002)

    poller = threading.Thread(target=sample, daemon=True)
    poller.start()
    try:
        result = fn()
    finally:
        done.set()
        poller.join()
    return result, max(peak[0], _anon_bytes()) - before


#: Set in the child process that runs a memory test on its own.
CHILD_FLAG = "VLCOHORT_MEMORY_TEST_CHILD"


def _measured_in_a_fresh_process(request) -> bool:
    """Run this test again in a new Python process and assert it passed there (True), or
    say that this already is that process (False). A process that has trained and
    generated before (the rest of the suite) holds allocator arenas, thread pools and
    cached pages that move its resident set by hundreds of MB on their own; a fresh
    process's resident set follows the pass's buffers."""
    if os.environ.get(CHILD_FLAG) == "1":
        return False
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          request.node.nodeid], cwd=root, capture_output=True, text=True,
                         timeout=1200, env={**os.environ, CHILD_FLAG: "1"})
    print(out.stdout[-1500:])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1], out.stdout[-2000:]
    return True


def _real_batch(loaded, n: int = N, t: int = T) -> TrainingBatch:
    """n sequences of a rendered prompt (r1_zero, ~100 tokens) followed by t seeded
    random completion tokens ([n, t]); the log-prob of any token sequence is defined."""
    a = loaded.adapter
    r = a.render(Problem("q", "What is 6 times 7?"), None, "Put the answer in \\boxed{}.")
    prompts = a.encode_prompts([r] * n)
    V = a.lm_head(loaded.model).weight.shape[0]
    g = torch.Generator().manual_seed(0)
    completions = torch.randint(1000, V, (n, t), generator=g).tolist()
    completions[1] = completions[1][: t // 2]  # one shorter completion: padding too
    return a.encode_training(prompts, completions)


@pytest.fixture(scope="module")
def batch(gemma3):
    """The batch, with the model's weights moved into anonymous memory first: loaded, they
    are pages of the mmapped safetensors file that the first forward faults in (1 GB that
    would count as the pass's) and that memory pressure may evict and fault in again.
    Copied, they stay resident, and the measured growth is the pass's own buffers."""
    with torch.no_grad():
        for p in gemma3.model.parameters():
            p.data = p.data.clone()
    return _real_batch(gemma3)


def test_gemma_vocabulary_is_the_case_that_needs_a_bound(gemma3):
    V = gemma3.adapter.lm_head(gemma3.model).weight.shape[0]
    assert V == 262_144
    # the options' default chunk is cut by the default budget: 256 positions would be
    # 2 GiB per buffer for 8 sequences; 32 fit 256 MiB
    assert chunk_positions(N, V, gemma3.adapter.options.logprob_chunk_tokens) == 32
    assert 4 * N * 32 * V <= LOGITS_BUDGET_BYTES


def test_no_grad_pass_stays_within_the_bound_and_equals_the_unchunked_numbers(request):
    if _measured_in_a_fresh_process(request):
        return
    gemma3, batch = request.getfixturevalue("gemma3"), request.getfixturevalue("batch")
    a, model = gemma3.adapter, gemma3.model
    V = 262_144
    whole_bytes = 4 * N * T * V  # one [N, T, V] float32 buffer: 512 MiB
    with torch.no_grad():
        whole, peak_whole = _peak_above_now(
            lambda: completion_logprobs(a, model, batch, 0.7, chunk_tokens=T,
                                        budget_bytes=whole_bytes))
        bounded, peak = _peak_above_now(
            lambda: completion_logprobs(a, model, batch, 0.7, budget_bytes=BUDGET))
    print(f"gemma3 no-grad log-prob pass, N={N} T={T} V={V}: peak {peak / MiB:.0f} MiB with a "
          f"{BUDGET // MiB} MiB budget (bound {BOUND / MiB:.0f} MiB); unchunked "
          f"{peak_whole / MiB:.0f} MiB")
    assert peak_whole > BOUND, "the measurement does not see the logits: weak test"
    assert peak < BOUND, f"{peak / MiB:.0f} MiB > bound {BOUND / MiB:.0f} MiB"
    mask = batch.completion_mask.bool()
    assert torch.allclose(bounded, whole, atol=1e-4, rtol=0), float((bounded - whole).abs().max())
    assert (bounded[~mask] == 0).all() and torch.isfinite(bounded[mask]).all()


def test_grad_pass_recomputes_chunks_within_the_bound_with_the_same_gradient(request):
    """With gradient, kept chunks would hold [N, T, V] log-softmaxes for backward;
    recomputed in backward, a chunk at a time. Only the final norm takes a gradient (the
    body's activations then need not be kept), so the measured memory is the head's. A
    smaller batch than above (4 x 48 positions): a backward through a 262k-wide head is the
    slow part of this file. A chunk's backward holds up to six buffers at once (the
    recomputed logits and log_softmax, the gathered gradient scattered to [N, c, V], the
    softmax and the logits' gradient). The budget stays 32 MiB: glibc serves smaller
    buffers from its heap once a freed one has raised its mmap threshold, and heap memory
    freed out of order stays resident, which would measure the allocator, not the pass."""
    if _measured_in_a_fresh_process(request):
        return
    gemma3 = request.getfixturevalue("gemma3")
    request.getfixturevalue("batch")  # the weights copied into anonymous memory
    n, t, budget = 4, 48, BUDGET
    bound = GRAD_BUFFERS * budget + SLACK
    small = _real_batch(gemma3, n, t)  # the weights are already anonymous (``batch``)
    a, model = gemma3.adapter, gemma3.model
    norm = model.model.norm.weight
    saved = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    norm.requires_grad_(True)
    try:
        def loss_and_grad(b):
            def run():
                norm.grad = None
                lp = completion_logprobs(a, model, small, budget_bytes=b)
                lp.sum().backward()
                return lp.detach(), norm.grad.clone()
            return run

        (lp_kept, g_kept), peak_kept = _peak_above_now(loss_and_grad(4 * n * t * 262_144))
        (lp_rec, g_rec), peak_rec = _peak_above_now(loss_and_grad(budget))
    finally:
        for p, r in zip(model.parameters(), saved):
            p.requires_grad_(r)
        norm.grad = None
    print(f"gemma3 grad log-prob pass, N={n} T={t}: peak {peak_rec / MiB:.0f} MiB recomputing "
          f"chunks with a {budget // MiB} MiB budget (bound {bound / MiB:.0f} MiB), "
          f"{peak_kept / MiB:.0f} MiB keeping them")
    assert peak_kept > bound, "the measurement does not see the kept chunks: weak test"
    assert peak_rec < bound, f"{peak_rec / MiB:.0f} MiB > bound {bound / MiB:.0f} MiB"
    assert torch.allclose(lp_rec, lp_kept, atol=1e-4, rtol=0)
    assert torch.allclose(g_rec, g_kept, rtol=1e-4, atol=1e-4), float((g_rec - g_kept).abs().max())


# --------------------------------------------------------------------------- toy model

V_TOY, H_TOY = 11, 6


class _Toy(torch.nn.Module):
    """A causal toy LM: hidden state t = running mean of the token embeddings up to t."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Parameter(torch.randn(V_TOY, H_TOY, generator=g))
        self.head = torch.nn.Linear(H_TOY, V_TOY)
        with torch.no_grad():
            self.head.weight.copy_(3 * torch.randn(V_TOY, H_TOY, generator=g))
            self.head.bias.copy_(torch.randn(V_TOY, generator=g))

    def hidden(self, ids):  # [N, L] -> [N, L, H]
        e = self.embed[ids]
        return e.cumsum(1) / torch.arange(1, ids.shape[1] + 1)[None, :, None]


class _ToyAdapter(Adapter):
    is_multimodal = False

    def __init__(self):
        super().__init__("toy", AdapterOptions(), processor=type("P", (), {"chat_template": "x"})())

    def decoder_hidden_states(self, model, inputs):
        return model.hidden(inputs["input_ids"])

    def lm_head(self, model):
        return model.head

    def logit_softcap(self, model):
        return 3.0

    def suppressed_token_ids(self):
        return [5]


def _toy_batch() -> TrainingBatch:
    """N = 3, P = 2, T = 7 completion tokens (rows 1, 2 right-padded)."""
    prompt = torch.tensor([[1, 2], [3, 4], [6, 7]])
    comp = torch.tensor([[7, 8, 9, 10, 1, 2, 3], [2, 3, 4, 0, 0, 0, 0], [4, 0, 0, 0, 0, 0, 0]])
    mask = (comp != 0).long()
    mask[0] = 1
    return TrainingBatch(inputs={"input_ids": torch.cat([prompt, comp], 1),
                                 "attention_mask": torch.cat([torch.ones_like(prompt), mask], 1)},
                         completion_ids=comp, completion_mask=mask, prompt_len=2)


def test_chunk_positions_fit_the_budget():
    V = 262_144
    assert chunk_positions(16, V, 256, 256 * MiB) == 16  # 16 x 16 x V x 4 = 256 MiB
    assert chunk_positions(1, V, 256, 256 * MiB) == 256  # the option's chunk is the cap
    assert chunk_positions(64, V, 256, 1 * MiB) == 1  # never below one position
    for n, c in ((3, 100), (16, 256), (128, 512)):
        k = chunk_positions(n, V, c, 64 * MiB)
        assert 1 <= k <= c and (k == 1 or 4 * n * k * V <= 64 * MiB)


@pytest.mark.parametrize("budget", [4 * 3 * 1 * V_TOY, 4 * 3 * 2 * V_TOY, 10**9])
def test_budgeted_chunks_and_recomputation_keep_numbers_and_gradients(budget):
    """Budgets of 1 and 2 positions (recomputation in backward: [N, T, V] is past them) and
    an unbounded one give the same log-probs, token statistics and gradients."""
    adapter, tb = _ToyAdapter(), _toy_batch()

    def run(b):
        model = _Toy()
        lp = completion_logprobs(adapter, model, tb, 0.8, chunk_tokens=100, budget_bytes=b)
        (lp * torch.linspace(-1, 1, lp.shape[1])).sum().backward()
        stats = completion_token_stats(adapter, model, tb, 0.8, chunk_tokens=100,
                                       budget_bytes=b)
        return lp.detach(), [p.grad for p in model.parameters()], stats

    lp, grads, stats = run(budget)
    lp0, grads0, stats0 = run(10**12)
    assert torch.allclose(lp, lp0, atol=1e-6)
    assert all(torch.allclose(g, g0, atol=1e-6) for g, g0 in zip(grads, grads0))
    assert grads[0].abs().sum() > 0 and grads[1].abs().sum() > 0  # the gradient flows
    for key in ("logprobs", "self_certainty", "entropy"):
        assert torch.allclose(getattr(stats, key), getattr(stats0, key), atol=1e-6), key
    assert (lp[tb.completion_mask == 0] == 0).all()
