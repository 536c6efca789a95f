"""Benchmark: one vlcohort training step against TRL's ``GRPOTrainer`` on the same work.

Run from the project root (offline; well under a minute on 2 CPU cores)::

    python bench/step.py [--steps 20] [--warmup 2] [--threads 1] [--sequential] [--profile]

Needs the peer installed in the environment: ``pip install trl`` (not a vlcohort
dependency; check with ``pip install --dry-run trl`` first that it leaves torch alone).

What it measures
----------------
The wall time of one GRPO step, on CPU in fp32, for:

- **vlcohort**: ``vlcohort.recipes.step.train_step`` as ``vlcohort train`` runs it (render B
  prompts, generate G completions each, extract answers, vote, reward, advantages, one GRPO
  update with the token-level IS correction); times from the step's own record
  (``timing/rollout``, ``timing/grading``, ``timing/update``, ``timing/step``).
- **the peer, TRL 1.x ``GRPOTrainer``**, configured like for like: ``use_cpu=True``,
  ``bf16=False``, no gradient checkpointing, ``beta=0``, no vLLM, ``num_generations=G``,
  ``per_device_train_batch_size=B*G`` (one generation and one optimizer step per step),
  ``max_completion_length=32``, vlcohort's learning rate, Adam betas, schedule, clip
  ranges and grad-norm clip, sdpa attention, no logging. Its dataset is the same synthetic
  problems in TRL's conversational multimodal form (a ``prompt`` column of system + user
  messages, an ``image`` column), which TRL renders to exactly vlcohort's prompt text
  (checked at start-up), and its reward function is vlcohort's self-vote (TTRL) reward:
  the same extraction, vote and grader, applied per group of G rows.

The setup is the issue's: one agent, the tiny Qwen2.5-VL (``tiny:qwen2_5_vl``), self-vote,
B=4 prompts x G=4 rollouts x 32 new tokens, no KL, multiple-choice synthetic problems
(56 px images, the gold a letter), ``reward.answer_style=last_letter`` so that a random
tiny model gets rewards and real updates happen.

By default the two trainers run **interleaved** in one process: TRL's trainer drives the
loop and, after each of its steps (timed from the end of the previous one to
``on_step_end``, so its data loading counts, as vlcohort's does), a callback runs one
vlcohort step. Load from other processes then hits both sides alike. ``--sequential`` runs
all vlcohort steps first, then all TRL steps.

Both sides run with **one torch thread** by default (``--threads 0``: torch's default).
The tiny model gains nothing from intra-op threads, and on a shared 2-vCPU machine a
descheduled OpenMP worker stalls every op: with 2 threads and other processes running,
both sides' steps took 1-3 s instead of ~0.2 s and varied several-fold step to step.

What is not the same work (the ratio carries it)
------------------------------------------------
- vlcohort computes the IS correction between sampler and policy: one more no-grad forward
  over the batch per update (old log-probs). TRL's transformers-generate path has no
  sampling log-probs and, on-policy, skips that pass.
- vlcohort skips the update of a step where every group's rewards are equal (nothing to
  learn); TRL runs its forward/backward/optimizer step regardless. Hence the headline
  ratio uses vlcohort's median over the steps that updated.
- Stop tokens differ slightly (vlcohort: ``<|im_end|>`` and ``<|endoftext|>``; TRL: the
  model's eos ids) and the two samplers draw different problems and tokens, so completion
  lengths differ a little; the mean lengths are printed.

How to read the output
----------------------
One line per step with both sides' times (``*``: warm-up, left out), then per side the
medians over steps ``warmup+1 .. N`` (by default 3-20; ``--steps 8`` gives the window
3-8, where vlcohort may update on only 4 steps): vlcohort over all
steps and over the steps where it updated, TRL over all steps. ``outside_model_share`` is
vlcohort's ``timing/grading / timing/step`` (extract + grade + vote + reward + advantage;
target < 0.05). The last line is ``step_time_ratio_vs_trl=<x>``: vlcohort's median step
time over the steps where it updated, divided by TRL's median (target <= 1.0; below 1
vlcohort is faster). Timings on a shared CPU are noisy (+-15-30% run to run): compare
ratios from one run, not times across runs. ``--profile`` then runs as many more vlcohort
steps under cProfile (untimed) and prints where they spend their time. A benchmark prints
ratios against a peer; it is not a timed test.
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
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # deepspeed, if installed, stops guessing aloud
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - after the environment switches set above

SPEC = "tiny:qwen2_5_vl"
B, G, NEW_TOKENS = 4, 4, 32
# Multiple-choice families only: every gold is a letter and every answer a letter vote.
TASKS = ["shape_colour", "compare_bars", "shape_kind"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="steps per side (default 20)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="first steps left out of the medians (default 2: medians of steps 3..N)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads for both sides (default 1; 0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sequential", action="store_true",
                    help="all vlcohort steps, then all TRL steps (default: interleaved)")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed steps, profile as many more vlcohort steps (cProfile, "
                         "untimed) and print where their time goes")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        ap.error(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    return args


# ============================================================================ vlcohort


def vlcohort_run(out_dir: str, seed: int, steps: int, threads: int = 1):
    """The vlcohort side's run; ``threads`` goes to ``run.threads`` too, since the run's
    setup sets torch's thread count from it (0: torch's default) after ``--threads``."""
    from vlcohort.config import load_config
    from vlcohort.recipes.cohort import setup

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
        f"run.threads={threads}",
        "reward.answer_style=last_letter",
    ]
    cfg = load_config(None, overrides)
    return setup(cfg)


class VlcohortSide:
    """Runs and records vlcohort steps."""

    def __init__(self, run):
        self.run = run
        self.records: list[dict] = []

    def step(self) -> None:
        from vlcohort.recipes.step import train_step

        k = len(self.records) + 1
        record = train_step(self.run, k)
        self.run.logger.log(record)
        self.run.step = k
        self.records.append(record)

    def updated(self, i: int) -> bool:
        return "agent/A/loss" in self.records[i]


# ============================================================================ TRL


def trl_dataset(run):
    """The run's problems in TRL's conversational multimodal form.

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
    return Dataset.from_dict(rows)


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
    vote, exactly as ``vlcohort.recipes.step.train_step`` does (``vlcohort.training.rewards``).
    """

    __name__ = "self_vote"

    def __init__(self, run, group_size: int = G):
        self.cfg, self.grader, self.G = run.cfg, run.grader, group_size
        self.by_id = {p.id: p for p in run.stream.problems}
        self.calls: list[dict] = []

    def __call__(self, prompts, completions, completion_ids, problem_id, **_):
        from vlcohort.training.rewards import extract_all, score, vote_all

        t0 = time.perf_counter()
        r, G = self.cfg.reward, self.G
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        n = len(texts)
        assert n % G == 0, n
        groups = [problem_id[b * G:(b + 1) * G] for b in range(n // G)]
        assert all(len(set(g)) == 1 for g in groups), f"rows not grouped by prompt: {problem_id}"
        problems = [self.by_id[g[0]] for g in groups]
        by_prompt = [texts[b * G:(b + 1) * G] for b in range(n // G)]  # [B][G]
        answers = extract_all(by_prompt, r.answer_style)
        votes = vote_all(answers, problems, r.tie, r.min_share, self.grader, r.min_share_of)
        sc = score(answers, votes, problems, self.grader, r.format_weight)  # self vote: its classes
        rewards = sc.rewards  # [B, G]
        flat_groups = bool((rewards.std(dim=1, unbiased=False) == 0).all())
        self.calls.append({"seconds": time.perf_counter() - t0,
                           "all_groups_flat": flat_groups,
                           "completion_len": sum(len(c) for c in completion_ids) / n})
        return rewards.reshape(-1).tolist()


def grpo_args(cfg, out_dir: str, steps: int, prompts: int, group: int, new_tokens: int):
    """TRL's ``GRPOConfig`` doing vlcohort's step as ``cfg`` configures it, like for like
    (module docstring): CPU, fp32, no KL, no vLLM, ``prompts`` x ``group`` rows per step
    (one generation and one optimizer step), ``new_tokens`` new tokens, vlcohort's
    sampling, optimizer, schedule and clips, no logging."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir,
        use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False,
        beta=0.0,
        num_generations=group,
        per_device_train_batch_size=prompts * group,  # B prompts x G generations
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        use_vllm=False,
        learning_rate=cfg.optim.lr,
        adam_beta1=cfg.optim.betas[0], adam_beta2=cfg.optim.betas[1],
        weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.grpo.max_grad_norm,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": cfg.optim.min_lr_ratio},
        warmup_steps=cfg.optim.warmup_ratio,  # a float in [0, 1) is a ratio of max_steps
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


def trl_trainer(run, path: str, out_dir: str, steps: int, reward_fn, callbacks):
    from transformers import AutoProcessor, PrinterCallback, Qwen2_5_VLForConditionalGeneration
    from trl import GRPOTrainer

    cfg = run.cfg
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        path, dtype=torch.float32, attn_implementation=cfg.agents[0].attn_implementation)
    processor = AutoProcessor.from_pretrained(path)
    dataset = trl_dataset(run)
    check_same_prompt(run, dataset, processor)
    args = grpo_args(cfg, out_dir, steps, B, G, NEW_TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args,
                              train_dataset=dataset, processing_class=processor,
                              callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # it prints the end-of-training summary dict
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


def require_trl(script: str):
    """The peer's module, or exit saying how to install it."""
    try:
        import trl
    except ImportError:
        sys.exit(f"{script} needs TRL as the peer: pip install trl (check first with "
                 "`pip install --dry-run trl` that it leaves torch alone)")
    return trl


def drive(vl, trainer_for, steps: int, sequential: bool) -> tuple[list[float], float]:
    """Both sides' ``steps`` steps: interleaved (TRL's trainer drives; after each of its
    steps a callback runs ``vl.step()``, untimed for TRL) or sequential (vlcohort first).
    ``trainer_for(callbacks)`` builds TRL's trainer. Returns TRL's step times and the
    seconds ``trainer.train()`` took."""
    trl_times: list[float] = []
    if sequential:
        for _ in range(steps):
            vl.step()
        callbacks = [make_pace(trl_times)]
    else:
        callbacks = [make_pace(trl_times, between=vl.step)]
    trainer = trainer_for(callbacks)
    t0 = time.perf_counter()
    trainer.train()
    return trl_times, time.perf_counter() - t0


# ============================================================================ report


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(vl: VlcohortSide, trl_times: list[float], calls: list[dict], N: int, W: int) -> float:
    """Print the per-step table and the summary; return the headline ratio."""
    nan = float("nan")
    print("\nstep   vlcohort_s  rollout  grading   update  updated  len  |  trl_s  reward_fn_s"
          "  all_flat  len")
    for i in range(N):
        r, c = vl.records[i], calls[i] if i < len(calls) else {}
        print(f"{i + 1:>3}{' ' if i >= W else '*'}  {r['timing/step']:>10.3f}  "
              f"{r['timing/rollout']:>7.3f}  {r['timing/grading']:>7.4f}  "
              f"{r['timing/update']:>7.3f}  {'yes' if vl.updated(i) else 'no':>7}  "
              f"{r['agent/A/completion_len']:>4.1f}  |  {trl_times[i]:>5.3f}  "
              f"{c.get('seconds', nan):>11.4f}  {'yes' if c.get('all_groups_flat') else 'no':>8}"
              f"  {c.get('completion_len', nan):>4.1f}")
    print("(* warm-up, left out of the medians; all_flat: every group's rewards equal, so "
          "TRL's update had a zero gradient)")

    idx = list(range(W, N))
    upd = [i for i in idx if vl.updated(i)]

    def vl_med(key, rows):
        return med([vl.records[i][f"timing/{key}"] for i in rows])

    trl_med = med([trl_times[i] for i in idx])
    share = (sum(vl.records[i]["timing/grading"] for i in idx)
             / sum(vl.records[i]["timing/step"] for i in idx))
    trl_flat = sum(bool(calls[i]["all_groups_flat"]) for i in idx)
    vl_len = statistics.mean(vl.records[i]["agent/A/completion_len"] for i in idx)
    trl_len = statistics.mean(calls[i]["completion_len"] for i in idx)
    print(f"\nmeasured steps {W + 1}-{N} ({len(idx)} per side), medians:")
    print(f"  vlcohort, all steps       {vl_med('step', idx):.3f} s  (rollout "
          f"{vl_med('rollout', idx):.3f}, grading {vl_med('grading', idx):.4f}, update "
          f"{vl_med('update', idx):.3f})")
    print(f"  vlcohort, updating steps  {vl_med('step', upd):.3f} s  ({len(upd)} of {len(idx)}; "
          f"rollout {vl_med('rollout', upd):.3f}, update {vl_med('update', upd):.3f})")
    print(f"  TRL, all steps            {trl_med:.3f} s  (TRL updates on every step; "
          f"{trl_flat} of {len(idx)} had a zero gradient)")
    print(f"  TRL reward function       {med([calls[i]['seconds'] for i in idx]) * 1e3:.2f} ms")
    print(f"  completion length (mean)  vlcohort {vl_len:.1f}, TRL {trl_len:.1f} tokens")
    print(f"  ratio on all steps        {vl_med('step', idx) / trl_med:.3f}")
    print(f"outside_model_share={share:.4f}  (vlcohort timing/grading / timing/step over the "
          "measured steps: extract + grade + vote + reward + advantage; target < 0.05)")
    return (vl_med("step", upd) if upd else vl_med("step", idx)) / trl_med


def main(argv=None) -> int:
    args = parse_args(argv)
    trl = require_trl("bench/step.py")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    from vlcohort.processors.tiny import tiny_model_path

    path = str(tiny_model_path(SPEC))
    N, W = args.steps, args.warmup
    tmp = tempfile.TemporaryDirectory(prefix="bench-step-")
    vl = VlcohortSide(vlcohort_run(os.path.join(tmp.name, "vlcohort"), args.seed,
                                   2 * N - W if args.profile else N, args.threads))
    reward_fn = SelfVoteReward(vl.run)
    trl_times, total = drive(vl, lambda callbacks: trl_trainer(
        vl.run, path, os.path.join(tmp.name, "trl"), N, reward_fn, callbacks), N, args.sequential)
    profiler = None
    if args.profile:  # separate steps: the profiler's overhead must not touch the timed ones
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(N - W):
            vl.step()
        profiler.disable()
    vl.run.logger.close()

    print(f"bench/step.py: one agent {SPEC}, self-vote, B={B} x G={G} x {NEW_TOKENS} new "
          f"tokens, fp32, CPU, {torch.get_num_threads()} torch thread(s), beta=0; torch "
          f"{torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
          f"{'sequential' if args.sequential else 'interleaved'}; trainer.train() took "
          f"{total:.1f} s{'' if args.sequential else ' (both sides)'}")
    ratio = report(vl, trl_times, reward_fn.calls, N, W)
    if profiler is not None:
        import pstats

        print(f"\ncProfile of {N - W} more vlcohort steps, untimed (cumulative, top 30):")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    tmp.cleanup()
    print(f"step_time_ratio_vs_trl={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
