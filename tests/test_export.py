"""``vlcohort export`` on a real tiny run (CPU, offline): a cohort of one plain agent (A) and
one LoRA agent (B), trained one step with an update each; each is exported, loaded back with
transformers' own classes and compared, token for token, with the policy as the trainer
loads it. Then the errors a person meets, and the hub push up to the network."""

from __future__ import annotations

import json
import shutil
import socket

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import read_metrics

# INTUITOR's self-certainty reward is continuous, so every group has a reward spread and
# each agent updates at its first step (a 0/1 reward on a random tiny model often has none,
# and a LoRA adapter that never updated merges to the base: a test that could not fail).
COHORT = [*FAST, "method=intuitor", "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=8",
          "run.steps=1",
          "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, "
          "{name: B, path: 'tiny:qwen2_5_vl', lora_rank: 4, lora_alpha: 16}]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished one-step run of agents A (full fine-tune) and B (LoRA)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
        folder = tmp_path_factory.mktemp("export") / "run"
        assert main(["train", *COHORT, f"run.output_dir={folder}"]) == 0
        yield folder


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _greedy(model, inputs, max_new_tokens=10, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens, **kwargs)
    return out[:, inputs["input_ids"].shape[1]:]  # [B, new]


def _answers_like_the_policy(run, name: str, out) -> None:
    """The exported folder, loaded with transformers' own classes, gives the policy's
    logits and greedy tokens. The policy is built as the trainer resumes it
    (``build_agent(..., weights_from=<checkpoint>/<agent>)``: for LoRA the base plus the
    saved adapter, unmerged) and generates with the trainer's stop / suppress arguments;
    the export generates with none, from its generation_config.json alone."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from vlcohort.processors import adapter_for
    from vlcohort.recipes.run_problems import load_problems
    from vlcohort.training.agent import build_agent

    cfg = load_config(run / "config.yaml")
    mc = next(m for m in cfg.agents if m.name == name)
    policy = build_agent(mc, cfg, weights_from=str(run / "checkpoints/step-1" / name))
    assert policy.uses_lora == (mc.lora_rank > 0)
    policy.model.eval()

    model = AutoModelForImageTextToText.from_pretrained(out).eval()
    AutoProcessor.from_pretrained(out)  # the processor loads on its own
    exported = adapter_for(out)  # and the project's family registry takes the folder
    assert not any("lora" in type(m).__name__.lower() for m in model.modules())
    assert not any("lora_" in n or "base_layer" in n for n, _ in model.named_parameters())

    problems = load_problems(cfg)[:4]
    sp, ins = cfg.prompt.system_prompt, cfg.prompt.instruction
    a = policy.adapter
    want = a.encode_prompts([a.render(p, sp, ins) for p in problems]).inputs
    got = exported.encode_prompts([exported.render(p, sp, ins) for p in problems]).inputs
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    with torch.no_grad():
        lp = policy.model(**want).logits
        le = model(**got).logits
    assert lp.shape == le.shape
    assert torch.allclose(lp, le, atol=1e-4, rtol=1e-4), float((lp - le).abs().max())
    t_policy = _greedy(policy.model, want, eos_token_id=a.stop_token_ids(),
                       pad_token_id=a.pad_token_id(), suppress_tokens=a.suppressed_token_ids())
    t_export = _greedy(model, got)  # generation_config.json only
    assert t_policy.shape[1] > 0 and torch.equal(t_policy, t_export)


def test_lora_agent_exports_merged_and_answers_like_the_policy(run, tmp_path, capsys):
    recs = read_metrics(run / "metrics.jsonl")
    assert recs[-1].get("agent/B/loss") is not None, "agent B never updated: weak test"
    ckpt = run / "checkpoints/step-1/B"
    assert (ckpt / "adapter_config.json").is_file()  # the checkpoint holds the adapter only
    out = tmp_path / "B"
    assert main(["export", str(run), "--agent", "B", "--out", str(out)]) == 0
    assert "LoRA merged" in capsys.readouterr().out

    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "README.md",
            "tokenizer.json", "chat_template.jinja"} <= names
    assert "adapter_config.json" not in names and "trainer_state.pt" not in names
    weights = load_file(out / "model.safetensors")
    assert not [k for k in weights if "lora" in k or "base_layer" in k]
    from vlcohort.processors.tiny import tiny_model_path

    base = load_file(tiny_model_path("tiny:qwen2_5_vl") / "model.safetensors")
    assert weights.keys() == base.keys()
    changed = [k for k in base if not torch.equal(base[k], weights[k])]
    assert changed, "the merged weights equal the base: the adapter was not folded in"
    assert all(not k.endswith("_norm.weight") for k in changed)  # LoRA moves linears only
    assert out.stat().st_mode & 0o044 and (out / "model.safetensors").stat().st_mode & 0o044

    _answers_like_the_policy(run, "B", out)

    card = (out / "README.md").read_text()
    reward = [r for r in recs if "agent/B/reward/mean" in r][-1]["agent/B/reward/mean"]
    for text in ("tiny:qwen2_5_vl", "Qwen2.5-VL", "intuitor", "| steps trained | 1 of 1",
                 "LoRA r=4, alpha=16", "synthetic", f"| {reward:.4f} | 1 |",
                 "library_name: transformers", "vllm serve"):
        assert text in card, text


def test_plain_agent_exports_and_answers_like_the_policy(run, tmp_path):
    assert read_metrics(run / "metrics.jsonl")[-1].get("agent/A/loss") is not None
    out = tmp_path / "A"
    assert main(["export", str(run), "--agent", "A", "--out", str(out), "--step", "1"]) == 0
    gen = json.loads((out / "generation_config.json").read_text())
    from vlcohort.processors import adapter_for

    trained = adapter_for(run / "checkpoints/step-1/A")
    eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
    assert set(eos) == set(trained.stop_token_ids()) and len(eos) > 1  # end of turn + eos
    assert gen["suppress_tokens"] == trained.suppressed_token_ids() != []
    assert "full fine-tune" in (out / "README.md").read_text()
    _answers_like_the_policy(run, "A", out)


# ------------------------------------------------------------------------------ errors


def _fails(args, capsys, *needles) -> str:
    """``vlcohort export ARGS`` exits 2 with one message naming every needle."""
    assert main(["export", *map(str, args)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("export error: ") and "Traceback" not in err and "\n" not in err
    for n in needles:
        assert str(n) in err, (n, err)
    return err


def test_errors_are_one_message_and_exit_2(run, tmp_path, capsys):
    # a folder without checkpoints (a run that never saved)
    empty = tmp_path / "fresh"
    empty.mkdir()
    shutil.copy(run / "config.yaml", empty)
    _fails([empty, "--agent", "A", "--out", tmp_path / "x"], capsys, "no complete checkpoint",
           empty / "checkpoints")
    # a comparison run's top folder: the arms are named
    arms = tmp_path / "arms"
    (arms / "co_rl" / "checkpoints").mkdir(parents=True)
    _fails([arms, "--agent", "A", "--out", tmp_path / "x"], capsys, "export one arm", "co_rl")
    # an unknown agent: the known ones are listed; two agents and no --agent: asked for
    _fails([run, "--agent", "C", "--out", tmp_path / "x"], capsys, "--agent C", "A, B")
    _fails([run, "--out", tmp_path / "x"], capsys, "--agent is needed", "A, B")
    # a step the run does not have
    _fails([run, "--agent", "A", "--step", "7", "--out", tmp_path / "x"], capsys,
           "--step 7", "steps saved: 1")
    # an --out that exists and is not empty; --force replaces it
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    _fails([run, "--agent", "A", "--out", busy], capsys, f"--out {busy}", "--force")
    assert (busy / "keep.txt").read_text() == "mine"
    # the run folder itself, even with --force: the run is left alone
    _fails([run, "--agent", "A", "--out", run, "--force"], capsys, "the run folder")
    _fails([run, "--agent", "A", "--out", run / "checkpoints" / "x", "--force"], capsys,
           "inside the run folder")
    assert (run / "checkpoints/step-1/A/model.safetensors").is_file()
    assert main(["export", str(run), "--agent", "A", "--out", str(busy), "--force"]) == 0
    assert not (busy / "keep.txt").exists() and (busy / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries


def test_a_damaged_checkpoint_is_refused_for_that_agent_only(run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    damaged = copy / "checkpoints/step-1/B/adapter_model.safetensors"
    with open(damaged, "r+b") as f:
        f.truncate(damaged.stat().st_size // 2)
    _fails([copy, "--agent", "B", "--out", tmp_path / "B"], capsys, "manifest check",
           damaged, "--step N")
    assert not (tmp_path / "B").exists()
    # agent A's files are intact: it still exports from the same checkpoint
    assert main(["export", str(copy), "--agent", "A", "--out", str(tmp_path / "A")]) == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_to_hub_goes_through_huggingface_hub_to_the_network(run, tmp_path, capsys,
                                                                monkeypatch):
    """The real create_repo / upload_folder path: the hub endpoint is a closed local port,
    so the request is refused (or, where HF_HUB_OFFLINE=1 as in CI, huggingface_hub's own
    offline guard stops it before the socket); the message names the repo, the endpoint
    and the cause, and the folder is complete for a later upload."""
    from huggingface_hub import constants

    out = tmp_path / "A"
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_test")  # a token: the request is sent, not refused locally
    cause = "offline mode is enabled" if constants.HF_HUB_OFFLINE else "Connection refused"
    _fails([run, "--agent", "A", "--out", out, "--push-to-hub", "someone/cohort-A", "--private"],
           capsys, "--push-to-hub someone/cohort-A", endpoint, cause, out, "hf upload")
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
