"""Which recipe ``vlcohort train`` builds on without a recipe file: the demo for a bare
run, the plain defaults once the user names data or agents (the demo's multiple-choice
prompt, synthetic tasks and warm-ups never leak into a run on the user's own data)."""

from __future__ import annotations

from vlcohort.cli import main
from vlcohort.config import DEMO_RECIPE, Config, load_config, train_base


def test_bare_run_builds_on_the_demo():
    base, overrides, line = train_base(None, ["run.steps=3"])
    assert base == DEMO_RECIPE and overrides == ["run.steps=3"]
    assert "packaged demo" in line


def test_own_data_starts_from_the_plain_defaults(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text('{"id": "1", "question": "What is 2 + 3?", "answer": "5"}\n')
    base, overrides, line = train_base(None, [f"data.path={data}"])
    assert base is None and overrides[0] == "data.source=file"
    assert "plain defaults" in line and "data.source=file implied" in line
    cfg = load_config(base, overrides)
    demo = load_config(DEMO_RECIPE)
    assert cfg.prompt == Config().prompt and cfg.prompt.instruction != demo.prompt.instruction
    assert cfg.data.source == "file" and all(a.warmup.steps == 0 for a in cfg.agents)
    assert not cfg.arms


def test_an_explicit_source_is_kept_and_agents_alone_also_count():
    base, overrides, _ = train_base(None, ["data.source=hub", "data.path=org/set"])
    assert base is None and overrides == ["data.source=hub", "data.path=org/set"]
    base, overrides, line = train_base(None, ["agents=[{name: A, path: 'tiny:qwen2'}]"])
    assert base is None and "agents given" in line
    base, overrides, line = train_base(None, ["agents.1.path=tiny:qwen2"])
    assert base is None and "agents.1.path given" in line
    cfg = load_config(base, overrides)  # agents.N edits the default cohort
    assert [a.path for a in cfg.agents] == [Config().agents[0].path, "tiny:qwen2"]


def test_tuning_the_demo_keeps_the_demo():
    for tweak in (["agents.0.warmup.steps=2"], ["data.num_problems=64"], ["prompt.format=plain"]):
        assert train_base(None, tweak)[0] == DEMO_RECIPE


def test_a_recipe_file_is_used_as_given(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("run: {steps: 2}\n")
    base, overrides, line = train_base(recipe, ["data.path=x"])
    assert base == recipe and overrides == ["data.path=x"] and str(recipe) in line


def test_config_command_prints_its_base(tmp_path, capsys):
    data = tmp_path / "m.jsonl"
    data.write_text('{"id": "1", "question": "Q?", "answer": "1"}\n')
    assert main(["config", f"data.path={data}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# base recipe: none, the plain defaults")
    assert "Answer with the letter" not in out
