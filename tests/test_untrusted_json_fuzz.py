"""Fuzz the host-side parsers of what comes from outside: a program's output and result
channel, training data lines, responses files and judge replies.

What must hold for *any* input: no exception escapes but the project's own (a
:class:`~vlcohort.bounded_json.BadJSON` / ``ValueError`` the caller turns into a skipped
record, a :class:`~vlcohort.eval.datasets.BenchmarkError` of one line), and a failed case
is a verdict, never a raise. Inputs are arbitrary bytes, JSON values, and strings built
from a token alphabet weighted toward what broke the parsers before: long digit runs,
deep brackets, NaN spellings, newlines.

Examples come from hypothesis with a fixed derandomised seed and no example database, so
a run is reproducible and leaves nothing behind.
"""

from __future__ import annotations

import json

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402 - after importorskip
from hypothesis import strategies as st  # noqa: E402 - after importorskip

from vlcohort import bounded_json  # noqa: E402 - after importorskip
from vlcohort.code.checks import (  # noqa: E402 - after importorskip
    functional_output_matches,
    parse_side,
    stdin_output_matches,
)
from vlcohort.data.problems import (  # noqa: E402 - after importorskip
    _jsonl_record,
    code_tests_field,
    parse_options_field,
)
from vlcohort.eval.datasets import BenchmarkError, read_jsonl  # noqa: E402 - after importorskip
from vlcohort.eval.judge import reply_output  # noqa: E402 - after importorskip

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TOKENS = ["[", "]", "{", "}", '"', ":", ",", " ", "\n", "\\", "-", ".", "e", "E", "+",
          "0", "7", "1" * 40, "9" * 1200, "5" * 5000, "[" * 150, "[" * 3000, "{\"a\":" * 150,
          "NaN", "sNaN", "-sNaN", "Infinity", "-Infinity", "nan", "inf", "true", "null",
          '"ok"', '"i"', '"out"', '"load"', '"json"', '"error"', "\x00", "\ud800", "é",
          '{"load": true}\n', '{"i": 0, "ok": true, "out": "1", "error": ""}\n']

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=20)
texts = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=30).map("".join),
    json_values.map(json.dumps),
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
)
raw = st.one_of(st.binary(max_size=300), texts.map(lambda t: t.encode("utf-8", "surrogatepass")))


@FUZZ
@given(texts)
def test_bounded_loads_raises_only_bad_json(text):
    try:
        bounded_json.loads(text)
    except bounded_json.BadJSON as e:
        assert "\n" not in str(e) and len(str(e)) < 300


@FUZZ
@given(texts, texts)
def test_program_output_parsers_never_raise(out, expected):
    load, cases, stop = parse_side(out)
    assert isinstance(cases, list) and isinstance(stop, str) and "\n" not in stop
    ok, why = stdin_output_matches(out, expected)
    assert isinstance(ok, bool) and "\n" not in why
    ok, _ = functional_output_matches({"i": 0, "ok": True, "out": out, "json": True,
                                       "error": ""}, expected)
    assert isinstance(ok, bool)


@FUZZ
@given(texts)
def test_data_line_parsers_skip_never_raise(line):
    record, why = _jsonl_record(line)
    assert (record is None) == bool(why) and "\n" not in why
    assert parse_options_field(line) is None or isinstance(parse_options_field(line), list)
    try:
        code_tests_field(line)
    except ValueError as e:  # the loader skips and counts the record
        assert str(e)


@FUZZ
@given(st.lists(raw, max_size=4))
def test_responses_files_are_read_or_one_line_errors(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("r") / "responses.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        for _, obj in read_jsonl(path):
            assert isinstance(obj, dict)
    except BenchmarkError as e:
        assert "\n" not in str(e) and str(e).startswith(str(path))


@FUZZ
@given(raw)
def test_judge_replies_are_text_or_value_errors(body):
    try:
        assert isinstance(reply_output(body), str)
    except ValueError as e:
        assert str(e)
