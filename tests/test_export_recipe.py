"""The prompt recipe ``vlcohort export`` writes (``prompt_recipe.json`` and the model card):
a real one-step run of two text agents prompted two ways (A through its chat template, B
through a Jinja file of the run's, inherited from ``prompt.format``) on multiple-choice
problems; each agent is exported, and rendering through the recorded recipe gives the very
text the training adapter rendered."""

from __future__ import annotations

import json

import pytest

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.export import (
    PROMPT_FORMAT_FILE,
    PROMPT_RECIPE,
    ExportError,
    example_problem,
    read_recipe,
    recipe_adapter,
    render_with_recipe,
)
from vlcohort.recipes.run_problems import load_problems
from vlcohort.training.agent import checked_adapter

#: A plain format of the run's own (not one of the named ones), so the export must carry it.
JINJA = ("{{ plain_bos }}{% for m in messages %}{% if m['role'] == 'system' %}[SYS] "
         "{{ m['content'] }}{{ '\\n' }}{% endif %}{% endfor %}[ASK] {% for m in messages %}"
         "{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}{{ '\\n' }}[REPLY]")


def _data(path):
    """Multiple-choice arithmetic, options in a column (in the order given)."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i + 1}?",
             "options": [str(2 * i + 1), str(2 * i + 3), str(2 * i), str(i)], "answer": "A"}
            for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished one-step run: agent A on its chat template, agent B on the run's Jinja."""
    base = tmp_path_factory.mktemp("recipe")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
        (base / "fmt.jinja").write_text(JINJA)
        folder = base / "run"
        assert main(["train", *FAST, "method=intuitor", "rollout.rollouts_per_prompt=4",
                     "rollout.max_new_tokens=8", "run.steps=1", "data.source=file",
                     f"data.path={_data(base / 'mc.jsonl')}", "data.preset=generic",
                     f"prompt.format={base / 'fmt.jinja'}", "reward.answer_style=answer_tag",
                     "prompt.instruction=Reply with the letter only, as <answer>X</answer>.",
                     "agents=[{name: A, path: 'tiny:qwen2', prompt_format: chat}, "
                     "{name: B, path: 'tiny:qwen2'}]", f"run.output_dir={folder}"]) == 0
        yield folder


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.mark.parametrize("name", ["A", "B"])
def test_the_recipe_renders_what_training_rendered(run, tmp_path, name):
    out = tmp_path / name
    assert main(["export", str(run), "--agent", name, "--out", str(out)]) == 0
    recipe = json.loads((out / PROMPT_RECIPE).read_text())
    cfg = load_config(run / "config.yaml")
    mc = next(m for m in cfg.agents if m.name == name)
    trained = checked_adapter(mc, cfg)  # the adapter the run rendered its prompts with
    sp, ins = cfg.prompt.system_prompt, cfg.prompt.instruction
    assert (recipe["system_prompt"], recipe["instruction"]) == (sp, ins)
    assert (recipe["answer_style"], recipe["answer_kind"]) == ("answer_tag", "math")
    assert recipe["options"]["order"].startswith("as each record lists them")
    if name == "A":
        assert recipe["prompt_format"] == "chat" and recipe["template"] is None
        assert not (out / PROMPT_FORMAT_FILE).exists()
    else:  # the run's Jinja file, copied into the folder
        assert recipe["prompt_format"] == PROMPT_FORMAT_FILE
        assert (out / PROMPT_FORMAT_FILE).read_text() == JINJA == recipe["template"]
        assert "as set" in recipe["prompt_format_description"]

    adapter = recipe_adapter(out)  # from the exported folder alone
    problems = load_problems(cfg)[:4]
    assert all(p.options for p in problems)
    for p in problems:
        want = trained.render(p, sp, ins).text
        assert render_with_recipe(out, p, adapter=adapter).text == want
        assert "\nChoices:\nA. " + p.options[0] + "\n" in want and want.count(ins) == 1
    example = trained.render(example_problem(False), sp, ins).text
    assert recipe["example"]["prompt"] == example
    assert recipe["example"]["options"] == example_problem(False).options
    card = (out / "README.md").read_text()
    assert "## Prompt it as it was trained" in card and example in card
    if name == "B":  # the folder's own default (its chat template) is not what B learnt
        from vlcohort.processors import adapter_for

        assert adapter_for(out).render(problems[0], sp, ins).text != trained.render(
            problems[0], sp, ins).text


def test_a_folder_without_a_recipe_is_one_message(tmp_path):
    with pytest.raises(ExportError, match=rf"{PROMPT_RECIPE}: missing; export the agent again"):
        read_recipe(tmp_path)
    (tmp_path / PROMPT_RECIPE).write_text("{not json")
    with pytest.raises(ExportError, match="unreadable"):
        read_recipe(tmp_path)
