"""vLLM's engine on the two real pretrained checkpoints (``processors/gguf.py``):
SmolLM2-135M-Instruct (Llama architecture, its own chat template) and Gemma-3-270M (base,
``gemma3_text``, no chat template: the R1-Zero plain prompt format).

The tiny models of ``tests/test_rollout_vllm.py`` are random bodies with this project's
own tokenizers; these are the published weights and tokenizers, which is where a mismatch
between vLLM's implementation of a family and transformers' would show (Gemma-3's
soft-capping, scaled embeddings, sliding-window layers; a tokenizer's BOS handling).

Per model, on one fp32 engine (``@pytest.mark.vllm``, run by ``.ci/vllm-cpu``):

- the engine loads the converted checkpoint, with the default ``rollout.vllm.sleep_mode``
  (auto), and its prompt ids are the adapter's;
- its sampled tokens' log-probs equal the policy's (the core chunked pass) to fp32
  rounding;
- after one real update of the policy (the trainer's own ``update_agent``: GRPO loss,
  AdamW step) the engine, not yet pushed, still samples from the old weights, so its
  log-probs differ from the policy's; a push makes them equal again.

And ``vlcohort eval --engine vllm`` on a few GSM8K items (the published JSONL form) for
both, answering as ``--engine hf`` does. Gaps and timings are printed (``-s``).

The engine under test is kept small so that it starts in seconds on two cores: a short
context (``max_model_len``), a KV cache of a few MiB and eager mode (see ``ENGINE``). The
eval tests run the engine ``vlcohort eval`` builds itself (``eval/generation.py``: compiled,
the model's own context auto-fitted to a 1 GiB cache), which takes minutes to start on CPU.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.rollout.base import SamplingParams

pytestmark = [pytest.mark.vllm]

MODELS = {"smollm2": "gguf:smollm2-135m-instruct", "gemma3": "gguf:gemma3-270m"}

# vLLM settings of the engine under test. Eager: on CPU vLLM otherwise compiles the model
# with torch.compile (Inductor) and warms it up on a whole step's token budget (the
# model's context, as chunked prefill is off on CPU). Measured on two cores, SmolLM2:
# engine start 135 s compiled (8192-token context) vs 16 s eager (512), and 4 x 24 sampled
# tokens 25 s vs 1.2 s: compiling buys nothing at this size. A short context and a KV
# cache of a few MiB keep memory small (64 MiB hold 1408 SmolLM2 tokens in fp32).
ENGINE = ["rollout.engine=vllm", "rollout.vllm.dtype=float32", "rollout.vllm.enforce_eager=true",
          "rollout.vllm.max_model_len=512", "rollout.vllm.max_num_seqs=16",
          "rollout.vllm.kv_cache_memory_gib=0.0625"]

QUESTIONS = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many "
             "clips in May. How many clips did Natalia sell altogether in April and May?",
             "What is 17 + 25? Put the final answer in \\boxed{}.",
             "A train travels 60 km in one hour. How far does it travel in 3 hours?"]

# |engine - policy| log-prob of the sampled tokens, fp32 engine and policy: rounding only
# (different kernels sum in different orders); a missed or partial push shows as >= 1e-2.
SAME = (1e-4, 2e-3)  # (mean, max)
MOVED = 1e-3  # an update must move the mean gap at least this much (lr below)


def logprob_gap(engine_lp: torch.Tensor, policy_lp: torch.Tensor, completions) -> tuple[float, float]:
    """(mean, max) |engine - policy| over the completion tokens (all finite)."""
    mask = torch.zeros_like(engine_lp, dtype=torch.bool)
    for i, c in enumerate(completions):
        mask[i, : len(c)] = True
    diff = (engine_lp - policy_lp).abs()[mask]
    assert diff.numel() > 0 and torch.isfinite(diff).all()
    return float(diff.mean()), float(diff.max())


def policy_logprobs(agent, rendered, rollouts, temperature: float) -> torch.Tensor:
    """The policy's log-probs of the rollouts' tokens: the agent's own (chunked) pass."""
    G = rollouts.group_size
    adapter = agent.adapter
    batch = adapter.encode_training(adapter.encode_prompts([r for r in rendered for _ in range(G)]),
                                    rollouts.completions)
    with torch.no_grad():
        lp = agent.logprobs(batch, temperature).cpu()  # [N, T]
    return lp[:, : rollouts.logprobs.shape[1]]


@pytest.fixture(autouse=True)
def _engine_only_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("name", list(MODELS))
def test_engine_follows_a_real_policy_through_an_update_and_a_push(name, vllm_env, vllm_device):
    from vlcohort.rollout.engines import make_engine
    from vlcohort.rollout.vllm import build_requests
    from vlcohort.training.agent import build_agent
    from vlcohort.training.grpo import group_advantages
    from vlcohort.training.update import update_agent

    spec = MODELS[name]
    # the agent trains with the hf engine (its push is a no-op); the vLLM engine is built
    # beside it on the same policy, so the update and the push can be observed apart
    cfg = load_config(None, ["method=ttrl", f"agents=[{{name: A, path: '{spec}'}}]",
                             "grpo.kl_coef=0", "optim.lr=1e-5", "optim.warmup_ratio=0",
                             "run.steps=1", "run.seed=0", *ENGINE])
    assert cfg.rollout.vllm.sleep_mode == "auto"  # the default, on a platform without sleep
    cfg.rollout.engine = "hf"
    clock, seconds = time.perf_counter(), {}

    def lap(what: str) -> None:
        nonlocal clock
        seconds[what] = round(time.perf_counter() - clock, 1)
        clock = time.perf_counter()

    agent = build_agent(cfg.agents[0], cfg)
    agent.model.eval()
    lap("agent")
    engine = make_engine("vllm", agent.adapter, agent.model, vllm=cfg.rollout.vllm, seed=0)
    vllm_env.append(engine)
    lap("engine_start")
    assert engine.device == vllm_device and engine.sleep_mode is False

    rendered = [agent.adapter.render(Problem(id=f"q{i}", text=q)) for i, q in enumerate(QUESTIONS[:2])]
    # vLLM tokenizes the request itself: its prompt ids must be the adapter's (one BOS)
    from vllm import SamplingParams as VSamplingParams

    outs = engine.llm.generate(build_requests(agent.adapter, rendered),
                               VSamplingParams(max_tokens=1), use_tqdm=False)
    for r, o in zip(rendered, outs):
        assert list(o.prompt_token_ids) == \
            agent.adapter.encode_prompts([r]).inputs["input_ids"][0].tolist(), r.problem_id

    G, T = 4, 0.8
    sampling = SamplingParams(max_new_tokens=24, temperature=T)
    lap("prompt_ids")
    r1 = engine.generate(rendered, G, sampling, seed=5)
    lap("generate")
    assert len(r1.completions) == len(rendered) * G
    assert len({tuple(c) for c in r1.completions}) > len(rendered), "rollouts all alike"
    before = logprob_gap(r1.logprobs, policy_logprobs(agent, rendered, r1, T), r1.completions)
    lap("policy_logprobs")

    # one real update: rewards favour completions with more distinct tokens (any
    # reward that differs within a group gives advantages, hence a step)
    rewards = torch.tensor([[float(len(set(c))) for c in r1.completions[b * G:(b + 1) * G]]
                            for b in range(len(rendered))])
    advantages = group_advantages(rewards).reshape(-1)
    assert advantages.abs().sum() > 0, "weak test: no advantage, no update"
    params = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    metrics = update_agent(agent, rendered, r1, advantages, cfg.grpo, T,
                           length_norm=sampling.max_new_tokens)
    lap("update")
    assert metrics["skipped_updates"] == 0
    assert any(not torch.equal(params[n], p) for n, p in agent.model.named_parameters())
    agent.model.eval()

    # not pushed yet: the engine samples the same tokens with the same (old) log-probs,
    # which the updated policy no longer gives
    stale = engine.generate(rendered, G, sampling, seed=5)
    assert stale.completions == r1.completions
    assert torch.allclose(stale.logprobs, r1.logprobs, atol=1e-6)
    after_update = logprob_gap(stale.logprobs, policy_logprobs(agent, rendered, stale, T),
                               stale.completions)

    lap("stale_generate_and_logprobs")
    engine.update_weights(agent.model)
    lap("push")
    r2 = engine.generate(rendered, G, sampling, seed=5)
    after_push = logprob_gap(r2.logprobs, policy_logprobs(agent, rendered, r2, T), r2.completions)
    lap("generate_and_logprobs")
    print(json.dumps({"model": name, "seconds": seconds, "gap_before_update": before,
                      "gap_after_update_before_push": after_update, "gap_after_push": after_push}))
    assert before[0] < SAME[0] and before[1] < SAME[1], before
    assert after_update[0] > MOVED and after_update[0] > 20 * before[0], after_update
    assert after_push[0] < SAME[0] and after_push[1] < SAME[1], after_push


def test_sleep_mode_true_on_cpu_ends_the_run_in_one_line(tmp_path, vllm_env, vllm_device, capsys):
    """``rollout.vllm.sleep_mode=true`` where vLLM has no sleep mode: ``vlcohort train``
    prints one line naming the key and the fix and exits 1, before any engine is built."""
    from vlcohort.cli import main

    if vllm_device != "cpu":
        pytest.skip("a GPU has sleep mode")
    code = main(["train", "method=ttrl", f"agents=[{{name: A, path: '{MODELS['smollm2']}'}}]",
                 *ENGINE, "rollout.vllm.sleep_mode=true", "run.steps=1", "log.plot=false",
                 "log.tensorboard=false", f"run.output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == (
        "error: rollout.vllm.sleep_mode=true, but vLLM has no sleep mode on cpu (it hands GPU "
        "memory to training during the update); auto, the default, sleeps only where it can. "
        "Set rollout.vllm.sleep_mode=false.")


GSM8K = [{"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
          "answer": "3 + 4 = 7\n#### 7"},
         {"question": "A box holds 6 eggs. How many eggs are in 2 boxes?",
          "answer": "2 * 6 = 12\n#### 12"},
         {"question": "Sara had 10 pencils and gave 3 away. How many pencils does she have left?",
          "answer": "10 - 3 = 7\n#### 7"}]


@pytest.mark.parametrize("name", list(MODELS))
def test_eval_gsm8k_through_vllm_answers_as_the_policy_greedily(name, tmp_path, vllm_env):
    """``vlcohort eval --engine vllm`` as a user runs it (the eval's own engine settings),
    greedy in fp32: every response is the one the policy itself generates greedily from
    the same prompt (``generate_texts``, what ``--engine hf`` runs; its own CLI run is in
    ``tests/real/``), and the run is scored."""
    from vlcohort.cli import main
    from vlcohort.eval.datasets import load_benchmark
    from vlcohort.eval.items import EvalSettings, prompt_view
    from vlcohort.monitoring.heldout import generate_texts
    from vlcohort.processors import adapter_for

    data = tmp_path / "bench"
    (data / "gsm8k").mkdir(parents=True)
    (data / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GSM8K))
    max_new = 32
    started = time.perf_counter()
    assert main(["eval", "--model", MODELS[name], "--benchmark", "gsm8k", "--data-dir", str(data),
                 "--max-new-tokens", str(max_new), "--dtype", "float32", "--engine", "vllm",
                 "--vllm-dtype", "float32", "--no-progress", "--out", str(tmp_path / "out")]) == 0
    eval_s = round(time.perf_counter() - started, 1)
    items = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "items.jsonl").read_text().splitlines())}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    cell = summary["benchmarks"]["gsm8k"]["models"][MODELS[name]]

    # the same prompts, answered greedily by the policy (transformers' generate, fp32)
    defaults = {f.name: f.default for f in dataclasses.fields(EvalSettings)}  # the CLI's
    problems = load_benchmark("gsm8k", data).problems
    adapter = adapter_for(MODELS[name])
    model = adapter.load_model().float().eval()
    rendered = []
    for p in problems:
        view, instruction = prompt_view(p, "boxed")
        if defaults["instruction"] is not None:
            instruction = defaults["instruction"]
        rendered.append(adapter.render(view, defaults["system_prompt"], instruction))
    with torch.no_grad():
        expected = generate_texts(adapter, model, rendered, max_new)
    got = [items[p.id]["response"] for p in problems]
    print(json.dumps({"model": name, "eval_s": eval_s, "responses": got, "gsm8k": cell}))
    assert len(items) == len(GSM8K) and all(got), got
    assert all(isinstance(items[p.id]["correct"], bool) for p in problems), items
    # greedy, fp32, the same weights: the same answers (a near-tie in the argmax could
    # flip a token; none did here, measured)
    assert got == expected, list(zip(got, expected))
