"""``vlcohort eval score`` given bad inputs, through the real CLI: each is one line on
stderr naming the file (and line / record) and the fix, exit 2, no traceback; a response
that is not valid Unicode text is scored as wrong and the rest of the run is written.

No model is needed: GSM8K's three published test items (tests/data/real_gsm8k) are scored
from small responses files written here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vlcohort.cli import main
from vlcohort.eval.runner import read_items

GSM8K = Path(__file__).parent / "data" / "real_gsm8k"  # golds 72, 10, 42
ROOT = Path(__file__).resolve().parents[1]


def _score(capsys, responses, *extra) -> tuple[int, str, str]:
    code = main(["eval", "score", "--benchmark", "gsm8k", "--data", str(GSM8K),
                 "--responses", str(responses), *map(str, extra)])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str, *needles: str) -> str:
    """The message: exit 2, one line, no traceback, each needle in it."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _lines(path: Path, *lines: str | bytes) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


@pytest.mark.parametrize("value, kind", [('["72", "10"]', "a list"), ("72", "a number"),
                                         ('{"text": "72"}', "an object")])
def test_a_response_that_is_not_a_string(tmp_path, capsys, value, kind):
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}',
               f'{{"id": "1", "response": {value}}}')
    code, out, err = _score(capsys, r)
    _one_line_error(code, err, f"{r}: line 2 (id '1'): 'response' is {kind}, not a string",
                    '"sample": 0, 1')
    assert out == ""


def test_a_missing_or_folder_responses_file(tmp_path, capsys):
    for path, what in ((tmp_path / "nope.jsonl", "no such file"),
                       (tmp_path, "is a folder")):
        code, _, err = _score(capsys, path)
        _one_line_error(code, err, f"--responses {path}: {what}", "give the JSONL file")


def test_a_lone_surrogate_is_scored_wrong_and_the_run_is_written(tmp_path, capsys):
    """``"\\ud800"`` is valid JSON but not Unicode text. The answer is wrong (counted in
    the denominator, with its reason), the other answers are scored, and items.jsonl and
    the summary are written and read back; a re-score keeps the verdict."""
    out = tmp_path / "out"
    r = _lines(tmp_path / "r.jsonl",
               r'{"id": "0", "response": "\\boxed{72} \ud83d"}',  # right, cut mid-emoji
               r'{"id": "1", "response": "The answer is \\boxed{10}"}',
               r'{"id": "2", "response": "\udc00\\boxed{42}"}')
    code, stdout, err = _score(capsys, r, "--out", out, "--json")
    assert code == 0 and "Traceback" not in err, err
    assert f"{r}: 2 response(s) not valid Unicode text, scored as wrong" in err
    summary = json.loads(stdout)
    gsm = summary["benchmarks"]["gsm8k"]
    assert gsm["invalid_responses"] == 2 and gsm["models"]["responses"]["n_scored"] == 3
    assert gsm["models"]["responses"]["maj"] == pytest.approx(1 / 3)
    items = {rec["id"]: rec for rec in read_items(out / "items.jsonl")}
    assert items["1"]["correct"] is True and "invalid_response" not in items["1"]
    for pid, kept in (("0", "\\boxed{72} \ufffd"), ("2", "\ufffd\\boxed{42}")):
        assert items[pid]["correct"] is False and items[pid]["response"] == ""
        assert "lone surrogate" in items[pid]["invalid_response"]
        assert items[pid]["invalid_response_text"] == kept
    assert json.loads((out / "summary.json").read_text()) == summary
    # the saved run re-scores to the same verdicts
    assert main(["eval", "score", "--data", str(GSM8K), "--out", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["benchmarks"]["gsm8k"]["models"] == gsm["models"]


def test_a_lone_surrogate_in_a_hand_edited_items_file(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    _lines(out / "items.jsonl",
           r'{"benchmark": "gsm8k", "id": "0", "model": "m", "response": "\\boxed{72}\udfff"}')
    assert main(["eval", "score", "--data", str(GSM8K), "--out", str(out), "--json"]) == 0
    assert "scored as wrong" in capsys.readouterr().err
    (rec,) = read_items(out / "items.jsonl")
    assert rec["correct"] is False and rec["invalid_response_text"] == "\\boxed{72}\ufffd"


def test_a_file_that_is_not_utf8(tmp_path, capsys):
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}',
               b'{"id": "1", "response": "caf\xe9 10"}')  # Latin-1, as a Windows editor saves
    code, _, err = _score(capsys, r)
    _one_line_error(code, err, f"{r}: line 2: not UTF-8 text (byte 0xe9", "save the file as UTF-8")


def test_a_byte_order_mark_is_allowed(tmp_path, capsys):
    r = _lines(tmp_path / "r.jsonl", b'\xef\xbb\xbf{"id": "0", "response": "\\\\boxed{72}"}')
    code, out, err = _score(capsys, r, "--json")
    assert code == 0, err
    assert json.loads(out)["benchmarks"]["gsm8k"]["models"]["responses"]["maj"] == 1.0


def test_a_truncated_last_line(tmp_path, capsys):
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}')
    with open(r, "a") as f:
        f.write('{"id": "1", "respo')  # the writer was killed mid-line
    code, _, err = _score(capsys, r)
    _one_line_error(code, err, f"{r}: line 2: malformed JSON", "one JSON object")


def test_a_repeated_id_and_sample(tmp_path, capsys):
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}',
               '{"id": "1", "response": "10"}', '{"id": 0, "response": "73"}')
    code, _, err = _score(capsys, r)
    _one_line_error(code, err, f"{r}: line 3: id '0' sample 0 repeats line 1",
                    'its own "sample" number')
    # distinct samples of one item are what samples are
    r = _lines(tmp_path / "r2.jsonl", '{"id": "0", "sample": 0, "response": "72"}',
               '{"id": "0", "sample": 1, "response": "73"}')
    code, out, err = _score(capsys, r, "--json")
    assert code == 0, err
    assert json.loads(out)["benchmarks"]["gsm8k"]["models"]["responses"]["mean"] == 0.5


@pytest.mark.parametrize("line, needle", [
    ('{"id": "0", "sample": "first", "response": "72"}', "'sample' must be a whole number"),
    ('{"id": "0", "sample": -1, "response": "72"}', "'sample' must be a whole number"),
    ('{"response": "72"}', "no 'id' field"),
    ('{"id": ["0"], "response": "72"}', "'id' is a list"),
    ('{"id": "0"}', "no 'response' field"),
])
def test_bad_fields_name_the_line(tmp_path, capsys, line, needle):
    r = _lines(tmp_path / "r.jsonl", line)
    code, _, err = _score(capsys, r)
    _one_line_error(code, err, f"{r}: line 1", needle)


def test_a_repeated_record_in_items_jsonl(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    rec = '{"benchmark": "gsm8k", "id": "0", "model": "m", "response": "72"}'
    _lines(out / "items.jsonl", rec, rec)
    code = main(["eval", "score", "--data", str(GSM8K), "--out", str(out)])
    _one_line_error(code, capsys.readouterr().err, f"{out / 'items.jsonl'}: line 2",
                    "repeats line 1")


def test_out_that_is_a_file_or_holds_a_folder_for_items(tmp_path, capsys):
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}')
    (tmp_path / "afile").write_text("x")
    code, _, err = _score(capsys, r, "--out", tmp_path / "afile")
    _one_line_error(code, err, f"--out {tmp_path / 'afile'}: is a file", "give a folder")
    (tmp_path / "run" / "items.jsonl").mkdir(parents=True)
    code, _, err = _score(capsys, r, "--out", tmp_path / "run")
    _one_line_error(code, err, "items.jsonl is a folder", "choose another --out")


def test_a_benchmark_file_that_is_not_utf8(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(GSM8K / "gsm8k_test.jsonl", data)
    with open(data / "gsm8k_test.jsonl", "ab") as f:
        f.write(b'{"question": "\xff", "answer": "#### 1"}\n')
    r = _lines(tmp_path / "r.jsonl", '{"id": "0", "response": "72"}')
    code = main(["eval", "score", "--benchmark", "gsm8k", "--data", str(data),
                 "--responses", str(r)])
    _one_line_error(code, capsys.readouterr().err, "gsm8k_test.jsonl: line 4: not UTF-8")


def test_through_a_subprocess_the_exit_code_and_stderr_are_the_users(tmp_path):
    """``python -m vlcohort eval score``, as a user runs it: a list response and a lone
    surrogate in one run, then the list fixed."""
    r = _lines(tmp_path / "r.jsonl", r'{"id": "0", "response": "\ud800"}',
               '{"id": "1", "response": [10]}')
    cmd = [sys.executable, "-m", "vlcohort", "eval", "score", "--benchmark", "gsm8k",
           "--data", str(GSM8K), "--responses", str(r), "--out", str(tmp_path / "out")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    _one_line_error(p.returncode, p.stderr, "line 2 (id '1'): 'response' is a list")
    _lines(r, r'{"id": "0", "response": "\ud800"}', '{"id": "1", "response": "\\\\boxed{10}"}')
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert [rec["correct"] for rec in read_items(tmp_path / "out" / "items.jsonl")] == [False, True]
