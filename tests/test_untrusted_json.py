"""JSON from outside is read within bounds (``vlcohort.bounded_json``): a record holding a
5,000-digit number, nested 100,000 deep, or longer than the line bound is one skipped,
counted record in training data and one line of error in a responses file; it never
costs the rest of the file and never reaches the user as a traceback.

Before the bounds, ``json.loads`` raised ``ValueError`` (the digits) or ``RecursionError``
(the nesting) past every loader's ``except JSONDecodeError`` and the whole load crashed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from vlcohort import bounded_json
from vlcohort.bounded_json import BadJSON
from vlcohort.cli import main
from vlcohort.data.problems import load_problems_from
from vlcohort.monitoring.metrics import read_metrics

GSM8K = Path(__file__).parent / "data" / "real_gsm8k"  # golds 72, 10, 42
DIGITS = "7" * 5000
DEEP = "[" * 100_000 + "]" * 100_000


# ----------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("text, phrase", [
    (f'{{"a": {DIGITS}}}', "a number of 5000 digits (at most 1000)"),
    (f'{{"a": -{DIGITS}}}', "a number of 5000 digits"),
    (DEEP, "nested deeper than 100 levels"),
    ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
    ('{"a": ' * 101 + "1" + "}" * 101, "nested deeper than 100 levels"),
    ('{"a": [1, 2', "not JSON (Expecting ',' delimiter at column 12)"),
    (b'{"a": "\xff"}', "not UTF-8 (byte 0xff at offset 7)"),
])
def test_each_bound_is_one_phrase(text, phrase):
    with pytest.raises(BadJSON) as e:
        bounded_json.loads(text)
    assert str(e.value) == phrase or phrase in str(e.value)
    assert isinstance(e.value, ValueError)


def test_within_the_bounds_it_is_json_loads():
    for text in ['{"a": [1, 2.5, "x", null, true]}', "[" * 100 + "]" * 100, f'"{DIGITS}"',
                 "1" * 1000, "1." + "5" * 5000, "NaN", '{"a": 1e999}']:
        got, want = bounded_json.loads(text), json.loads(text)
        assert got == want or (got != got and want != want)  # NaN
    with pytest.raises(BadJSON, match=r"JSON text of 11 characters \(at most 10\)"):
        bounded_json.loads('"123456789"', max_chars=10)


def test_a_line_past_the_bound_is_read_past_not_held():
    f = io.StringIO('{"a": 1}\n' + "x" * 100 + "\n" + "y" * 25 + '\n{"b": 2}')
    got = list(bounded_json.numbered_lines(f, max_chars=20))
    assert got == [(1, '{"a": 1}\n'), (2, None), (3, None), (4, '{"b": 2}')]
    b = io.BytesIO(b"ab\n" + b"c" * 50)
    assert list(bounded_json.numbered_lines(b, max_chars=10)) == [(1, b"ab\n"), (2, None)]


# ------------------------------------------------------------------ training records


def _record(i: int, **kw) -> str:
    return json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1), **kw})


def _data(path: Path) -> Path:
    path.write_text("\n".join([
        _record(0),
        f'{{"id": "q1", "question": "big", "answer": {DIGITS}}}',
        _record(2),
        f'{{"id": "q3", "question": "deep", "answer": {DEEP}}}',
        _record(4),
        f'{{"id": "q5", "question": "{"z" * (bounded_json.MAX_CHARS + 10)}"}}',
        _record(6),
    ]) + "\n")
    return path


def test_bad_records_are_skipped_and_named_the_rest_loads(tmp_path):
    path = _data(tmp_path / "train.jsonl")
    problems, report = load_problems_from(str(path))
    assert [p.id for p in problems] == ["q0", "q2", "q4", "q6"]
    assert report.skipped == {"malformed_line": 3}
    text = report.summary()
    assert f"{path}, line 2, JSON with a number of 5000 digits" in text
    assert f"{path}, line 4, JSON nested deeper than 100 levels" in text
    assert f"{path}, line 6, a line of more than {bounded_json.MAX_CHARS} characters" in text


def test_vlcohort_train_runs_on_the_good_records(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    path = _data(tmp_path / "train.jsonl")
    run = tmp_path / "run"
    assert main(["train", "agents=[{name: A, path: 'tiny:qwen2'}]", "method=gt_reward",
                 "data.source=file", f"data.path={path}", "data.max_bad_fraction=0.5",
                 "arms=[]", "eval.every=0", "run.steps=1", "rollout.prompts_per_step=2",
                 "rollout.rollouts_per_prompt=2", "rollout.max_new_tokens=4", "log.plot=false",
                 "log.tensorboard=false", f"run.output_dir={run}"]) == 0
    assert "skipped 3 (malformed_line=3)" in capsys.readouterr().err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1]


# ------------------------------------------------------------------------ responses


@pytest.mark.parametrize("line, phrase", [
    (f'{{"id": "0", "response": "72", "n": {DIGITS}}}', "JSON with a number of 5000 digits"),
    (f'{{"id": "0", "response": {DEEP}}}', "JSON nested deeper than 100 levels"),
])
def test_a_responses_line_past_the_bounds_is_one_line_error(tmp_path, capsys, line, phrase):
    r = tmp_path / "r.jsonl"
    r.write_text('{"id": "1", "response": "10"}\n' + line + "\n")
    code = main(["eval", "score", "--benchmark", "gsm8k", "--data", str(GSM8K),
                 "--responses", str(r)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().startswith(f"error: {r}: line 2: {phrase}"), err
    assert len(err.strip().splitlines()) == 1 and "one JSON object" in err


# ------------------------------------------------------------------------- run files


def test_a_metrics_line_past_the_bounds_is_one_line_error(tmp_path, capsys):
    """``vlcohort plot`` reads runs it did not write (a colleague's, a download)."""
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text('{"step": 1}\n' + f'{{"step": {DIGITS}}}\n' + '{"step": 3}\n')
    assert main(["plot", str(path.parent), "--out", str(tmp_path / "p.png")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}, line 2: JSON with a number of 5000 digits"), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("header, phrase", [
    (DEEP.encode(), "nested deeper than 100 levels"),
    (b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + DIGITS.encode() + b"]}}",
     "a number of 5000 digits"),
    (b"[1, 2, 3]", "has no attribute 'items'"),
    (b'{"w": {"dtype": "F32"}}', "data_offsets"),
])
def test_a_damaged_safetensors_header_is_a_problem_not_a_crash(tmp_path, header, phrase):
    """A checkpoint to resume from may come from elsewhere: its weights' headers are read
    within the bounds, and any header that is not the format is named, not raised."""
    from vlcohort.training.checkpoint import verify_checkpoint

    weights = tmp_path / "step-1" / "A" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    [problem] = verify_checkpoint(tmp_path / "step-1")
    assert problem.startswith(f"{weights}: unreadable safetensors header") and phrase in problem
