"""Benchmark: one vlcohort training step against TRL's ``GRPOTrainer`` on the same work.

Run from the project root (offline; a few minutes on 2 CPU cores)::

    python bench/step.py [--steps 8] [--warmup 2] [--threads 0] [--sequential] [--profile]

What it measures
----------------
The wall time of one GRPO step, on CPU in fp32, for:

- **vlcohort**: ``vlcohort.train.train_step`` (render B prompts, generate G completions
  each, extract answers, vote, reward, advantages, one GRPO update with the token-level
  IS correction), as ``vlcohort train`` runs it; timings from the step's own record
  (``timing/rollout``, ``timing/grading``, ``timing/update``, ``timing/step``).
- **the peer, TRL 1.x ``GRPOTrainer``** (``pip install trl``; not a vlcohort dependency),
  configured like for like: ``use_cpu=True``, ``bf16=False``, no gradient checkpointing,
  ``beta=0``, no vLLM, ``num_generations=G``, ``per_device_train_batch_size=B*G`` (one
  generation and one optimizer step per step), ``max_completion_length=32``, the same
  learning rate and Adam betas, sdpa attention, no logging. Its dataset is the same
  synthetic problems in TRL's conversational multimodal form (a ``prompt`` column of
  system + user messages, an ``image`` column), rendered to the very prompt text vlcohort
  renders (checked at start-up), and its reward function is vlcohort's self-vote (TTRL)
  reward: the same extraction, vote and grader, applied per group of G rows.

The setup is the issue's: one agent, the tiny Qwen2.5-VL (``tiny:qwen2_5_vl``), self-vote,
B=4 prompts x G=4 rollouts x 32 new tokens, no KL, multiple-choice synthetic problems
(56 px images, the gold a letter), ``reward.answer_style=last_letter`` so that a random
tiny model gets rewards and real updates happen.

By default the two trainers run **interleaved** in one process: TRL's trainer drives the
loop and, after each of its steps (timed from the end of the previous interval to
``on_step_end``, so its data loading counts, as vlcohort's does), a callback runs one
vlcohort step. Load from other processes then hits both sides alike. ``--sequential`` runs
all vlcohort steps first, then all TRL steps.

How to read the output
----------------------
One line per step with both sides' times, then per side the median over the measured
steps (steps ``warmup+1 .. N``, by default 3-8 as in FINDINGS.md). vlcohort skips the
update of a step where every group's rewards are equal (nothing to learn), while TRL runs
its forward/backward/optimizer step regardless, so the summary also gives the median over
the measured steps where vlcohort did update, and the ratio on those (the fair one when
they differ). ``outside_model_share`` is vlcohort's ``timing/grading / timing/step``
(extract + grade + vote + reward + advantage; target < 5%). The last line is
``step_time_ratio_vs_trl=<x>``: vlcohort's median step time over TRL's, on the steps where
vlcohort updated (target <= 1.0; below 1 vlcohort is faster). Timings on a shared CPU are
noisy (+-15-30% run to run): compare ratios from one run, not times across runs.
A benchmark prints ratios against a peer; it is not a timed test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_k, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SPEC = "tiny:qwen2_5_vl"
B, G, NEW_TOKENS = 4, 4, 32
# Multiple-choice families only: every gold is a letter and every answer a letter vote.
TASKS = ["shape_colour", "compare_bars", "shape_kind"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8, help="steps per side (default 8)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="first steps left out of the medians (default 2: medians of steps 3..N)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sequential", action="store_true",
                    help="all vlcohort steps, then all TRL steps (default: interleaved)")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of vlcohort's measured steps (slows them)")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        ap.error(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    return args


# ============================================================================ vlcohort


def vlcohort_run(out_dir: str, seed: int, steps: int):
    from vlcohort.config import load_config
    from vlcohort.train import setup

    overrides = [
        "method=ttrl",
        f"agents=[{{name: A, path: '{SPEC}'}}]",
        f"rollout.prompts_per_step={B}",
        f"rollout.rollouts_per_prompt={G}",
        f"rollout.max_new_tokens={NEW_TOKENS}",
        f"grpo.micro_batch_seqs={B * G}",
        f"data.tasks=[{', '.join(TASKS)}]",
        "log.plot=false", "log.tensorboard=false", "log.progress=false",
        "checkpoint.at_end=false", "checkpoint.every=0",
        f"run.output_dir={out_dir}",
        f"run.seed={seed}",
        f"run.steps={steps}",
        "reward.answer_style=last_letter",
    ]
    cfg = load_config(None, overrides)
    return setup(cfg)


class VlcohortSide:
    """Runs and records vlcohort steps."""

    def __init__(self, run, profiler=None):
        self.run = run
        self.records: list[dict] = []
        self.walls: list[float] = []
        self.profiler = profiler
        self.warmup = 0

    def step(self) -> None:
        from vlcohort.train import train_step

        k = len(self.records) + 1
        prof = self.profiler if (self.profiler is not None and k > self.warmup) else None
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        record = train_step(self.run, k)
        if prof is not None:
            prof.disable()
        self.walls.append(time.perf_counter() - t0)
        self.run.logger.log(record)
        self.run.step = k
        self.records.append(record)

    def updated(self, i: int) -> bool:
        return "agent/A/loss" in self.records[i]


# ============================================================================ TRL


def trl_dataset(run):
    """The run's problems in TRL's conversational multimodal form, plus a by-id index.

    The user text is vlcohort's own rendering of the question (options listed, the answer
    instruction appended); TRL puts the image before it, as vlcohort does for questions
    without placeholders.
    """
    from datasets import Dataset

    cfg, adapter = run.cfg, run.agents[0].adapter
    rows = {"prompt": [], "image": [], "problem_id": []}
    for p in run.stream.problems:
        msgs = adapter.messages(p, cfg.prompt.system_prompt, cfg.prompt.instruction)
        convo = []
        for m in msgs:
            texts = [c["text"] for c in m["content"] if c["type"] == "text"]
            n_img = sum(c["type"] == "image" for c in m["content"])
            assert len(texts) == 1 and (n_img == 0 or m["content"][0]["type"] == "image"), m
            convo.append({"role": m["role"], "content": texts[0]})
        assert len(p.images) == 1, p.id
        rows["prompt"].append(convo)
        rows["image"].append(p.images[0])
        rows["problem_id"].append(p.id)
    return Dataset.from_dict(rows), {p.id: p for p in run.stream.problems}


def check_same_prompt(run, dataset, processor) -> None:
    """TRL's rendering of row 0 must be vlcohort's rendered prompt text, token for token."""
    from trl.data_utils import prepare_multimodal_messages

    cfg, adapter = run.cfg, run.agents[0].adapter
    row = dataset[0]
    msgs = prepare_multimodal_messages(row["prompt"], images=[row["image"]])
    trl_text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ours = adapter.render(run.stream.problems[0], cfg.prompt.system_prompt,
                          cfg.prompt.instruction).text
    if trl_text != ours:
        sys.exit("bench/step.py: TRL renders another prompt than vlcohort:\n"
                 f"--- TRL\n{trl_text}\n--- vlcohort\n{ours}")


class SelfVoteReward:
    """vlcohort's self-vote (TTRL) reward as a TRL reward function.

    TRL's sampler repeats each prompt G times in a row, so rows b*G .. b*G+G-1 are one
    group (checked by problem id). Per group: extract answers, vote, grade against the
    vote, exactly as ``vlcohort.train.train_step`` does (``vlcohort.rewards``).
    """

    __name__ = "self_vote"

    def __init__(self, run, problems_by_id):
        self.cfg, self.grader, self.by_id = run.cfg, run.grader, problems_by_id
        self.calls: list[dict] = []

    def __call__(self, prompts, completions, completion_ids, problem_id, **_):
        from vlcohort.rewards import extract_all, score, vote_all

        t0 = time.perf_counter()
        r = self.cfg.reward
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        n = len(texts)
        assert n % G == 0, n
        groups = [problem_id[b * G:(b + 1) * G] for b in range(n // G)]
        assert all(len(set(g)) == 1 for g in groups), f"rows are not grouped by prompt: {problem_id}"
        problems = [self.by_id[g[0]] for g in groups]
        by_prompt = [texts[b * G:(b + 1) * G] for b in range(n // G)]  # [B][G]
        answers = extract_all(by_prompt, r.answer_style)
        votes = vote_all(answers, problems, r.tie, r.min_share, self.grader)
        sc = score(answers, [v.label for v in votes], problems, self.grader, r.format_weight)
        rewards = sc.rewards  # [B, G]
        flat_groups = bool((rewards.std(dim=1, unbiased=False) == 0).all())
        self.calls.append({"seconds": time.perf_counter() - t0,
                           "all_groups_flat": flat_groups,
                           "completion_len": sum(len(c) for c in completion_ids) / n})
        return rewards.reshape(-1).tolist()


def trl_trainer(run, path: str, out_dir: str, steps: int, reward_fn, callbacks):
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
    from trl import GRPOConfig, GRPOTrainer

    cfg, mc = run.cfg, run.agents[0]
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        path, dtype=torch.float32, attn_implementation=cfg.agents[0].attn_implementation)
    processor = AutoProcessor.from_pretrained(path)
    dataset, by_id = trl_dataset(run)
    check_same_prompt(run, dataset, processor)
    reward_fn.by_id = by_id
    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False,
        beta=0.0,
        num_generations=G,
        per_device_train_batch_size=B * G,  # B prompts x G generations
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=NEW_TOKENS,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        use_vllm=False,
        learning_rate=cfg.optim.lr,
        adam_beta1=cfg.optim.betas[0], adam_beta2=cfg.optim.betas[1],
        weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.grpo.max_grad_norm,
        epsilon=cfg.grpo.clip_low, epsilon_high=cfg.grpo.clip_high,
        max_steps=steps,
        seed=cfg.run.seed,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args,
                              train_dataset=dataset, processing_class=processor,
                              callbacks=callbacks)
    return trainer


def make_pace(trl_times: list, between=None):
    """A callback timing each TRL step and running ``between()`` after it, untimed."""
    from transformers import TrainerCallback

    class Pace(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.mark = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            trl_times.append(time.perf_counter() - self.mark)
            if between is not None:
                between()
            self.mark = time.perf_counter()

    return Pace()


# ============================================================================ report


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import trl
    except ImportError:
        sys.exit("bench/step.py needs TRL as the peer: pip install trl (check first with "
                 "`pip install --dry-run trl` that it leaves torch alone)")
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    from processors.tiny import tiny_model_path

    path = str(tiny_model_path(SPEC))
    N, W = args.steps, args.warmup
    tmp = tempfile.TemporaryDirectory(prefix="bench-step-")
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    vl = VlcohortSide(vlcohort_run(os.path.join(tmp.name, "vlcohort"), args.seed, N), profiler)
    vl.warmup = W
    reward_fn = SelfVoteReward(vl.run, {})
    trl_times: list[float] = []
    if args.sequential:
        for _ in range(N):
            vl.step()
        callbacks = [make_pace(trl_times)]
    else:
        callbacks = [make_pace(trl_times, between=vl.step)]
    trainer = trl_trainer(vl.run, path, os.path.join(tmp.name, "trl"), N, reward_fn, callbacks)
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    vl.run.logger.close()

    print(f"bench/step.py: one agent {SPEC}, self-vote, B={B} x G={G} x {NEW_TOKENS} new tokens, "
          f"fp32, CPU ({torch.get_num_threads()} threads), beta=0; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, trl {trl.__version__}; "
          f"{'sequential' if args.sequential else 'interleaved'}; {total:.1f} s for "
          f"{'TRL' if args.sequential else 'both'}")
    print()
    print("step  vlcohort_s  rollout  grading   update  updated  len  |  trl_s  reward_fn_s  "
          "all_flat  len")
    for i in range(N):
        r = vl.records[i]
        c = reward_fn.calls[i] if i < len(reward_fn.calls) else {}
        mark = " " if i >= W else "*"
        print(f"{i + 1:>3}{mark}  {r['timing/step']:>9.3f}  {r['timing/rollout']:>7.3f}  "
              f"{r['timing/grading']:>7.4f}  {r['timing/update']:>7.3f}  "
              f"{'yes' if vl.updated(i) else 'no':>7}  {r['agent/A/completion_len']:>4.1f}  |  "
              f"{trl_times[i]:>5.3f}  {c.get('seconds', float('nan')):>11.4f}  "
              f"{'yes' if c.get('all_groups_flat') else 'no':>8}  {c.get('completion_len', float('nan')):>4.1f}")
    print(f"(* warm-up, left out of the medians)")

    idx = list(range(W, N))
    upd = [i for i in idx if vl.updated(i)]
    vl_steps = [vl.records[i]["timing/step"] for i in idx]
    vl_upd = [vl.records[i]["timing/step"] for i in upd]
    trl_med = med([trl_times[i] for i in idx])
    grading = sum(vl.records[i]["timing/grading"] for i in idx)
    share = grading / sum(vl_steps)
    phases = {k: med([vl.records[i][f"timing/{k}"] for i in idx])
              for k in ("rollout", "grading", "update")}
    upd_phases = {k: med([vl.records[i][f"timing/{k}"] for i in upd]) for k in ("rollout", "update")}
    trl_flat = sum(bool(reward_fn.calls[i]["all_groups_flat"]) for i in idx)
    print()
    print(f"measured steps {W + 1}-{N} ({len(idx)}):")
    print(f"  vlcohort median step      {med(vl_steps):.3f} s  (rollout {phases['rollout']:.3f}, "
          f"grading {phases['grading']:.4f}, update {phases['update']:.3f})")
    print(f"  vlcohort updated on       {len(upd)} of {len(idx)} steps; median over those "
          f"{med(vl_upd):.3f} s (rollout {upd_phases['rollout']:.3f}, update {upd_phases['update']:.3f})")
    print(f"  TRL median step           {trl_med:.3f} s  (updates on all {len(idx)} steps; "
          f"{trl_flat} of them had every group's rewards equal, a zero-gradient update)")
    print(f"  TRL reward function       median {med([reward_fn.calls[i]['seconds'] for i in idx]) * 1e3:.2f} ms")
    print(f"  completion length (mean)  vlcohort {statistics.mean(vl.records[i]['agent/A/completion_len'] for i in idx):.1f}, "
          f"TRL {statistics.mean(reward_fn.calls[i]['completion_len'] for i in idx):.1f} tokens")
    print(f"  outside_model_share={share:.4f}  (timing/grading / timing/step summed over the "
          f"measured steps; target < 0.05)")
    print(f"  ratio over all measured steps {med(vl_steps) / trl_med:.3f}")
    if profiler is not None:
        import pstats

        print("\ncProfile of vlcohort's measured steps (cumulative, top 30):")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    ratio = (med(vl_upd) if vl_upd else med(vl_steps)) / trl_med
    tmp.cleanup()
    print(f"step_time_ratio_vs_trl={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
