"""Config: defaults <- YAML <- overrides; errors name the key and what is allowed."""

from __future__ import annotations

import pytest
import yaml

from vlcohort.config import (
    default_config,
    derived_totals,
    field_docs,
    load_config,
    save_resolved,
)
from vlcohort.typed_yaml import ConfigError


def test_default_is_a_two_family_cohort():
    cfg = default_config()
    assert len(cfg.agents) == 2
    assert cfg.agents[0].path != cfg.agents[1].path
    assert cfg.reward.source == "peer_vote"  # filled in from method=co_rl


def test_yaml_then_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"run": {"steps": 7}, "rollout": {"rollouts_per_prompt": 4}}))
    cfg = load_config(f, ["run.steps=9", "agents.1.max_tiles=6", "prompt.instruction=Box it."])
    assert cfg.run.steps == 9 and cfg.rollout.rollouts_per_prompt == 4
    assert cfg.agents[1].max_tiles == 6 and cfg.agents[1].name == "B"
    assert cfg.prompt.instruction == "Box it."


def test_saved_config_loads_back_identically(tmp_path):
    cfg = load_config(None, ["method=ttrl", "agents.0.dtype=bfloat16"])
    path = save_resolved(cfg, tmp_path)
    assert load_config(path) == cfg


def test_derived_totals():
    cfg = load_config(None, ["rollout.prompts_per_step=3", "rollout.rollouts_per_prompt=5",
                              "grpo.micro_batch_seqs=5"])
    assert derived_totals(cfg)["sequences_per_step (A x B x G)"] == 2 * 3 * 5


@pytest.mark.parametrize("overrides,match", [
    (["run.stepz=3"], r"run\.stepz: unknown key\. Allowed under run: name, steps, seed, output_dir"),
    (["run.steps=many"], r"run\.steps: expected an integer"),
    (["rollout.temperature=hot"], r"rollout\.temperature: expected a number"),
    (["agents.0.trust_remote_code=yes please"], r"agents\.0\.trust_remote_code: expected true or false"),
    (["method=magic"], r"method: 'magic' is not one of: co_rl, ttrl, gt_reward"),
    (["reward.topology=star"], r"reward\.topology: 'star' is not one of"),
    (["method=ttrl", "reward.source=peer_vote"], r"contradicts method='ttrl'"),
    (["rollout.rollouts_per_prompt=0"], r"rollout\.rollouts_per_prompt: must be >= 1"),
    (["agents.0.min_pixels=5000", "agents.0.max_pixels=100"], r"agents\.0: min_pixels=5000 > max_pixels=100"),
    (["agents.1.name=A"], r"names must be unique"),
    (["agents.1.path="], r"agents\.1\.path: empty"),
    (["steps"], r"write it as key\.sub=value"),
    (["rollout.rollouts_per_prompt=1"], r"group normalisation needs G >= 2"),
    (["grpo.micro_batch_seqs=5"], r"grpo\.micro_batch_seqs=5 must divide .* \(B x G = 16\)"),
    (["grpo.mini_batch_seqs=6", "grpo.micro_batch_seqs=2"],
     r"grpo\.mini_batch_seqs=6 must be 0 .* divide B x G = 16"),
    (["grpo.mini_batch_seqs=4"], r"multiple of grpo\.micro_batch_seqs=16"),
    (["method=self_play", "grpo.kl_coef=0.1", "grpo.kl_in_reward=true"],
     r"grpo\.kl_in_reward: the reward-side KL penalty is applied by the cohort recipe"),
    (["grpo.loss_agg=sum"], r"grpo\.loss_agg: 'sum' is not one of"),
    (["optim.betas=[0.9]"], r"optim\.betas: two numbers"),
])
def test_bad_config_names_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_peer_vote_with_one_agent_is_an_error(tmp_path):
    f = tmp_path / "one.yaml"
    f.write_text(yaml.safe_dump({"agents": [{"name": "solo", "path": "tiny:qwen2"}]}))
    with pytest.raises(ConfigError, match="peer_vote needs at least 2 agents"):
        load_config(f)
    assert load_config(f, ["method=ttrl"]).reward.source == "self_vote"


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("run: {steps: [}\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")


def test_every_field_is_documented():
    undocumented = [key for key, _, doc in field_docs() if not doc]
    assert not undocumented


def test_shipped_configs_load_and_demo_yaml_is_the_embedded_default():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "configs"
    files = sorted(root.glob("*.yaml"))
    assert files
    for f in files:
        assert f.read_text().startswith("#"), f"{f.name}: head it with the command that runs it"
        load_config(f)
    assert load_config(root / "demo.yaml") == default_config()


def test_agent_options_are_the_adapters_own_type():
    """``ModelConfig`` inherits ``AdapterOptions`` (one definition): the YAML keys stay
    ``agents.N.<field>`` in the same order, every inherited field keeps its docstring in
    ``vlcohort config --fields``, and the adapter gets a plain copy of them."""
    import dataclasses

    from vlcohort.config import ModelConfig
    from vlcohort.processors import AdapterOptions, ImageLimits
    from vlcohort.training.agent import adapter_options

    assert issubclass(ModelConfig, AdapterOptions)
    options = [f.name for f in dataclasses.fields(AdapterOptions)]
    names = [f.name for f in dataclasses.fields(ModelConfig)]
    assert names[:2] == ["name", "path"] and names[2: 2 + len(options)] == options
    docs = {key: doc for key, _, doc in field_docs()}
    assert all(docs[f"agents.N.{o}"] for o in options)
    cfg = default_config(["agents.0.max_source_pixels=5000", "agents.0.min_image_side=3",
                          "agents.0.logprob_chunk_tokens=7", "agents.0.min_pixels=1000"])
    opts = adapter_options(cfg.agents[0])
    assert type(opts) is AdapterOptions
    assert opts.image_limits == ImageLimits(max_source_pixels=5000, min_side=3)
    assert (opts.logprob_chunk_tokens, opts.min_pixels) == (7, 1000)
    cfg.agents[0].min_pixels = 2000  # a copy: later config edits do not reach the adapter
    assert opts.min_pixels == 1000
    assert adapter_options(ModelConfig()) == AdapterOptions()


def test_a_choice_field_is_checked_at_load():
    """``Literal`` fields (``rollout.vllm.sleep_mode``) refuse a typo when the config
    loads, not when an engine is built; a YAML bool is only a bool choice."""
    from vlcohort.config import load_config

    assert load_config(None, ["rollout.vllm.sleep_mode=auto"]).rollout.vllm.sleep_mode == "auto"
    assert load_config(None, ["rollout.vllm.sleep_mode=false"]).rollout.vllm.sleep_mode is False
    with pytest.raises(ConfigError, match=r"rollout.vllm.sleep_mode: 'atuo' is not one of "
                       r"auto, true, false"):
        load_config(None, ["rollout.vllm.sleep_mode=atuo"])
    with pytest.raises(ConfigError, match="is not one of"):
        load_config(None, ["rollout.vllm.sleep_mode=1"])


def test_derived_values_are_resolved_in_one_step():
    """``resolve`` fills what a config derives from others, and only where left unset."""
    from vlcohort.config import Config, agent_reward_source
    from vlcohort.config_checks import resolve

    cfg = Config(method="ttrl")
    cfg.run.name = "x"
    resolve(cfg)
    assert (cfg.reward.source, cfg.run.output_dir) == ("self_vote", "runs/x")
    cfg.agents[1].reward_source = "entropy"
    assert [agent_reward_source(cfg, i) for i in range(2)] == ["self_vote", "entropy"]
    cfg = Config(method="self_play")
    cfg.run.output_dir = "elsewhere"
    resolve(cfg)
    assert (cfg.reward.source, cfg.run.output_dir) == (None, "elsewhere")


def test_a_deprecated_value_loads_with_one_warning_naming_the_new_one(capsys):
    cfg = load_config(None, ["grpo.is_mode=mask"])
    assert cfg.grpo.is_mode == "mask"  # still accepted, and run as token_mask
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: grpo.is_mode=mask is deprecated; use grpo.is_mode=token_mask "
                   "(the same setting)"]
    load_config(None, ["grpo.is_mode=token_mask"])
    assert capsys.readouterr().err == ""
