"""The ``vlcohort eval`` generation engine: placement checks, length-sorted batching,
data-parallel workers (on CPU here), resuming a killed run's part files, bad input.

The models are tiny real checkpoints; the text one is *sharpened* (its matrices re-drawn
wider), so greedy completions differ from item to item and a comparison of texts can fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from vlcohort.cli import main
from vlcohort.data.problems import Problem
from vlcohort.eval.datasets import BenchmarkError
from vlcohort.eval.generation import (
    drop_truncated_tail,
    effective_dtype,
    generate_shard,
    length_order,
    merge_parts,
    plan_placement,
    prompt_tokens,
    read_resumable,
    shard,
    text_generator,
)
from vlcohort.eval.runner import PROMPTS, EvalSettings

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the answer is of to in triangle circle square find x solve for y how many "
         "degrees area perimeter length angle radius").split()
N_ITEMS = 16


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One torch thread in this process (the spawned workers get their share): on a
    shared CPU, several threads spin against other processes and a tiny model's step
    slows ten-fold."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """The tiny-model cache the other test files use (built once per session)."""
    return tmp_path_factory.getbasetemp() / "vlcohort-cache"


@pytest.fixture(scope="module")
def sharp_qwen2(tmp_path_factory, cache_dir) -> str:
    """A checkpoint folder: tiny:qwen2 with sharpened weights, written by save_pretrained."""
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import sharpen, tiny_model_path

    folder = tmp_path_factory.mktemp("sharp") / "qwen2"
    shutil.copytree(tiny_model_path("tiny:qwen2", cache_dir=cache_dir / "tiny"), folder)
    model = adapter_for(folder).load_model()
    sharpen(model, seed=0, scale=0.2).save_pretrained(folder)
    return str(folder)


def _question(i: int) -> str:
    # lengths out of order on purpose (3..57 words), so sorting moves items around
    n = 3 + (i * 37) % 55
    return " ".join(WORDS[(i + k * 7) % len(WORDS)] for k in range(n)) + f" ({i})?"


@pytest.fixture(scope="module")
def gsm8k_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gsm8k")
    rows = [{"question": _question(i), "answer": f"so {i}\n#### {i}"} for i in range(N_ITEMS)]
    (d / "gsm8k_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _argv(model: str, data: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", model, "--benchmark", "gsm8k", "--data-dir", str(data),
            "--out", str(out), "--max-new-tokens", "6", "--batch-size", "3", "--no-progress",
            "--device", "cpu", *extra]


def _responses(out: Path) -> dict[tuple, str]:
    recs = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    keys = [(r["benchmark"], r["id"], r["model"], r["sample"]) for r in recs]
    assert len(keys) == len(set(keys)), "a key written twice"
    return {k: r["response"] for k, r in zip(keys, recs)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, sharp_qwen2, gsm8k_dir) -> Path:
    """One worker, input-order batches: the run the others must reproduce."""
    out = tmp_path_factory.mktemp("ref")
    assert main(_argv(sharp_qwen2, gsm8k_dir, out)) == 0
    texts = _responses(out)
    assert len(texts) == N_ITEMS and len(set(texts.values())) > N_ITEMS // 2  # texts differ: comparable
    return out


# --------------------------------------------------------------------------- placement


def test_placement_resolves_and_rejects_wrong_combinations():
    two = ("4", "6")  # CUDA_VISIBLE_DEVICES=4,6
    p = plan_placement("hf", "auto", "auto", 1, [])
    assert (p.device, p.dtype, p.workers, p.spawn) == ("cpu", "float32", 1, False)
    p = plan_placement("hf", "auto", "auto", "auto", two)
    assert (p.device, p.dtype, p.workers, p.gpu_ids) == ("cuda", "auto", 2, ("4", "6"))
    assert plan_placement("hf", "cuda:1", "bfloat16", 1, two).device == "cuda:1"
    p = plan_placement("vllm", "cuda:1", "auto", 1, two)  # vLLM: a worker that sees GPU 6
    assert (p.device, p.gpu_ids, p.spawn) == ("cuda", ("6",), True)
    assert plan_placement("hf", "cpu", "bfloat16", 2, []).workers == 2
    assert plan_placement("hf", "cpu", "auto", "auto", two).workers == 1
    errors = {
        ("hf", "cuda", "auto", 1, ()): "--device cuda: no CUDA GPU is visible",
        ("hf", "cuda:2", "auto", 1, two): "cuda:0 to cuda:1",
        ("hf", "gpu", "auto", 1, two): "not one of auto, cpu, cuda, cuda:N",
        ("hf", "auto", "float16", 1, ()): "--dtype float16 on CPU",
        ("vllm", "cpu", "float16", 1, two): "--dtype float16 on CPU",
        ("hf", "cpu", "float64", 1, ()): "not one of auto, bfloat16",
        ("hf", "cuda", "auto", 3, two): "only 2 GPU(s) are visible",
        ("hf", "cuda:1", "auto", 2, two): "the workers take cuda:0 to cuda:1",
        ("hf", "cpu", "auto", "0", ()): "--data-parallel '0'",
        ("hf", "cpu", "auto", "many", ()): "--data-parallel 'many'",
        ("tgi", "cpu", "auto", 1, ()): "--engine 'tgi'",
    }
    for args, message in errors.items():
        with pytest.raises(BenchmarkError, match=message.replace("(", r"\(").replace(")", r"\)")):
            plan_placement(*args[:4], list(args[4]))


def test_dtype_alias(capsys):
    assert effective_dtype("bfloat16", None) == "bfloat16"
    assert effective_dtype("auto", "float32") == "float32"
    assert "--vllm-dtype is deprecated" in capsys.readouterr().err
    with pytest.raises(BenchmarkError, match="disagree"):
        effective_dtype("bfloat16", "float32")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is visible here")
def test_cli_device_and_dtype_errors_come_before_the_model_loads(tmp_path, gsm8k_dir, capsys):
    missing = str(tmp_path / "no-such-checkpoint")  # loading it would be the other error
    for extra, message in ((["--device", "cuda"], "--device cuda: no CUDA GPU is visible"),
                           (["--dtype", "float16"], "--dtype float16 on CPU"),
                           (["--data-parallel", "x"], "--data-parallel 'x'")):
        assert main(_argv(missing, gsm8k_dir, tmp_path / "o", *extra)) == 2
        err = capsys.readouterr().err
        assert message in err and "could not be loaded" not in err


def test_bfloat16_on_cpu_loads_in_bfloat16(sharp_qwen2):
    import torch

    from vlcohort.eval.generation import _load

    adapter, model = _load(sharp_qwen2, plan_placement("hf", "cpu", "bfloat16", 1, []))
    assert next(model.parameters()).dtype == torch.bfloat16
    generate, _ = text_generator(EvalSettings([sharp_qwen2], ["gsm8k"], Path("."), Path("."),
                                              max_new_tokens=3), adapter, model)
    assert len(generate([adapter.render(Problem("p", "find x", [], None, "1", "t"))])) == 1


# --------------------------------------------------------------------------- batching


def test_shard_and_length_order_are_deterministic():
    assert [shard(list(range(7)), i, 3) for i in range(3)] == [[0, 3, 6], [1, 4], [2, 5]]
    assert length_order([5, 9, 5, 1, 9]) == [1, 4, 0, 2, 3]


def test_length_sorted_batches_give_the_same_greedy_texts(tmp_path, sharp_qwen2, gsm8k_dir,
                                                          reference):
    """The same items through length-sorted batches: every greedy text as in input order,
    and batches really sorted (longest first), and the same items.jsonl, line for line."""
    from vlcohort.eval.runner import load_all
    from vlcohort.processors import adapter_for

    data = load_all(["gsm8k"], gsm8k_dir, None)
    settings = EvalSettings([sharp_qwen2], ["gsm8k"], gsm8k_dir, tmp_path, max_new_tokens=6,
                            batch_size=3, progress=False, device="cpu")
    adapter = adapter_for(sharp_qwen2)
    model = adapter.load_model()
    generate, _ = text_generator(settings, adapter, model)
    batches: list[list[int]] = []

    def measured(rendered):  # the real generate, with each batch's prompt lengths noted
        batches.append([prompt_tokens(adapter, r) for r in rendered])
        return generate(rendered)

    todo = [("gsm8k", p, 0) for p in data["gsm8k"].problems]
    result = generate_shard(settings, sharp_qwen2, todo, adapter, measured,
                            tmp_path / "items.part0.jsonl")
    assert result.written == N_ITEMS and not result.skipped
    flat = [n for b in batches for n in b]
    in_order = [prompt_tokens(adapter, adapter.render(p, settings.system_prompt, PROMPTS["boxed"]))
                for _, p, _ in todo]
    assert flat == sorted(in_order, reverse=True) and flat != in_order
    merge_parts(tmp_path / "items.jsonl",
                {("gsm8k", p.id, sharp_qwen2, 0): i for i, (_, p, _) in enumerate(todo)})
    got, want = _responses(tmp_path), _responses(reference)
    assert list(got) == list(want)  # canonical order in the file, whatever the batching
    assert [k for k in want if got[k] != want[k]] == []  # item by item
    assert not (tmp_path / "items.part0.jsonl").exists()


def test_unsorted_setting_batches_in_input_order(tmp_path, sharp_qwen2, gsm8k_dir, reference):
    out = tmp_path / "o"
    settings = EvalSettings([sharp_qwen2], ["gsm8k"], gsm8k_dir, out, max_new_tokens=6,
                            batch_size=3, progress=False, device="cpu", length_sorted=False)
    from vlcohort.eval.generation import run_generation
    from vlcohort.eval.runner import load_all

    out.mkdir()
    assert run_generation(settings, load_all(["gsm8k"], gsm8k_dir, None), out / "items.jsonl") == N_ITEMS
    assert (out / "items.jsonl").read_text() == (reference / "items.jsonl").read_text()


# --------------------------------------------------------------------------- data parallel


def test_two_workers_on_cpu_match_one(tmp_path, sharp_qwen2, gsm8k_dir, reference, capsys):
    out = tmp_path / "dp2"
    assert main(_argv(sharp_qwen2, gsm8k_dir, out, "--data-parallel", "2")) == 0
    assert f"generated {N_ITEMS} new responses" in capsys.readouterr().err
    assert (out / "items.jsonl").read_text() == (reference / "items.jsonl").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["items.jsonl", "summary.json", "summary.md"]


def _part_lines(out: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in out.glob("items.part*.jsonl"))


def test_a_killed_run_resumes_from_its_part_files(tmp_path, sharp_qwen2, gsm8k_dir, reference,
                                                  capsys):
    """Kill a two-worker run (the whole process group, SIGKILL) once its workers have
    written some lines, cut a part file's last line in half as a kill mid-write would,
    then rerun: the parts are merged, the cut line is dropped with a warning, only what
    is missing is generated, and the result is the uninterrupted run's."""
    out = tmp_path / "killed"
    argv = _argv(sharp_qwen2, gsm8k_dir, out, "--batch-size", "1", "--data-parallel", "2")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "killed.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "vlcohort", *argv], cwd=ROOT, env=env,
                            start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while _part_lines(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its two workers (our own group)
    except ProcessLookupError:  # it finished first: the assertion below says so
        pass
    proc.wait()
    kept = _part_lines(out)
    log.seek(0)
    assert 3 <= kept < N_ITEMS and not (out / "items.jsonl").exists(), log.read()[-2000:]
    part = max(out.glob("items.part*.jsonl"), key=lambda p: len(p.read_bytes()))
    data = part.read_bytes()
    cut_line = data.count(b"\n")  # the last complete line, cut in half
    part.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1] + data.splitlines()[-1][:25])
    capsys.readouterr()
    assert main(argv[:-2]) == 0  # resumed by one worker: the parts merge whatever the count
    err = capsys.readouterr().err
    assert f"{part}: line {cut_line}: truncated final line dropped" in err
    assert f"merged {kept - 1} responses" in err
    assert f"generated {N_ITEMS - (kept - 1)} new responses" in err
    assert _responses(out) == _responses(reference)  # item by item; each key once
    assert not list(out.glob("items.part*"))


def test_merge_skips_what_is_already_there(tmp_path):
    """A crash between a merge's append and its deletion of the parts: the next merge
    appends only the missing records, in canonical order."""
    def rec(i):
        return {"benchmark": "b", "id": str(i), "model": "m", "sample": 0, "response": i}
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps(rec(1)) + "\n")
    (tmp_path / "items.part0.jsonl").write_text("".join(json.dumps(rec(i)) + "\n" for i in (2, 1)))
    (tmp_path / "items.part1.jsonl").write_text(json.dumps(rec(0)) + "\n")
    order = {("b", str(i), "m", 0): i for i in range(3)}
    assert merge_parts(items, order) == 2
    assert [json.loads(x)["id"] for x in items.read_text().splitlines()] == ["1", "0", "2"]
    assert merge_parts(items, order) == 0 and not list(tmp_path.glob("items.part*"))


# --------------------------------------------------------------------------- bad input


def test_truncated_final_line_is_dropped_other_bad_lines_are_errors(tmp_path, capsys):
    good = json.dumps({"benchmark": "b", "id": "1", "model": "m", "sample": 0}) + "\n"
    f = tmp_path / "items.jsonl"
    f.write_text(good + good.replace('"1"', '"2"') + '{"benchmark": "b", "id": "3", "mo')
    assert [r["id"] for r in read_resumable(f)] == ["1", "2"]
    assert f"{f}: line 3: truncated final line dropped" in capsys.readouterr().err
    assert f.read_text() == good + good.replace('"1"', '"2"')
    f.write_text(good + good.rstrip("\n"))  # complete, only its newline missing: kept
    assert drop_truncated_tail(f) is None and f.read_text() == good + good
    f.write_text(good + '{"id": \n' + good)
    with pytest.raises(BenchmarkError, match=r"items.jsonl: line 2: malformed JSON"):
        read_resumable(f)
    f.write_text(good + '{"id": \n')  # a newline after it: not a kill's trace
    with pytest.raises(BenchmarkError, match=r"items.jsonl: line 2: malformed JSON"):
        read_resumable(f)


def _vista_dir(tmp_path: Path) -> Path:
    """Three MathVista-format items; image 1 is there but is not an image."""
    d = tmp_path / "bench"
    (d / "images").mkdir(parents=True)
    for i, colour in enumerate(["red", "blue", "green"]):
        Image.new("RGB", (64, 48), colour).save(d / "images" / f"{i}.png")
    (d / "images" / "1.png").write_bytes(b"not a png at all")  # there, but not an image
    vista = {str(i): {"pid": str(i), "question": f"What colour? ({i})", "image": f"images/{i}.png",
                      "choices": ["red", "blue", "green"], "unit": None, "precision": None,
                      "answer": c, "question_type": "multi_choice", "answer_type": "text",
                      "metadata": {"task": "colour", "category": "general-vqa"}}
             for i, c in enumerate(["red", "blue", "green"])}
    (d / "mathvista_testmini.json").write_text(json.dumps(vista))
    return d


def test_unreadable_image_at_render_time_is_a_skipped_item(tmp_path, capsys, cache_dir,
                                                           monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(cache_dir))
    d, out = _vista_dir(tmp_path), tmp_path / "out"
    argv = ["eval", "--model", "tiny:qwen2_5_vl", "--benchmark", "mathvista", "--data-dir",
            str(d), "--out", str(out), "--max-new-tokens", "3", "--no-progress"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "mathvista: skipped 1 item(s) at render time; first: 1 (image_unreadable" in err
    assert str(d / "images" / "1.png") in err and "mathvista_testmini.json" in err
    assert sorted(_responses(out)) == [("mathvista", "0", "tiny:qwen2_5_vl", 0),
                                       ("mathvista", "2", "tiny:qwen2_5_vl", 0)]
    vista_summary = json.loads((out / "summary.json").read_text())["benchmarks"]["mathvista"]
    assert vista_summary["skipped"] == {"image_unreadable": 1}
    assert vista_summary["skipped_ids"] == ["1"] and vista_summary["n_items"] == 2


def test_images_for_a_text_only_model_are_an_error_not_skips(tmp_path, sharp_qwen2, capsys):
    """Every item would be skipped: that is the wrong model, said at once."""
    d = _vista_dir(tmp_path)
    assert main(["eval", "--model", sharp_qwen2, "--benchmark", "mathvista", "--data-dir",
                 str(d), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "mathvista_testmini.json" in err and "is a text-only model" in err


def test_an_overlong_prompt_is_a_skipped_item(tmp_path, sharp_qwen2, capsys):
    """``--max-prompt-tokens``: the long item is skipped and counted as ``prompt_too_long``,
    the others are generated; a negative limit is one line before any model loads."""
    d = tmp_path / "data"
    d.mkdir()
    rows = [{"question": _question(i), "answer": f"so {i}\n#### {i}"} for i in range(3)]
    rows[1]["question"] = "seven " * 2000
    (d / "gsm8k_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(_argv(sharp_qwen2, d, out, "--max-prompt-tokens", "512")) == 0
    err = capsys.readouterr().err
    assert "gsm8k: skipped 1 item(s) at render time; first: 1 (prompt_too_long" in err
    assert sorted(k[1] for k in _responses(out)) == ["0", "2"]
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["gsm8k"]
    assert summary["skipped"] == {"prompt_too_long": 1}
    assert main(_argv(sharp_qwen2, d, tmp_path / "o2", "--max-prompt-tokens", "-1")) == 2
    assert "--max-prompt-tokens -1: give a number of tokens > 0" in capsys.readouterr().err
