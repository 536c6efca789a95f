"""A prompt over ``data.max_prompt_tokens`` (counted in the model's own tokens when a problem
is rendered, image tokens included) is skipped and counted like a broken image, so that one
overlong record cannot make attention ask for more memory than the machine has."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from PIL import Image

from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.processors import ProblemInputError, adapter_for
from vlcohort.typed_yaml import ConfigError

#: Address-space limit of the training run below. The same run without the long record
#: peaks at 4.8 GiB of virtual memory (VmPeak; 0.9 GiB resident; one torch thread: the
#: libraries' mappings are most of it), so 8 GiB leaves 3 GiB of headroom. Without a
#: prompt limit its first step asks for one more 6 GB block for the long prompt's
#: attention and dies here with a traceback.
MEMORY_LIMIT = 8 * 1024 ** 3

LONG = 100_000


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _long_question(i: int) -> str:
    head = f"What is {i} + 1? Consider this first: "
    return head + ("lorem ipsum dolor sit amet " * (LONG // 27 + 1))[:LONG - len(head)]


def _write_data(path, long_at: int) -> None:
    with path.open("w") as f:
        for i in range(8):
            question = _long_question(i) if i == long_at else f"What is {i} + 1?"
            f.write(json.dumps({"id": f"q{i}", "question": question, "answer": str(i + 1)}) + "\n")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def test_a_100k_character_question_is_skipped_and_the_run_trains_on_the_others(tmp_path):
    """A real run (a child process under an address-space limit) on a file whose second
    record is a 100,000-character question: it finishes, names the record and its reason,
    and every step updates on full batches of the other records."""
    data, run = tmp_path / "train.jsonl", tmp_path / "run"
    _write_data(data, long_at=1)
    assert len(json.loads(data.read_text().splitlines()[1])["question"]) == LONG
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    env.update(OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2", PYTHONUNBUFFERED="1")
    # self-certainty rewards need no gold and differ between samples: every step updates
    proc = subprocess.run(
        [sys.executable, "-m", "vlcohort", "train", "method=intuitor",
         "agents=[{name: A, path: 'tiny:qwen2'}]", "data.source=file", f"data.path={data}",
         "data.shuffle=false", "run.steps=2", "run.threads=1", "arms=[]", "eval.every=0",
         "rollout.prompts_per_step=4", "rollout.rollouts_per_prompt=2",
         "rollout.max_new_tokens=4", "grpo.micro_batch_seqs=8", "log.plot=false",
         "checkpoint.at_end=false", f"run.output_dir={run}"],
        env=env, capture_output=True, text=True, timeout=600, preexec_fn=_limit_memory,
        check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert ("skipped record: problem 'q1': the prompt is " in proc.stderr
            and "tokens, over data.max_prompt_tokens=4096" in proc.stderr), out[-3000:]
    assert "skipped records by reason: {'prompt_too_long': 1}" in proc.stdout
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all("agent/A/loss" in r for r in records), records


def test_the_count_is_the_rendered_prompts_token_ids():
    """The count a limit compares is the length of the ids the model is given, so a prompt
    of exactly ``max_tokens`` passes and one token fewer refuses it."""
    adapter = adapter_for("tiny:qwen2")
    problem = Problem(id="p", text="What is 2 + 2?")
    rendered = adapter.render(problem, "You are a helpful assistant.", "Answer briefly.")
    n = int(adapter.encode_prompts([rendered]).inputs["input_ids"].shape[1])
    assert adapter.prompt_token_count(rendered) == adapter.text_token_count(rendered.text) == n
    assert adapter.render(problem, "You are a helpful assistant.", "Answer briefly.",
                          max_tokens=n).text == rendered.text
    with pytest.raises(ProblemInputError, match=rf"problem 'p': the prompt is {n} tokens, "
                                                rf"over data\.max_prompt_tokens={n - 1}") as e:
        adapter.render(problem, "You are a helpful assistant.", "Answer briefly.",
                       max_tokens=n - 1)
    assert e.value.reason == "prompt_too_long"
    long = Problem(id="long", text=_long_question(0))
    assert adapter.render(long, max_tokens=0).text  # 0: no limit


def test_image_tokens_count_towards_the_limit(tmp_path):
    """A VLM's prompt counts each image as the processor expands it: the text's one
    placeholder becomes the image's tokens. A limit the text alone fits but the image
    does not refuses the prompt, naming the whole count."""
    adapter = adapter_for("tiny:qwen2_5_vl")
    Image.new("RGB", (112, 84), "red").save(tmp_path / "red.png")
    problem = Problem(id="img", text="What colour is this?", images=["red.png"],
                      meta={"base_dir": str(tmp_path)})
    rendered = adapter.render(problem)
    text_only = adapter.text_token_count(rendered.text)
    image_tokens = sum(adapter.prompt_image_token_counts(rendered.images))
    total = adapter.prompt_token_count(rendered)
    assert image_tokens > 1
    assert total == int(adapter.encode_prompts([rendered]).inputs["input_ids"].shape[1])
    assert total == text_only - 1 + image_tokens  # one <|image_pad|> -> the image's tokens
    assert adapter.render(problem, max_tokens=total).images
    with pytest.raises(ProblemInputError, match=rf"the prompt is {total} tokens, over "
                                                rf"data\.max_prompt_tokens={text_only}"):
        adapter.render(problem, max_tokens=text_only)


def test_an_overlong_text_is_refused_before_its_images_are_opened(tmp_path):
    """The text is counted first: a 100,000-character question with an image that does not
    even exist is refused as too long, not as a missing image."""
    adapter = adapter_for("tiny:qwen2_5_vl")
    problem = Problem(id="big", text=_long_question(0), images=["missing.png"],
                      meta={"base_dir": str(tmp_path)})
    with pytest.raises(ProblemInputError, match="the prompt's text alone is") as e:
        adapter.render(problem, max_tokens=4096)
    assert e.value.reason == "prompt_too_long"


def test_a_negative_limit_is_a_config_error(capsys):
    with pytest.raises(ConfigError, match=r"data\.max_prompt_tokens: a token count, 0 for no "
                                          r"limit; got -1"):
        load_config(None, ["data.max_prompt_tokens=-1"])
    assert main(["config", "data.max_prompt_tokens=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [("config error: data.max_prompt_tokens: a token count, 0 for no limit; "
                    "got -1")]
    assert load_config(None, ["data.max_prompt_tokens=0"]).data.max_prompt_tokens == 0
