"""Benchmark: padding-free (packed) GRPO updates against padded ones, in one run.

Run from the project root (offline, CPU, fp32; a few minutes on 2 CPU cores)::

    python bench/packing.py [--repeats 3] [--threads 1] [--device cpu] [--quick] [--lognormal] [--all-bard]

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
  would shrink by less than 10% stays padded: ``update.PACK_MIN_SAVING``); ``1 pass/img``:
  how many micro-batches ran the vision tower once per distinct image;
- ``update s``: the median wall time of ``vlcohort.training.update.update_agent`` (the
  old-log-prob pass when one is needed, the reference pass when the loss has a KL term,
  forward / backward / optimizer step, the weight push of the HF engine), over
  ``--repeats`` interleaved runs per mode;
- ``max |dlogp|``: the largest difference between a mode's policy log-probs of the real
  completion tokens and the table's first mode's (padded; in (c) vision per row), at the
  starting weights.

Setups:

(a) ``demo``: configs/demo.yaml's two tiny models (Gemma-3, InternVL3.5) and its settings
    (B = 8 prompts x G = 8 rollouts, 8 new tokens, micro_batch_seqs 64, kl_coef 0.3:
    a reference pass), on rollouts each model samples from the demo's synthetic task.
    Gemma-3 does not pack (its adapter declares ``packing = False``): its two rows show
    the fallback costs nothing.
(b) ``real lengths``: tiny Qwen2.5-VL, B = 4 x G = 8 completions that are real model
    replies: the 135 Bard replies on MathVista testmini and the 6 MathVerse template
    replies recorded in ``eval/grader_sets/foreign_replies_real.py``, tokenized by the
    agent's tokenizer (the tiny model's small BPE: about 1.7x the tokens a full Qwen
    tokenizer gives), the stop token appended; G replies drawn per prompt with
    replacement under a fixed seed. The source, the pool's size and its min / median / max
    length are printed. micro_batch_seqs 8, kl_coef 0 (no reference pass), one PPO epoch.
    Also a third row, packed with ``grpo.micro_batch_tokens`` (balanced token-budget
    micro-batches). The Bard replies were chosen among MathVista's shorter ones, so the
    pool's tail is shorter than a reasoning model's.
(b2) ``log-normal lengths`` (``--lognormal``, synthetic, off by default): (b) with
    lengths from a log-normal (median 120, log-sd 1) clipped to 10..1500 tokens and random
    token ids (the update's cost does not depend on which tokens they are).
(b3) ``real lengths, all Bard replies`` (``--all-bard``, off by default): (b) drawn from all
    1000 of Bard's MathVista testmini replies (``mathvista_testmini_output_bard.json`` in
    the shared benchmark data, ``$VLCOHORT_BENCHMARK_DATA``; not in the repository), whose
    tail the repository's shorter selection cuts.
(c) ``shared vision``: tiny Qwen2.5-VL, B = 1 prompt with one ``--image-size`` px image
    (448: 256 image tokens, 1024 vision-tower patches; ``max_pixels`` raised to fit)
    and G = 8 rollouts sharing it (real-length completions as in (b)), one micro-batch,
    both rows with ``grpo.packing=true`` (the same rows, packed or not by the 10% rule):
    the vision tower once per distinct image (``Adapter.share_images``, the default)
    against once per rollout. The bench turns sharing off on the adapter
    instance (``vision_per_distinct_image = False``); the library has no switch for it.
    Then the same for tiny Qwen3-VL (16 px patches: 784 patches, DeepStack features
    shared too) and tiny InternVL3.5 (56 px tiles, ``max_tiles`` 36: a 448 px image is
    6 x 6 tiles and a thumbnail, 592 patches, 148 image tokens; at the checkpoint's 12 the
    tiny tower is too small to time); not in ``--quick``.

The last lines are ``max_logprob_diff=<x>`` (over every setup),
``update_time_ratio_packed_vs_padded=<x>``: (b)'s packed median update time over its padded
one (target <= 0.7; below 1 packing is faster), and
``update_time_ratio_shared_vs_per_row_vision=<x>``: (c)'s shared-vision median over its
per-row one (Qwen2.5-VL; ``..._qwen3_vl`` and ``..._internvl3_5`` the other families');
with ``--all-bard`` also ``update_time_ratio_packed_vs_padded_all_bard=<x>``
((b3)'s). Timings on a shared CPU are noisy (+-15-30% run to run): compare ratios from
one run, not times across runs. ``--quick`` is a smoke run (the test's): (b), (b2) and
(c) shrunk, one repeat. A benchmark prints ratios; it is not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

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
                    help="a smoke run, 1 repeat: (b) with 8 replies of at most 300 tokens, (b2) with 8 "
                         "lengths of at most 200, (c) with a 112 px image and G = 4")
    ap.add_argument("--skip-demo", action="store_true", help="skip (a)")
    ap.add_argument("--lognormal", action="store_true",
                    help="also (b2): synthetic log-normal completion lengths")
    ap.add_argument("--all-bard", action="store_true",
                    help="also (b3): real lengths from all 1000 Bard MathVista replies (shared benchmark data)")
    ap.add_argument("--image-size", type=int, default=448, help="(c)'s image side in pixels")
    return ap.parse_args(argv)


def long_tail_lengths(n: int, seed: int, lo: int = 10, hi: int = 1500, median: float = 120.0,
                      sigma: float = 1.0) -> list[int]:
    """``n`` completion lengths from a log-normal distribution (median ``median``, log-sd
    ``sigma``: a few completions ~10x the median, as reasoning rollouts have), clipped to
    [lo, hi]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.exp(torch.randn(n, generator=g) * sigma + float(torch.log(torch.tensor(median))))
    return [int(v) for v in x.round().clamp(lo, hi)]


BARD_FILE = "mathvista_testmini_output_bard.json"


def real_replies(all_bard: bool = False) -> tuple[list[str], str]:
    """The recorded real model replies in the repository, and where they come from.
    ``all_bard``: instead all 1000 of Bard's MathVista testmini replies, from the shared
    benchmark data (``$VLCOHORT_BENCHMARK_DATA``, else ``shared/data/benchmarks`` beside
    the checkout), of which the repository keeps 135 of the shorter ones."""
    if all_bard:
        import json
        import os

        data = Path(os.environ.get("VLCOHORT_BENCHMARK_DATA") or ROOT.parent / "shared" / "data" / "benchmarks")
        if not (data / BARD_FILE).is_file():
            sys.exit(f"bench/packing.py --all-bard: {data / BARD_FILE} not found; set VLCOHORT_BENCHMARK_DATA "
                     "to the shared benchmarks folder")
        rows = json.loads((data / BARD_FILE).read_text()).values()
        texts = [r["response"] for r in rows if r.get("response")]
        return texts, f"{data / BARD_FILE}: {len(texts)} Bard replies on MathVista testmini (all)"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from eval.grader_sets.foreign_replies_real import BARD_MATHVISTA, MATHVERSE_TEMPLATE

    texts = [r["reply"] for r in BARD_MATHVISTA] + [r["reply"] for r in MATHVERSE_TEMPLATE]
    source = (f"eval/grader_sets/foreign_replies_real.py: {len(BARD_MATHVISTA)} Bard replies on "
              f"MathVista testmini + {len(MATHVERSE_TEMPLATE)} MathVerse template replies")
    return texts, source


def real_completions(tokenizer, stop: str, cap: int = 0, all_bard: bool = False) -> list[list[int]]:
    """Each real reply's token ids under ``tokenizer``, ``stop`` appended (a finished
    rollout ends with its stop token); ``cap`` > 0 keeps those of at most ``cap`` tokens."""
    end = tokenizer.convert_tokens_to_ids(stop)
    pool = [tokenizer(t, add_special_tokens=False)["input_ids"] + [end] for t in real_replies(all_bard)[0]]
    return [c for c in pool if not cap or len(c) <= cap]


def draw_groups(pool: list[list[int]], B: int, G: int, seed: int) -> list[list[int]]:
    """B x G completions (prompt-major) drawn from ``pool`` with replacement, seeded."""
    g = torch.Generator().manual_seed(seed)
    return [pool[int(i)] for i in torch.randint(len(pool), (B * G,), generator=g)]


def length_summary(lengths: list[int]) -> str:
    return (f"{len(lengths)} lengths, min {min(lengths)} / median {statistics.median(lengths):g} / "
            f"max {max(lengths)} tokens")


def padding_share(mbs, lengths: list[int]) -> float:
    """Share of padding among the token positions the micro-batches' forwards see
    (``lengths``: each rollout row's real prompt + completion tokens)."""
    from vlcohort.training.update import row_indices

    real = sum(lengths[n] for rows, _ in mbs for n in row_indices(rows))
    seen = sum(tb.inputs["input_ids"].numel() for _, tb in mbs)
    return 1.0 - real / max(1, seen)


class Mode(NamedTuple):
    """One way of training on a setup's rollouts: its grpo settings and whether the
    adapter runs the vision tower once per distinct image (None: the family's default)."""

    grpo: Any
    share_images: bool | None = None


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

    def grpo(self, share_images: bool | None = None, **changes) -> Mode:
        """A mode: the run's ``grpo`` settings with ``changes``; shared-prefix updates off
        unless asked (this bench measures packing; ``bench/shared_prefix.py`` measures them)."""
        from dataclasses import replace

        changes.setdefault("shared_prefix", False)
        return Mode(replace(self.cfg.grpo, **changes), share_images)

    def use(self, mode: Mode):
        """Set the adapter's vision sharing as ``mode`` asks; returns its grpo settings."""
        adapter = self.agent.adapter
        if mode.share_images is None:
            adapter.__dict__.pop("vision_per_distinct_image", None)  # the family's default
        else:
            adapter.vision_per_distinct_image = mode.share_images
        return mode.grpo

    def update_time(self, mode: Mode) -> float:
        from vlcohort.training.update import update_agent

        g = self.use(mode)
        self.reset()
        sync()
        t0 = time.perf_counter()
        update_agent(self.agent, self.rendered, self.rollouts, self.adv, g,
                     self.cfg.rollout.temperature, self.cfg.rollout.max_new_tokens)
        sync()
        return time.perf_counter() - t0

    def logprobs(self, mode: Mode) -> tuple[torch.Tensor, torch.Tensor, float, str, str]:
        """([N, T] log-probs, [N, T] completion mask, padding share, "packed micro-batches /
        micro-batches", "micro-batches with one tower pass per distinct image / micro-batches")
        at the start weights."""
        from vlcohort.training.update import (
            completion_mask,
            policy_logprobs,
            row_tokens,
            update_micro_batches,
        )

        g = self.use(mode)
        self.reset()
        device = next(self.agent.model.parameters()).device
        mbs = update_micro_batches(self.agent, self.rendered, self.rollouts, g, device)
        T = self.rollouts.logprobs.shape[1]
        N = len(self.rollouts.completions)
        with torch.no_grad():
            lp = policy_logprobs(self.agent, mbs, T, self.cfg.rollout.temperature)
        lengths = row_tokens(self.agent, self.rendered, self.rollouts)
        packed = f"{sum(tb.packed for _, tb in mbs)}/{len(mbs)}"
        shared = f"{sum('image_copies' in tb.inputs for _, tb in mbs)}/{len(mbs)}"
        return (lp.cpu(), completion_mask(mbs, N, T, device).cpu(), padding_share(mbs, lengths), packed,
                shared)


#: (c)'s families (tiny checkpoints) and their agent settings, ``{pixels}`` the image's
#: area: Qwen2.5-VL first (the headline ratio), then every other family whose adapter
#: shares the vision pass.
VISION_SETUPS = (
    ("qwen2_5_vl", "max_pixels: {pixels}"),
    ("qwen3_vl", "max_pixels: {pixels}"),
    ("internvl3_5", "max_tiles: 36"),
)


def vision_input_summary(adapter, prompt: dict) -> str:
    """What the vision tower gets for one prompt, in the family's units."""
    if "image_grid_thw" in prompt:
        patches = int(prompt["image_grid_thw"].prod(-1).sum())
        return f"{patches} vision-tower patches, {patches // 4} image tokens"
    tiles = adapter.image_tiles(prompt["input_ids"])
    return f"{sum(tiles)} tiles of {adapter.processor.image_seq_length} image tokens"


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


def random_ids(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    """Completions of the given lengths with random token ids in [10, ``vocab``)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, vocab, (n,), generator=g).tolist() for n in lengths]


def given(comps: list[list[int]], G: int):
    """Rollouts with these completions (prompt-major, G per prompt), all finished."""
    from vlcohort.rollout.base import Rollouts

    def make(setup: Setup):
        lengths = [len(c) for c in comps]
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
        lp, mask, share, packed, shared = setup.logprobs(g)
        out[name].update(lp=lp, mask=mask, share=share, packed=packed, shared=shared)
    for name, g in modes.items():  # warm-up, untimed
        setup.update_time(g)
    for _ in range(repeats):
        for name, g in modes.items():
            out[name]["times"].append(setup.update_time(g))
    for name in modes:
        out[name]["median"] = statistics.median(out[name]["times"])
    return out


def logprob_gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Largest |a - b| over the real completion tokens (``mask``): equal values count 0
    (-inf against -inf too), a token finite in one and not in the other counts inf."""
    gap = torch.where(a == b, torch.zeros_like(a), (a - b).abs())
    inf = float("inf")
    gap = torch.nan_to_num(gap, nan=inf, posinf=inf) * mask  # inf x 0 (padding) is nan
    return float(torch.nan_to_num(gap, nan=0.0, posinf=inf).max())


def report(setup: Setup, res: dict) -> float:
    """Print one setup's table; returns its max log-prob difference from the first mode."""
    N = len(setup.rollouts.completions)
    lens = [len(c) for c in setup.rollouts.completions]
    print(f"\n({setup.name}) {setup.path} ({setup.agent.adapter.family}): N={N} sequences, completion lengths "
          f"{min(lens)}..{max(lens)} (mean {sum(lens) / N:.0f}), packs: "
          f"{setup.agent.adapter.can_pack(setup.agent.model)}")
    first = next(iter(res))
    base = res[first]
    print(f"  {'mode':<30} {'packed mbs':>10} {'1 pass/img':>10} {'padding share':>13} {'update s':>9} "
          f"{'vs first':>8} {'max |dlogp|':>11}")
    worst = 0.0
    for name, r in res.items():
        diff = logprob_gap(r["lp"], base["lp"], base["mask"])
        worst = max(worst, diff)
        print(f"  {name:<30} {r['packed']:>10} {r['shared']:>10} {r['share']:>13.3f} {r['median']:>9.3f} "
              f"{r['median'] / base['median']:>8.3f} {diff:>11.2e}")
    print(f"  (medians of {len(base['times'])} interleaved updates per mode; 'vs first': over the "
          f"{first!r} row; max |dlogp|: log-probs against it)")
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
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path

    spec = "tiny:qwen2_5_vl"
    adapter = adapter_for(tiny_model_path(spec))
    pool = real_completions(adapter.tokenizer, adapter.stop_tokens[0], cap=300 if args.quick else 0)
    pool_lengths = [len(c) for c in pool]
    print(f"\nreal completions: {real_replies()[1]}, {spec} tokenizer + stop token: "
          f"{length_summary(pool_lengths)}")

    def overrides(B: int, G: int, comps: list, agent: str = f"{{name: A, path: '{spec}'}}") -> list[str]:
        return ["method=gt_reward", f"agents=[{agent}]", f"rollout.prompts_per_step={B}",
                f"rollout.rollouts_per_prompt={G}", f"rollout.max_new_tokens={max(map(len, comps))}",
                "grpo.micro_batch_seqs=8", "grpo.kl_coef=0", "optim.warmup_ratio=0", "optim.schedule=constant"]

    def packed_vs_padded(name: str, comps: list, B: int, G: int) -> dict:
        problems = make_dataset(("shape_colour", "count_shapes"), n=B, seed=args.seed)
        s = Setup(name, None, overrides(B, G, comps), 0, problems, given(comps, G), args.device)
        lengths = [len(c) for c in comps]
        print(f"\n({name}) drawn: {length_summary(lengths)}")
        budget = 8 * int(statistics.mean(lengths) + 100)  # ~ micro_batch_seqs sequences of mean length
        res = measure(s, {"padded": s.grpo(packing=False), "packed": s.grpo(packing=True),
                          f"packed, {budget} tokens": s.grpo(packing=True, micro_batch_tokens=budget)},
                      repeats)
        nonlocal worst
        worst = max(worst, report(s, res))
        return res

    B, G = (2, 4) if args.quick else (4, 8)
    res_b = packed_vs_padded("b: real lengths", draw_groups(pool, B, G, args.seed), B, G)
    if args.lognormal or args.quick:
        vocab = len(adapter.tokenizer) - 20  # below the specials
        lengths = long_tail_lengths(B * G, args.seed, hi=200 if args.quick else 1500)
        packed_vs_padded("b2: log-normal lengths (synthetic)", random_ids(lengths, vocab, args.seed), B, G)
    if args.all_bard:
        pool_all = real_completions(adapter.tokenizer, adapter.stop_tokens[0], all_bard=True)
        print(f"\nreal completions (b3): {real_replies(True)[1]}, {spec} tokenizer + stop token: "
              f"{length_summary([len(c) for c in pool_all])}")
        res_b3 = packed_vs_padded("b3: real lengths, all Bard replies", draw_groups(pool_all, B, G, args.seed), B, G)

    # (c) one large image, G rollouts sharing it: one vision-tower pass against G
    size, Gc = (112, 4) if args.quick else (args.image_size, 8)
    problems = make_dataset(("shape_colour",), n=1, seed=args.seed, image_size=size)
    shared_ratios = {}
    for family, extra in VISION_SETUPS[: 1 if args.quick else None]:
        fspec = f"tiny:{family}"
        own = adapter_for(tiny_model_path(fspec))  # the replies in the family's own tokens
        comps = draw_groups(real_completions(own.tokenizer, own.stop_tokens[0], cap=300 if args.quick else 0),
                            1, Gc, args.seed + 1)
        extra = extra.format(pixels=size * size)
        agent = f"{{name: A, path: '{fspec}'{', ' + extra if extra else ''}}}"
        name = "c: shared vision" if family == "qwen2_5_vl" else f"c: shared vision, {family}"
        s = Setup(name, None, overrides(1, Gc, comps, agent), 0, problems, given(comps, Gc), args.device)
        prompt = s.agent.adapter.encode_prompts([s.rendered[0]]).inputs
        print(f"\n({name}) one {size} x {size} px image: {vision_input_summary(s.agent.adapter, prompt)} "
              f"per sequence; G = {Gc} rollouts sharing it")
        res_c = measure(s, {"packed, vision per row": s.grpo(share_images=False, packing=True),
                            "packed, vision per image": s.grpo(share_images=True, packing=True)}, repeats)
        worst = max(worst, report(s, res_c))
        shared_ratios[family] = (res_c["packed, vision per image"]["median"]
                                 / res_c["packed, vision per row"]["median"])
        del s

    ratio = res_b["packed"]["median"] / res_b["padded"]["median"]
    shared = shared_ratios["qwen2_5_vl"]
    print("\nThe machine is shared and noisy: times are medians of interleaved repeats; compare ratios "
          "within one run.")
    print(f"max_logprob_diff={worst:.2e}")
    print(f"update_time_ratio_packed_vs_padded={ratio:.3f}")
    if args.all_bard:
        print(f"update_time_ratio_packed_vs_padded_all_bard="
              f"{res_b3['packed']['median'] / res_b3['padded']['median']:.3f}")
    print(f"update_time_ratio_shared_vs_per_row_vision={shared:.3f}")
    for family, r in shared_ratios.items():
        if family != "qwen2_5_vl":
            print(f"update_time_ratio_shared_vs_per_row_vision_{family}={r:.3f}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
