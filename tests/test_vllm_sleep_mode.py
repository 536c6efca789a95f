"""``rollout.vllm.sleep_mode`` (auto | true | false): the default must run wherever vLLM
runs. Only a GPU has sleep mode, and vLLM's sleep allocator is one per process, so
``auto`` sleeps on a GPU for the first engine of a process and never elsewhere; ``true``
where it cannot be honoured is a one-line error naming the key and the fix. The rule is a
pure function (``resolve_sleep_mode``), checked here without vLLM; the engine applies it
before building anything (``tests/test_rollout_vllm.py`` checks that on vLLM's CPU build).
"""

from __future__ import annotations

import pytest

from vlcohort.config import VLLMConfig, load_config
from vlcohort.errors import RunError
from vlcohort.rollout.vllm import EngineUnavailableError, resolve_sleep_mode, sleep_mode_error


def test_default_is_auto_and_yaml_and_overrides_give_all_three(tmp_path):
    assert VLLMConfig().sleep_mode == "auto"
    assert load_config(None, []).rollout.vllm.sleep_mode == "auto"
    for raw, want in (("auto", "auto"), ("true", True), ("false", False)):
        cfg = load_config(None, [f"rollout.vllm.sleep_mode={raw}"])
        assert cfg.rollout.vllm.sleep_mode == want and type(cfg.rollout.vllm.sleep_mode) is type(want)
        f = tmp_path / f"{raw}.yaml"
        f.write_text(f"rollout:\n  vllm:\n    sleep_mode: {raw}\n")
        assert load_config(f).rollout.vllm.sleep_mode == want


@pytest.mark.parametrize("device,available", [("cuda", True), ("cpu", False)])
def test_auto_sleeps_exactly_where_the_platform_can(device, available):
    assert resolve_sleep_mode("auto", available, device) is available
    assert resolve_sleep_mode(False, available, device) is False
    # a second engine in the same process (agents without a launcher): vLLM's sleep
    # allocator is taken, so auto runs it awake instead of failing
    assert resolve_sleep_mode("auto", available, device, sleeping_engines=1) is False


def test_true_sleeps_where_it_can_and_is_one_line_error_where_it_cannot():
    assert resolve_sleep_mode(True, True, "cuda") is True
    with pytest.raises(EngineUnavailableError) as e:
        resolve_sleep_mode(True, False, "cpu")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("rollout.vllm.sleep_mode=true")
    assert "no sleep mode on cpu" in msg and msg.endswith("Set rollout.vllm.sleep_mode=false.")
    assert "auto" in msg  # the default that would have run is named
    with pytest.raises(EngineUnavailableError, match=r"only one engine per process.*sleep_mode=auto"):
        resolve_sleep_mode(True, True, "cuda", sleeping_engines=1)


@pytest.mark.parametrize("bad", ["atuo", "yes please", 1, 0, None])
def test_other_values_are_refused_naming_the_choices(bad):
    msg = sleep_mode_error(bad, True, "cuda")
    assert msg == (f"rollout.vllm.sleep_mode: {bad!r} is not one of auto, true, false "
                   "(auto: sleep where vLLM can, i.e. on a GPU)")
    with pytest.raises(EngineUnavailableError):
        resolve_sleep_mode(bad, True, "cuda")
    assert sleep_mode_error("auto", False, "cpu") is None


def test_an_engine_refusal_ends_the_command_in_one_line(tmp_path, monkeypatch, capsys):
    """The engine's refusals are run errors: ``vlcohort train`` prints the message alone and
    exits 1 (before, a traceback). Here vLLM is missing, the refusal that needs no vLLM to
    reach; the sleep-mode refusal goes the same way (``tests/test_vllm_real.py`` runs it on
    vLLM's CPU build)."""
    import importlib.util

    from vlcohort.cli import main

    assert issubclass(EngineUnavailableError, RunError)
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: its refusals are checked in tests/test_vllm_real.py")
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    code = main(["train", "method=ttrl", "agents=[{name: A, path: 'tiny:qwen2'}]",
                 "rollout.engine=vllm", "rollout.vllm.sleep_mode=true", "run.steps=1",
                 f"run.output_dir={tmp_path / 'run'}", "log.plot=false", "log.tensorboard=false"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: rollout.engine=vllm needs the vLLM package")
