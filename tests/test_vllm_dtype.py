"""The vLLM engine's dtype and its console (``vlcohort/rollout/vllm.py``,
``vlcohort/rollout/engines.py``, ``vlcohort/console.py``).

CPU (always): ``rollout.vllm.dtype=auto`` resolves to the policy's own training dtype; the
run header names the engine's dtype beside the policy's and says once when they differ;
the quiet console sets vLLM's log level to errors only (its own variable, read by every
engine vLLM builds) and ``--verbose`` gives vLLM its own default back.

The engine itself (``@pytest.mark.vllm``, run by ``.ci/vllm-cpu``) on the real
SmolLM2-135M-Instruct (``processors/gguf.py``): an fp32 policy under ``dtype: auto`` gets
a float32 engine whose build and weight push hand vLLM's loader no tensor of another dtype
(vLLM's own ``auto`` served it in bfloat16, with a warning per tensor); a one-step
``vlcohort train`` on vLLM prints the header line and no vLLM log line.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlcohort import console, run_header
from vlcohort.config import load_config
from vlcohort.rollout.dtypes import CHECKPOINT_DTYPE, engine_dtype, rollout_header
from vlcohort.rollout.vllm import dtype_name, policy_dtype

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = "gguf:smollm2-135m-instruct"
DATA = ROOT / "tests" / "data" / "real_math.jsonl"

#: vLLM's warning when its loader copies a tensor into a parameter of another dtype (module
#: ``vllm.model_executor.models.utils``): once per tensor, e.g. 122 times when a bfloat16
#: engine is built from SmolLM2's float32 checkpoint (measured).
DTYPE_WARNING = "Attempted to load weight"

#: A line of vLLM's own log format (module ``vllm.logger``: ``LEVEL MM-DD HH:MM:SS [file:line]``).
VLLM_LOG_LINE = re.compile(r"^(\(\w+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d ")

#: The one line of a vLLM run's stderr that is not ours, on vLLM's CPU build only: its CPU
#: worker binds memory with a C++ op whose TORCH_WARN goes to c10's own logger, which only
#: ``TORCH_CPP_LOG_LEVEL`` set before torch is imported can silence (no Python switch).
CPU_NUMA_LINE = re.compile(r"^\[W\d{4} [\d:.]+ utils\.cpp:\d+\] Warning: NUMA binding: ")


@pytest.fixture(autouse=True)
def _console_restored():
    yield
    console.loud()


# ------------------------------------------------------------------ dtype resolution


def test_auto_is_the_policys_dtype_and_a_named_dtype_is_kept():
    assert engine_dtype("auto", "float32") == "float32"
    assert engine_dtype("auto", "bfloat16") == "bfloat16"
    assert engine_dtype("bfloat16", "float32") == "bfloat16"
    assert engine_dtype("float32", "bfloat16") == "float32"


def test_policy_dtype_is_the_dtype_of_most_weights():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2))
    assert policy_dtype(model) == torch.float32
    model[0].to(torch.bfloat16)  # LoRA-style: a few float32 weights beside 16-bit ones
    assert policy_dtype(model) == torch.bfloat16
    assert dtype_name(policy_dtype(model)) == "bfloat16"
    with pytest.raises(ValueError, match="no floating-point parameters"):
        policy_dtype(torch.nn.Identity())


# ------------------------------------------------------------------ the run header


def test_header_names_both_dtypes_and_says_a_difference_once():
    assert rollout_header("hf", "auto", [("A", "float32")]) == []
    assert rollout_header("vllm", "auto", [("A", "float32"), ("B", "float32")]) == [
        "# rollout: vllm (float32 engine, float32 policy)"]
    lines = rollout_header("vllm", "bfloat16", [("A", "float32"), ("B", "float32")])
    assert lines[0] == "# rollout: vllm (bfloat16 engine, float32 policy)"
    assert len(lines) == 2 and "rollout.vllm.dtype=bfloat16 is not the policy's float32" in lines[1]
    assert "rollout.vllm.dtype=auto" in lines[1]  # the fix
    mixed = rollout_header("vllm", "auto", [("A", "float32"), ("B", "bfloat16")])
    assert mixed == ["# rollout: vllm (A: float32 engine, float32 policy; "
                     "B: bfloat16 engine, bfloat16 policy)"]
    # agents.N.dtype=auto: the checkpoint's dtype is not known before the model loads
    assert rollout_header("vllm", "auto", [("A", "auto")]) == [
        f"# rollout: vllm ({CHECKPOINT_DTYPE} engine, {CHECKPOINT_DTYPE} policy)"]


def test_config_summary_prints_the_rollout_line_of_a_vllm_run():
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm.dtype=bfloat16"])
    summary = run_header.config_summary(cfg).splitlines()
    assert "# rollout: vllm (bfloat16 engine, float32 policy)" in summary
    assert sum("is not the policy's" in line for line in summary) == 1
    assert not any(line.startswith("# rollout:") for line in
                   run_header.config_summary(load_config(None)).splitlines())  # hf


# ------------------------------------------------------------------ vLLM's log level


def test_quiet_sets_vllms_level_and_loud_gives_it_back(monkeypatch):
    monkeypatch.delenv(console.VLLM_LEVEL_ENV, raising=False)
    console.quiet()
    assert os.environ[console.VLLM_LEVEL_ENV] == "ERROR"  # read by vLLM and its children
    console.loud()
    assert console.VLLM_LEVEL_ENV not in os.environ
    monkeypatch.setenv(console.VLLM_LEVEL_ENV, "DEBUG")  # the user's own level stays
    console.quiet()
    assert os.environ[console.VLLM_LEVEL_ENV] == "DEBUG"
    console.loud()
    assert os.environ[console.VLLM_LEVEL_ENV] == "DEBUG"


# ------------------------------------------------------------------ a real engine


class _Recorder(logging.Filter):
    """Records the messages of the logger it filters (and drops them from the console).

    A filter, not a handler: vLLM sets its logging up (``dictConfig``) when it builds an
    engine, which empties the handlers of every ``vllm.*`` logger but keeps their filters."""

    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record):
        self.messages.append(record.getMessage())
        return False


@pytest.fixture
def dtype_warnings(monkeypatch):
    """The messages of the logger of vLLM's dtype warning, with vLLM's level at WARNING
    (read by each engine build)."""
    monkeypatch.setenv(console.VLLM_LEVEL_ENV, "WARNING")
    log = logging.getLogger("vllm.model_executor.models.utils")
    recorder = _Recorder()
    log.addFilter(recorder)
    yield recorder.messages
    log.removeFilter(recorder)


@pytest.mark.vllm
def test_fp32_policy_gets_an_fp32_engine_and_pushes_without_a_dtype_warning(
        vllm_env, vllm_device, dtype_warnings, monkeypatch):
    """Under vLLM's own ``auto`` this engine was bfloat16, and its build logged the dtype
    warning once per checkpoint tensor (122 for SmolLM2, measured); now neither the build
    nor a push logs it, and the recorder is shown to catch it (control, last)."""
    from vllm.model_executor.models.utils import AutoWeightsLoader

    from vlcohort.rollout.engines import make_engine
    from vlcohort.training.agent import build_agent

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(None, ["method=ttrl", f"agents=[{{name: A, path: '{SMOLLM2}'}}]",
                             "rollout.vllm.enforce_eager=true", "rollout.vllm.max_model_len=256",
                             "rollout.vllm.max_num_seqs=4", "rollout.vllm.kv_cache_memory_gib=0.0625"])
    assert cfg.rollout.vllm.dtype == "auto" and cfg.agents[0].dtype == "float32"  # the defaults
    agent = build_agent(cfg.agents[0], cfg)  # the hf engine; the vLLM one beside it
    engine = make_engine("vllm", agent.adapter, agent.model, vllm=cfg.rollout.vllm, seed=0)
    vllm_env.append(engine)
    assert engine.dtype == engine.policy_dtype == "float32"
    assert engine.llm.llm_engine.model_config.dtype == torch.float32
    with torch.no_grad():  # move the policy, so the push has something to copy
        next(agent.model.parameters()).add_(1e-3)
    engine.update_weights(agent.model)
    assert [m for m in dtype_warnings if DTYPE_WARNING in m] == [], dtype_warnings[:3]

    # control: vLLM's loader copying a float64 tensor into a float32 parameter warns, and
    # the recorder (after the engine's logging set-up) sees it
    AutoWeightsLoader(torch.nn.Linear(2, 2)).load_weights([("weight", torch.ones(2, 2, dtype=torch.float64))])
    assert any(DTYPE_WARNING in m for m in dtype_warnings), dtype_warnings


@pytest.mark.vllm
def test_one_vllm_step_prints_the_header_and_no_vllm_log_line(vllm_device, tmp_path):
    """``vlcohort train`` as a user runs it (a process of its own, the quiet console):
    stdout names both dtypes in the header; stderr holds no line of vLLM's logging."""
    env = {k: v for k, v in os.environ.items()
           if k not in (console.VERBOSE_ENV, console.VLLM_LEVEL_ENV)}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "vlcohort", "train", f"data.path={DATA}", "data.preset=math",
         "method=gt_reward", f"agents=[{{name: A, path: '{SMOLLM2}'}}]",
         "reward.answer_style=last_number", "rollout.prompts_per_step=1",
         "rollout.rollouts_per_prompt=2", "rollout.max_new_tokens=8", "run.steps=1",
         "log.plot=false", "log.tensorboard=false", "rollout.engine=vllm",
         "rollout.vllm.enforce_eager=true", "rollout.vllm.max_model_len=256",
         "rollout.vllm.max_num_seqs=4", "rollout.vllm.kv_cache_memory_gib=0.0625",
         f"run.output_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# rollout: vllm (float32 engine, float32 policy)" in out.stdout.splitlines()
    vllm_lines = [line for line in (out.stdout + out.stderr).splitlines()
                  if VLLM_LOG_LINE.match(line)]
    assert vllm_lines == [], "\n".join(vllm_lines[:10])
    # nothing else either: no bars, no Python warnings, no third-party line but the CPU one
    others = [line for line in out.stderr.splitlines()
              if line.strip() and not (vllm_device == "cpu" and CPU_NUMA_LINE.match(line))]
    assert others == [], out.stderr[-3000:]
