"""Benchmark: padding-free (packed) GRPO updates against padded ones, in one run.

Run from the project root (offline, CPU, fp32; a few minutes on 2 CPU cores)::

    python bench/packing.py [--repeats 3] [--threads 1] [--device cpu] [--quick]

What it measures
----------------
For each setup, the same rollouts are trained on with ``grpo.packing=false`` (every
micro-batch padded to its longest prompt + completion) and ``grpo.packing=true`` (each
micro-batch's sequences concatenated into rows, ``Adapter.pack_training``, and, for
Qwen2-VL / Qwen2.5-VL, the vision tower run once per distinct image instead of once per
rollout, ``Adapter.share_images``), from the same starting weights (restored before
every timed update):

- ``padding share``: the share of the update's token positions that are padding, over
  the micro-batches one forward sees (padded: sum of n x L per micro-batch; packed: S
  real tokens in rows no wider than the longest sequence, so only the pad runs that end
  rows); ``packed mbs``: how many micro-batches were packed (a micro-batch that packing
  would shrink by less than 10% stays padded: ``update.PACK_MIN_SAVING``);
- ``update s``: the median wall time of ``vlcohort.training.update.update_agent`` (the
  old-log-prob pass when one is needed, the reference pass when the loss has a KL term,
  forward / backward / optimizer step, the weight push of the HF engine), over
  ``--repeats`` interleaved runs per mode;
- ``max |dlogp|``: the largest difference between the packed and the padded policy
  log-probs of the real completion tokens, at the starting weights.

Setups:

(a) ``demo``: configs/demo.yaml's two tiny models (Gemma-3, InternVL3.5) and its settings
    (B = 8 prompts x G = 8 rollouts, 8 new tokens, micro_batch_seqs 64, kl_coef 0.3:
    a reference pass), on rollouts each model samples from the demo's synthetic task.
    Gemma-3 does not pack (its adapter declares ``packing = False``): its two rows show
    the fallback costs nothing.
(b) ``long-tail``: tiny Qwen2.5-VL, B = 4 x G = 8 with completion lengths drawn from a
    long-tailed (log-normal, median 120) distribution, clipped to 10..1500 tokens, token
    ids drawn at random (the update's cost does not depend on which tokens they are),
    micro_batch_seqs 8, kl_coef 0 (no reference pass), one PPO epoch. Also a third row,
    packed with ``grpo.micro_batch_tokens`` (balanced token-budget micro-batches).

The last lines are ``max_logprob_diff=<x>`` (over every setup) and
``update_time_ratio_packed_vs_padded=<x>``: (b)'s packed median update time over its padded
one (target <= 0.7; below 1 packing is faster). Timings on a shared CPU are noisy
(+-15-30% run to run): compare ratios from one run, not times across runs. ``--quick``
shrinks (b) to a smoke run (the test's). A benchmark prints ratios; it is not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="timed updates per mode (median)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (0: torch's default; 1 keeps a shared CPU quiet)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (the models' device)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: (b) with 8 sequences of at most 200 tokens, 1 repeat")
    ap.add_argument("--skip-demo", action="store_true", help="run (b) only")
    return ap.parse_args(argv)


def long_tail_lengths(n: int, seed: int, lo: int = 10, hi: int = 1500, median: float = 120.0,
                      sigma: float = 1.0) -> list[int]:
    """``n`` completion lengths from a log-normal distribution (median ``median``, log-sd
    ``sigma``: a few completions ~10x the median, as reasoning rollouts have), clipped to
    [lo, hi]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.exp(torch.randn(n, generator=g) * sigma + float(torch.log(torch.tensor(median))))
    return [int(v) for v in x.round().clamp(lo, hi)]


def padding_share(mbs, lengths: list[int]) -> float:
    """Share of padding among the token positions the micro-batches' forwards see
    (``lengths``: each rollout row's real prompt + completion tokens)."""
    from vlcohort.training.update import row_indices

    real = sum(lengths[n] for rows, _ in mbs for n in row_indices(rows))
    seen = sum(tb.inputs["input_ids"].numel() for _, tb in mbs)
    return 1.0 - real / max(1, seen)


class Setup:
    """One agent, its rendered prompts, fixed rollouts and advantages, its starting state."""

    def __init__(self, name: str, config: str | None, overrides: list[str], agent_index: int,
                 problems, rollouts_fn, device: str):
        from vlcohort.config import load_config
        from vlcohort.training.agent import build_agent

        self.name = name
        device_over = [f"agents.{agent_index}.device={device}"] if device != "cpu" else []
        self.cfg = load_config(config, [*overrides, *device_over])
        self.path = self.cfg.agents[agent_index].path
        self.agent = build_agent(self.cfg.agents[agent_index], self.cfg)
        p = self.cfg.prompt
        self.rendered = [self.agent.adapter.render(x, p.system_prompt, p.instruction) for x in problems]
        self.rollouts = rollouts_fn(self)
        N = len(self.rollouts.completions)
        g = torch.Generator().manual_seed(1)
        self.adv = torch.randn(N, generator=g)  # [N]
        self.start = {k: v.detach().clone() for k, v in self.agent.model.state_dict().items()}
        self.opt_start = self.agent.optimizer.state_dict()

    def reset(self) -> None:
        self.agent.model.load_state_dict(self.start)
        self.agent.optimizer.load_state_dict(self.opt_start)

    def grpo(self, **changes):
        from dataclasses import replace

        return replace(self.cfg.grpo, **changes)

    def update_time(self, g) -> float:
        from vlcohort.training.update import update_agent

        self.reset()
        sync()
        t0 = time.perf_counter()
        update_agent(self.agent, self.rendered, self.rollouts, self.adv, g,
                     self.cfg.rollout.temperature, self.cfg.rollout.max_new_tokens)
        sync()
        return time.perf_counter() - t0

    def logprobs(self, g) -> tuple[torch.Tensor, torch.Tensor, float, str]:
        """([N, T] log-probs, [N, T] completion mask, padding share, "packed micro-batches /
        micro-batches") at the start weights."""
        from vlcohort.training.update import (
            completion_mask,
            policy_logprobs,
            row_tokens,
            update_micro_batches,
        )

        self.reset()
        device = next(self.agent.model.parameters()).device
        mbs = update_micro_batches(self.agent, self.rendered, self.rollouts, g, device)
        T = self.rollouts.logprobs.shape[1]
        N = len(self.rollouts.completions)
        with torch.no_grad():
            lp = policy_logprobs(self.agent, mbs, T, self.cfg.rollout.temperature)
        lengths = row_tokens(self.agent, self.rendered, self.rollouts)
        packed = f"{sum(tb.packed for _, tb in mbs)}/{len(mbs)}"
        return lp.cpu(), completion_mask(mbs, N, T, device).cpu(), padding_share(mbs, lengths), packed


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def sampled(setup: Setup):
    """The agent's own rollouts of the rendered prompts (the demo's batches)."""
    from vlcohort.rollout.base import SamplingParams

    r = setup.cfg.rollout
    torch.manual_seed(setup.cfg.run.seed)
    return setup.agent.engine.generate(setup.rendered, r.rollouts_per_prompt,
                                       SamplingParams(max_new_tokens=r.max_new_tokens,
                                                      temperature=r.temperature), seed=setup.cfg.run.seed)


def drawn(lengths: list[int], vocab: int, G: int, seed: int):
    """Rollouts with the given completion lengths and random token ids below ``vocab``."""
    from vlcohort.rollout.base import Rollouts

    def make(setup: Setup):
        g = torch.Generator().manual_seed(seed)
        comps = [torch.randint(10, vocab, (n,), generator=g).tolist() for n in lengths]
        T = max(lengths)
        lp = torch.zeros(len(comps), T)
        for i, n in enumerate(lengths):
            lp[i, :n] = -2.0  # a finite sampler log-prob on every real token
        return Rollouts(prompts=None, completions=comps, texts=[""] * len(comps), logprobs=lp,
                        finished=[True] * len(comps), group_size=G)

    return make


def measure(setup: Setup, modes: dict, repeats: int) -> dict:
    """Per mode: padding share, median update seconds, log-probs; runs interleaved."""
    out = {name: {"times": []} for name in modes}
    for name, g in modes.items():
        lp, mask, share, packed = setup.logprobs(g)
        out[name].update(lp=lp, mask=mask, share=share, packed=packed)
    for name, g in modes.items():  # warm-up, untimed
        setup.update_time(g)
    for _ in range(repeats):
        for name, g in modes.items():
            out[name]["times"].append(setup.update_time(g))
    for name in modes:
        out[name]["median"] = statistics.median(out[name]["times"])
    return out


def report(setup: Setup, res: dict) -> float:
    """Print one setup's table; returns its max |packed - padded| log-prob difference."""
    N = len(setup.rollouts.completions)
    lens = [len(c) for c in setup.rollouts.completions]
    print(f"\n({setup.name}) {setup.path} ({setup.agent.adapter.family}): N={N} sequences, completion lengths "
          f"{min(lens)}..{max(lens)} (mean {sum(lens) / N:.0f}), packs: "
          f"{setup.agent.adapter.can_pack(setup.agent.model)}")
    base = res["padded"]
    print(f"  {'mode':<22} {'packed mbs':>10} {'padding share':>13} {'update s':>9} {'vs padded':>9} "
          f"{'max |dlogp|':>11}")
    worst = 0.0
    for name, r in res.items():
        diff = float(((r["lp"] - base["lp"]).abs() * base["mask"]).max())
        worst = max(worst, diff)
        print(f"  {name:<22} {r['packed']:>10} {r['share']:>13.3f} {r['median']:>9.3f} "
              f"{r['median'] / base['median']:>9.3f} {diff:>11.2e}")
    return worst


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    from vlcohort.data.synthetic import make_dataset

    print(f"bench/packing.py: fp32, {args.device}, {torch.get_num_threads()} torch thread(s); "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    worst = 0.0
    repeats = 1 if args.quick else args.repeats
    if not args.skip_demo and not args.quick:
        demo = str(ROOT / "configs" / "demo.yaml")
        from vlcohort.config import load_config

        dcfg = load_config(demo, [])
        problems = make_dataset(tuple(dcfg.data.tasks), n=dcfg.rollout.prompts_per_step,
                                seed=args.seed, image_size=dcfg.data.image_size,
                                shuffle_options=dcfg.data.shuffle_options)
        for i in range(len(dcfg.agents)):
            s = Setup("a: demo", demo, [], i, problems, sampled, args.device)
            res = measure(s, {"padded": s.grpo(packing=False), "packed": s.grpo(packing=True)}, repeats)
            worst = max(worst, report(s, res))
            del s
    B, G = (2, 4) if args.quick else (4, 8)
    lengths = long_tail_lengths(B * G, args.seed, hi=200 if args.quick else 1500)
    over = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
            f"rollout.prompts_per_step={B}", f"rollout.rollouts_per_prompt={G}",
            f"rollout.max_new_tokens={max(lengths)}", "grpo.micro_batch_seqs=8", "grpo.kl_coef=0",
            "optim.warmup_ratio=0", "optim.schedule=constant"]
    problems = make_dataset(("shape_colour", "count_shapes"), n=B, seed=args.seed)
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path

    vocab = len(adapter_for(tiny_model_path("tiny:qwen2_5_vl")).tokenizer) - 20  # below the specials
    s = Setup("b: long-tail", None, over, 0, problems, drawn(lengths, vocab, G, args.seed), args.device)
    budget = 8 * int(statistics.mean(lengths) + 100)  # ~ micro_batch_seqs sequences of mean length
    res = measure(s, {"padded": s.grpo(packing=False), "packed": s.grpo(packing=True),
                      f"packed, {budget} tokens": s.grpo(packing=True, micro_batch_tokens=budget)},
                  repeats)
    worst = max(worst, report(s, res))
    ratio = res["packed"]["median"] / res["padded"]["median"]
    print(f"\nmax_logprob_diff={worst:.2e}")
    print(f"update_time_ratio_packed_vs_padded={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
