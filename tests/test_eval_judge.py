"""The judge for the official GPT steps (eval/judge.py) and the runner's judge pass, end to
end: a real tiny local model as the judge, and a real OpenAI-compatible server
(``transformers serve``) on loopback, over MathVerse / MathVista records built from the
real annotation files. The tiny models answer garbage; what is checked is the path: the
official prompts sent, the outputs cached under the prompt hash and judge id, the judged
verdicts recorded beside the rule-based ones, and a re-score that asks the judge nothing.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vlcohort.cli import main
from vlcohort.eval.judge import JudgeError, LocalJudge, OpenAIJudge, make_judge
from vlcohort.eval.official import mathverse, mathvista
from vlcohort.eval.runner import prompt_sha256, read_items, rescore_items

# MathVerse Text-Only items 1-3 (gold D, C, A) and MathVista testmini pids 1-3 (float
# 1.2, integer 1000, multiple choice 145°): hand-written replies, some right, some not
VERSE = [("1", "The angle is 140°, so the answer is D."),
         ("2", "By the inscribed angle theorem the answer is (B) 60°."),
         ("3", "A")]
VISTA = [("1", "The length is 1.2 cm, so the answer is 1.2."),  # needs the GPT extraction
         ("2", "1000"),  # integer item, a bare integer: the official quick extraction
         ("3", "145°")]  # one option's text: the official quick extraction


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.fixture(scope="session")
def tiny_text_model(tmp_path_factory) -> Path:
    """The tiny:qwen2 folder in the same cache the autouse fixture points specs at."""
    from vlcohort.processors.tiny import tiny_model_path

    return tiny_model_path("tiny:qwen2", cache_dir=tmp_path_factory.getbasetemp()
                           / "vlcohort-cache" / "tiny")


@pytest.fixture
def data_dir(benchmark_file) -> Path:
    benchmark_file("mathverse_testmini_text_only.json")
    benchmark_file("mathvista_query_testmini_and_test.json")
    return benchmark_file("mathvista_testmini.json").parent


def _responses(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"id": i, "response": r}) + "\n" for i, r in rows))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- local judge


def test_local_tiny_judge_end_to_end_and_free_rescore(tmp_path, data_dir, capsys):
    out = tmp_path / "out"
    r = _responses(tmp_path / "r.jsonl", VERSE)
    argv = ["eval", "score", "--benchmark", "mathverse", "--data", str(data_dir),
            "--responses", str(r), "--out", str(out), "--judge", "tiny:qwen2",
            "--judge-max-tokens", "4", "--scorer", "official", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    # stdout is the summary alone (what loading the judge model prints goes to stderr)
    summary = json.loads(captured.out)
    assert json.loads((out / "summary.json").read_text()) == summary
    judge_id = "local:tiny:qwen2:max_tokens=4"
    assert summary["judge"] == judge_id
    assert "stage 1: 3 prompt(s)" in captured.err  # every MathVerse reply goes to the judge
    items = read_items(out / "items.jsonl")
    assert [i["id"] for i in items] == ["1", "2", "3"]
    for rec, (_, response) in zip(items, VERSE):
        # the rule-based official fields stay, the judged ones are beside them
        assert rec["official_rule"] == "grader_no_judge"
        assert {"judged_prediction", "judged_correct", "judged_rule"} <= rec.keys()
        extract = rec["judge"]["extract"]
        assert extract["judge"] == judge_id
        assert extract["prompt_sha256"] == prompt_sha256(mathverse.extract_prompt(response))
        # the second step's prompt is built from the first step's (cached) output
        score = rec["judge"].get("score")
        if score is not None:
            p = mathverse.score_prompt(_verse_question(data_dir, rec["id"]),
                                       _verse_answer(data_dir, rec["id"]),
                                       mathverse.parse_extraction(extract["output"]))
            assert score["prompt_sha256"] == prompt_sha256(p)
            if rec["judged_rule"] == "judge":
                assert rec["judged_correct"] == (score["output"].strip() == "1")
            else:  # a tiny model's garbage is not the official 0/1: wrong, with the reason
                assert rec["judged_rule"] == "error" and "accepts only 0 or 1" in rec["judged_error"]
        else:
            assert rec["judged_rule"] == "error"
    assert "1" in [i["id"] for i in items if i["correct"]]  # "... the answer is D" (rule-based)
    model = summary["benchmarks"]["mathverse"]["models"]["responses"]
    assert {"maj", "mean", "headline"} <= model["judged"].keys()
    assert model["judged"]["n_scored"] == 3 and model["maj"] == pytest.approx(2 / 3)
    md = (out / "summary.md").read_text()
    assert "responses (judged)" in md and judge_id in md

    # re-score the saved items.jsonl: every step comes from the cache, the judge model
    # is never even loaded, and the verdicts are the same
    judge = LocalJudge("tiny:qwen2", max_tokens=4)
    again = rescore_items(out, data_dir, "official", judge=judge)
    assert judge.calls == 0 and judge._model is None
    assert again["benchmarks"] == summary["benchmarks"]
    assert read_items(out / "items.jsonl") == items
    # the CLI re-score (no --responses): nothing sent either
    assert main(["eval", "score", "--data", str(data_dir), "--out", str(out),
                 "--judge", "tiny:qwen2", "--judge-max-tokens", "4", "--scorer", "official"]) == 0
    captured = capsys.readouterr()
    assert "stage" not in captured.err and "(judged)" in captured.out


def _verse_problem(data_dir, pid):
    from vlcohort.eval.datasets import load_benchmark

    d = load_benchmark("mathverse", data_dir, need_images=False)
    return next(p for p in d.problems if p.id == pid)


def _verse_question(data_dir, pid):
    p = _verse_problem(data_dir, pid)
    return p.meta.get("official_question", p.text)


def _verse_answer(data_dir, pid):
    p = _verse_problem(data_dir, pid)
    return p.meta.get("official_answer", p.gold)


def test_cache_is_used_only_for_the_same_prompt_and_judge(tmp_path, data_dir):
    """A hand-filled cache (the outputs a real GPT would give) decides the judged verdict
    with no call; another judge id, or an output cached for another prompt, is asked."""
    out = tmp_path / "out"
    out.mkdir()
    p = _verse_problem(data_dir, "2")  # gold C
    response = "By the inscribed angle theorem the answer is (B) 60°."
    question, answer = p.meta.get("official_question", p.text), p.meta.get("official_answer", p.gold)
    judge = LocalJudge("tiny:qwen2", max_tokens=2)
    cache = {"extract": {"prompt_sha256": prompt_sha256(mathverse.extract_prompt(response)),
                         "judge": judge.id, "output": "B"},
             "score": {"prompt_sha256": prompt_sha256(mathverse.score_prompt(question, answer, "B")),
                       "judge": judge.id, "output": "Judgement: 0"}}
    rec = {"benchmark": "mathverse", "id": "2", "model": "m", "sample": 0, "response": response,
           "judge": cache}
    (out / "items.jsonl").write_text(json.dumps(rec) + "\n")
    summary = rescore_items(out, data_dir, "official", judge=judge)
    assert judge.calls == 0
    (saved,) = read_items(out / "items.jsonl")
    assert saved["judged_rule"] == "judge" and saved["judged_correct"] is False
    assert saved["judged_prediction"] == "B"
    assert summary["benchmarks"]["mathverse"]["models"]["m"]["judged"]["maj"] == 0.0

    # the cached extraction was for another prompt: both steps are asked again
    saved["judge"]["extract"]["prompt_sha256"] = "0" * 64
    (out / "items.jsonl").write_text(json.dumps(saved) + "\n")
    rescore_items(out, data_dir, "official", judge=judge)
    assert judge.calls >= 1
    (saved,) = read_items(out / "items.jsonl")
    assert saved["judge"]["extract"]["prompt_sha256"] == prompt_sha256(
        mathverse.extract_prompt(response))

    # another judge: its own outputs, nothing taken from the first judge's
    other = LocalJudge("tiny:qwen2", max_tokens=3)
    rescore_items(out, data_dir, "official", judge=other)
    assert other.calls >= 1
    (saved,) = read_items(out / "items.jsonl")
    assert saved["judge"]["extract"]["judge"] == other.id


def test_eval_run_with_a_judge(tmp_path, data_dir, capsys):
    """``vlcohort eval`` (generation) then the judge pass on the generated items."""
    out = tmp_path / "run"
    argv = ["eval", "--model", "tiny:qwen2", "--benchmark", "mathverse", "--data-dir",
            str(data_dir), "--out", str(out), "--limit", "2", "--max-new-tokens", "4",
            "--no-progress", "--judge", "tiny:qwen2", "--judge-max-tokens", "2"]
    assert main(argv) == 0
    items = read_items(out / "items.jsonl")
    assert len(items) == 2 and all("extract" in r["judge"] and "judged_rule" in r for r in items)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["judge"] == "local:tiny:qwen2:max_tokens=2"
    assert "judged" in summary["benchmarks"]["mathverse"]["models"]["tiny:qwen2"]
    capsys.readouterr()
    assert main(argv) == 0  # resumed: no generation, and the judge is asked nothing
    err = capsys.readouterr().err
    assert "generated 0 new responses" in err and "stage" not in err


# --------------------------------------------------------------------------- HTTP judge


@pytest.fixture(scope="session")
def openai_server(tiny_text_model):
    """``transformers serve`` on a free loopback port serving the tiny model folder: the
    base URL and the model name; the server is killed at the end."""
    missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)} (pip install -e '.[dev]')")
    port = _free_port()
    log = open(tiny_text_model.parent / f"serve-{port}.log", "w")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformers.cli.transformers", "serve", str(tiny_text_model),
         "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    import requests

    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited ({proc.returncode}): "
                                   + Path(log.name).read_text()[-2000:])
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("transformers serve did not answer /health in 180 s: "
                                   + Path(log.name).read_text()[-2000:])
            time.sleep(0.5)
        yield base + "/v1", str(tiny_text_model)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_openai_compatible_server_judge(tmp_path, data_dir, openai_server, capsys):
    base, model = openai_server
    out = tmp_path / "out"
    flags = ["--judge", base, "--judge-model", model, "--judge-max-tokens", "4",
             "--judge-concurrency", "3", "--scorer", "official"]
    for bench, rows in (("mathvista", VISTA), ("mathverse", VERSE)):
        r = _responses(tmp_path / f"{bench}.jsonl", rows)
        assert main(["eval", "score", "--benchmark", bench, "--data", str(data_dir),
                     "--responses", str(r), "--out", str(out), *flags]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["judge"] == f"openai:{model}:max_tokens=4"
        assert "judged" in summary["benchmarks"][bench]["models"]["responses"]
    items = {(r["benchmark"], r["id"]): r for r in read_items(out / "items.jsonl")}
    assert len(items) == 6  # the second score kept the first benchmark's records
    vista_problem = {p.id: p for p in _vista(data_dir)}
    one = items[("mathvista", "1")]  # free text: the official GPT extraction prompt was sent
    prompt = mathvista.extraction_prompt(vista_problem["1"].meta["official_query"], VISTA[0][1])
    assert one["judge"]["extract"]["prompt_sha256"] == prompt_sha256(prompt)
    assert one["judged_rule"] == "judge_extraction" and one["official_rule"] == "extraction"
    assert one["official_correct"] is True  # our extraction: 1.2
    for pid, rule in (("2", "quick_number"), ("3", "quick_choice")):
        assert "judge" not in items[("mathvista", pid)]  # the official rules answer first
        assert items[("mathvista", pid)]["judged_rule"] == rule
        assert items[("mathvista", pid)]["judged_correct"] is True
    assert all("extract" in items[("mathverse", i)]["judge"] for i, _ in VERSE)

    # re-score both benchmarks from items.jsonl: no request reaches the server
    judge = make_judge(base, model, max_tokens=4)
    summary = rescore_items(out, data_dir, "official", judge=judge)
    assert judge.calls == 0
    assert set(summary["benchmarks"]) == {"mathvista", "mathverse"}
    assert summary["benchmarks"]["mathvista"]["models"]["responses"]["judged"]["n_scored"] == 3
    # another max_tokens is another judge: asked again, over real HTTP
    judge = make_judge(base, model, max_tokens=2, concurrency=2)
    rescore_items(out, data_dir, "official", judge=judge)
    assert judge.calls >= 4  # mathvista item 1 and the three MathVerse extractions


def _vista(data_dir):
    from vlcohort.eval.datasets import load_benchmark

    return load_benchmark("mathvista", data_dir, need_images=False).problems


def test_connection_error_names_the_url_and_loses_nothing(tmp_path, data_dir, capsys):
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    judge = OpenAIJudge(url, "gpt-x", retries=1, backoff_s=0.01, timeout_s=5)
    with pytest.raises(JudgeError, match=r"127\.0\.0\.1.*/v1/chat/completions.*could not connect"):
        judge.complete(["hello"])
    out = tmp_path / "out"
    r = _responses(tmp_path / "r.jsonl", VERSE)
    assert main(["eval", "score", "--benchmark", "mathverse", "--data", str(data_dir),
                 "--responses", str(r), "--out", str(out), "--judge", url,
                 "--judge-model", "gpt-x", "--judge-retries", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{url}/chat/completions" in err and "Traceback" not in err
    # the responses and the rule-based verdicts are written all the same
    assert [i["id"] for i in read_items(out / "items.jsonl")] == ["1", "2", "3"]


class _Replies(http.server.BaseHTTPRequestHandler):
    """A loopback server whose reply per path is fixed: a non-JSON body, a JSON body with
    no choices, a 404, a 500 (each POST counted), or a proper chat completion."""

    hits: dict[str, int] = {}

    def do_POST(self):  # the http.server hook name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.path.split("/")[1]
        _Replies.hits[kind] = _Replies.hits.get(kind, 0) + 1
        status, body = {
            "html": (200, b"<html>proxy error</html>"),
            "nochoices": (200, b'{"object": "error", "message": "overloaded"}'),
            "missing": (404, b'{"detail": "Not Found"}'),
            "down": (503, b"busy"),
            "ok": (200, json.dumps({"choices": [{"message": {"role": "assistant",
                                                             "content": "Judgement: 1"}}]}).encode()),
        }[kind]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def replies_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replies)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Replies.hits = {}
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_bad_replies_name_the_url(replies_server):
    for kind, pattern in (("html", "malformed reply.*<html>"),
                          ("nochoices", "malformed reply.*choices"),
                          ("missing", "HTTP 404 .*ending in /v1"),
                          ("down", "HTTP 503.*after 3 attempt")):
        url = f"{replies_server}/{kind}"
        judge = OpenAIJudge(url, "m", retries=2, backoff_s=0.01)
        with pytest.raises(JudgeError, match=f"{url}/chat/completions: {pattern}"):
            judge.complete(["q"])
    assert _Replies.hits == {"html": 1, "nochoices": 1, "missing": 1, "down": 3}
    judge = OpenAIJudge(f"{replies_server}/ok", "m", concurrency=4)
    assert judge.complete(["a", "b", "c"]) == ["Judgement: 1"] * 3 and judge.calls == 3


def test_judge_flags_are_checked():
    with pytest.raises(JudgeError, match="--judge-model"):
        make_judge("https://api.openai.com/v1", None)
    with pytest.raises(JudgeError, match="local model"):
        make_judge("tiny:qwen2", "gpt-4o")
    assert isinstance(make_judge("tiny:qwen2"), LocalJudge)


# --------------------------------------------------------------------------- hostile servers
#
# Raw sockets on loopback, each connection answered by a handler written as a hostile or
# broken judge server would answer: dripping bytes, endless bodies, echoed credentials,
# cut replies, lying Content-Length, bytes that are not JSON or not UTF-8, redirects.

SECRET = "sk-test-9f3b2a7c41d8e6a0b5c2d9e8f7a6b5c4"


def _read_request(conn: socket.socket) -> bytes:
    """The whole request (head and Content-Length body) as the client sent it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return data


class _RawServer:
    """A loopback TCP server: each connection's request is read, then ``handler(conn,
    request, server)`` writes whatever it likes. Requests are kept; ``sent`` counts the
    bytes handlers report having sent."""

    def __init__(self, handler, tls: ssl.SSLContext | None = None):
        self.handler, self.requests, self.sent, self.tls = handler, [], 0, tls
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            try:
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                request = _read_request(conn)
                self.requests.append(request)
                self.handler(conn, request, self)
            except OSError:  # the client hung up: what the tests want of it
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def raw_server():
    servers = []

    def start(handler, tls=None):
        servers.append(_RawServer(handler, tls))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _completion(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def _reply(conn, status: str, body: bytes, extra: str = "") -> None:
    conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
                 f"{len(body)}\r\n{extra}Connection: close\r\n\r\n".encode() + body)


def _drip(data: bytes, conn, server, every_s: float = 1.0) -> None:
    for i in range(len(data)):
        if server.stop.is_set():
            return
        conn.sendall(data[i:i + 1])
        server.sent += 1
        time.sleep(every_s)


def test_a_dripping_server_is_cut_off_at_the_deadline(raw_server):
    """A server that would take a minute (one byte a second, in the headers or in the
    body) gets a wall-clock deadline of 2 s per attempt, not 2 s per socket read."""
    body = _completion("Judgement: 1")
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    in_head = raw_server(lambda c, r, s: _drip(head + body, c, s))
    in_body = raw_server(lambda c, r, s: (c.sendall(head), _drip(body + b" " * 60, c, s)))
    for server in (in_head, in_body):
        judge = OpenAIJudge(server.url, "m", timeout_s=2, retries=1, backoff_s=0.01)
        start = time.monotonic()
        with pytest.raises(JudgeError, match=r"no complete reply within the deadline of 2 s "
                                             r"after 2 attempt"):
            judge.complete(["q"])
        assert time.monotonic() - start < 20  # two attempts of 2 s, not 2 x 60 s
        assert len(server.requests) == 2


def _endless(conn, server, declared: int | None, total: int = 300 * 2**20) -> None:
    """A 200 whose body is one chat completion with a ``total``-byte content (sent lazily,
    so only what the client reads leaves the server)."""
    length = f"Content-Length: {declared}\r\n" if declared is not None else ""
    conn.sendall(f"HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n".encode()
                 + b'{"choices": [{"message": {"content": "')
    block = b"a" * 2**20
    while server.sent < total and not server.stop.is_set():
        conn.sendall(block)
        server.sent += len(block)
    conn.sendall(b'"}}]}')


def test_a_huge_reply_is_refused_and_memory_stays_bounded(raw_server, tmp_path):
    """300 MB bodies, with and without a Content-Length: the request fails with one line
    at the cap and the client reads little more than the cap. Measured in a fresh
    process (its peak RSS is its own): a client that kept the whole body would hold 300 MB."""
    declared = raw_server(lambda c, r, s: _endless(c, s, 300 * 2**20 + 50))
    undeclared = raw_server(lambda c, r, s: _endless(c, s, None))
    script = ("import resource, sys\n"
              "from vlcohort.eval.judge import OpenAIJudge, JudgeError\n"
              "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
              "before = peak()  # the imports (torch among them) are not the reply's\n"
              "j = OpenAIJudge(sys.argv[1], 'm', retries=0, timeout_s=60)\n"
              "try:\n    j.complete(['q'])\nexcept JudgeError as e:\n    print(e)\n"
              "print(peak() - before)\n")
    for server, said in ((declared, "(Content-Length) is over the cap of 4194304 bytes"),
                         (undeclared, "reply is over the cap of 4194304 bytes")):
        r = subprocess.run([sys.executable, "-c", script, server.url], capture_output=True,
                           text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
        message, grown_mib = r.stdout.strip().splitlines()
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert said in message and len(message) < 400
        assert int(grown_mib) < 100, f"peak RSS grew {grown_mib} MiB for a capped reply"
        assert server.sent < 64 * 2**20  # the client stopped reading; most was never sent


def test_a_long_output_under_the_byte_cap_is_refused(raw_server):
    text = "x" * 1_000_000  # 1 MB: under the 4 MiB body cap, far over what a record keeps
    server = raw_server(lambda c, r, s: _reply(c, "200 OK", _completion(text)))
    with pytest.raises(JudgeError, match=r"1000000 chars, over the 65536 kept"):
        OpenAIJudge(server.url, "m", retries=0).complete(["q"])


def _echo_headers(conn, request, server, status="400 Bad Request"):
    lines = request.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")[1:]
    lines.sort(key=lambda line: not line.lower().startswith("authorization"))  # shown first
    body = json.dumps({"error": "bad request; you sent: " + " | ".join(lines)}).encode()
    _reply(conn, status, body)


def test_the_api_key_never_reaches_messages_records_or_files(raw_server, tmp_path, data_dir,
                                                             capsys, monkeypatch):
    """A 400 and a 503 whose bodies echo the request headers, and a 200 whose judged text
    echoes them: the key is sent (the server saw it), and appears in no stdout, stderr,
    exception message, items.jsonl or summary."""
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    r = _responses(tmp_path / "r.jsonl", VERSE)
    texts = []
    for status in ("400 Bad Request", "503 Service Unavailable"):
        server = raw_server(lambda c, q, s, st=status: _echo_headers(c, q, s, st))
        judge = OpenAIJudge(server.url, "m", api_key=SECRET, retries=0)
        with pytest.raises(JudgeError) as e:
            judge.complete(["q"])
        texts.append(str(e.value))
        assert SECRET.encode() in server.requests[0]  # it was sent, and echoed back
        assert "Authorization: Bearer [redacted]" in str(e.value)
        out = tmp_path / status[:3]
        assert main(["eval", "score", "--benchmark", "mathverse", "--data", str(data_dir),
                     "--responses", str(r), "--out", str(out), "--judge", server.url,
                     "--judge-model", "m", "--judge-retries", "0",
                     "--judge-api-key-env", "JUDGE_KEY"]) == 2
        captured = capsys.readouterr()
        texts += [captured.out, captured.err] + [f.read_text() for f in out.iterdir()]
        assert f"HTTP {status[:3]}" in captured.err and "Traceback" not in captured.err

    def echo_in_content(conn, request, server):
        _reply(conn, "200 OK", _completion("headers were: " + request.decode("latin-1")))

    server = raw_server(echo_in_content)
    out = tmp_path / "ok"
    assert main(["eval", "score", "--benchmark", "mathverse", "--data", str(data_dir),
                 "--responses", str(r), "--out", str(out), "--judge", server.url,
                 "--judge-model", "m", "--judge-api-key-env", "JUDGE_KEY"]) == 0
    captured = capsys.readouterr()
    texts += [captured.out, captured.err] + [f.read_text() for f in out.iterdir()]
    items = read_items(out / "items.jsonl")
    assert all("[redacted]" in rec["judge"]["extract"]["output"] for rec in items)
    for text in texts:
        assert SECRET not in text and SECRET[:12] not in text


def test_cut_lying_and_undecodable_replies_are_one_line_errors(raw_server):
    good = _completion("Judgement: 1")

    def cut(conn, request, server):  # promises 1000 bytes, sends 10, hangs up
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + good[:10])

    def short_length(conn, request, server):  # the JSON is longer than it says
        conn.sendall("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
                     .encode() + good)

    cases = [(cut, r"reply cut short \(10 bytes read, 990 more expected\) after 2 attempt"),
             (short_length, r"malformed reply.*reply starts: '\{\"cho'"),
             (lambda c, r, s: _reply(c, "200 OK", b"\xff\xfe\x00garbage\x80"), r"malformed reply"),
             (lambda c, r, s: _reply(c, "200 OK", b"not json at all"), r"malformed reply"),
             (lambda c, r, s: None, r"could not connect \(RemoteDisconnected")]
    for handler, pattern in cases:
        server = raw_server(handler)
        judge = OpenAIJudge(server.url, "m", retries=1, backoff_s=0.01, timeout_s=10)
        with pytest.raises(JudgeError, match=pattern) as e:
            judge.complete(["q"])
        assert "\n" not in str(e.value) and len(str(e.value)) < 600


def test_replies_past_the_json_bounds_are_one_line_errors(raw_server):
    """200 KB of nested arrays raised RecursionError out of the client, a 5,000-digit
    number ValueError: each is now a JudgeError naming the bound."""
    cases = [(b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
             (b'{"choices": [{"message": {"content": "1"}}], "usage": ' + b"7" * 5000 + b"}",
              "a number of 5000 digits")]
    for body, pattern in cases:
        server = raw_server(lambda c, r, s, body=body: _reply(c, "200 OK", body))
        judge = OpenAIJudge(server.url, "m", retries=0, timeout_s=10)
        with pytest.raises(JudgeError, match=pattern) as e:
            judge.complete(["q"])
        assert "\n" not in str(e.value) and len(str(e.value)) < 600


def test_a_lone_surrogate_in_the_judged_text_keeps_items_writable(raw_server, tmp_path,
                                                                  data_dir, capsys):
    body = b'{"choices": [{"message": {"content": "D \\ud800"}}]}'  # valid JSON, not Unicode
    server = raw_server(lambda c, r, s: _reply(c, "200 OK", body))
    assert OpenAIJudge(server.url, "m").complete(["q"]) == ["D \ufffd"]
    out = tmp_path / "out"
    r = _responses(tmp_path / "r.jsonl", VERSE)
    assert main(["eval", "score", "--benchmark", "mathverse", "--data", str(data_dir),
                 "--responses", str(r), "--out", str(out), "--judge", server.url,
                 "--judge-model", "m"]) == 0
    capsys.readouterr()
    assert {rec["judge"]["extract"]["output"] for rec in read_items(out / "items.jsonl")} == {
        "D \ufffd"}


def test_a_redirect_is_not_followed(raw_server, monkeypatch):
    """A 307 to another server: the key would go where the user never pointed it; the
    request fails naming the target, and the target is never contacted."""
    target = raw_server(lambda c, r, s: _reply(c, "200 OK", _completion("Judgement: 1")))
    location = f"Location: {target.url}/chat/completions\r\n"
    server = raw_server(lambda c, r, s: _reply(c, "307 Temporary Redirect", b"", location))
    judge = OpenAIJudge(server.url, "m", api_key=SECRET)
    with pytest.raises(JudgeError, match=r"HTTP 307: redirected to .*not followed"):
        judge.complete(["q"])
    assert target.requests == []


def test_an_http_proxy_from_the_environment_is_used(raw_server, monkeypatch):
    """``http_proxy`` is honoured as before: the proxy gets the absolute URL (and the
    judge's host is never contacted directly)."""
    judge_host = raw_server(lambda c, r, s: _reply(c, "200 OK", _completion("direct")))
    proxy = raw_server(lambda c, r, s: _reply(c, "200 OK", _completion("via proxy")))
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("http_proxy", proxy.url.removesuffix("/v1"))
    assert OpenAIJudge(judge_host.url, "m").complete(["q"]) == ["via proxy"]
    assert proxy.requests[0].startswith(f"POST {judge_host.url}/chat/completions ".encode())
    assert judge_host.requests == []


def test_https_is_verified_and_under_the_same_deadline(raw_server, tmp_path, monkeypatch):
    """A TLS judge with a certificate the client trusts (``SSL_CERT_FILE``) answers; one
    it does not trust is refused; a TLS judge that drips is cut off at the deadline."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    ok = raw_server(lambda c, r, s: _reply(c, "200 OK", _completion("over TLS")), tls)
    body = _completion("late")
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    drip = raw_server(lambda c, r, s: _drip(head + body, c, s), tls)
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(JudgeError, match="could not connect.*CERTIFICATE_VERIFY_FAILED"):
        OpenAIJudge(ok.url, "m", retries=0).complete(["q"])
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert OpenAIJudge(ok.url, "m", api_key=SECRET).complete(["q"]) == ["over TLS"]
    assert b"Authorization: Bearer " + SECRET.encode() in ok.requests[-1]  # the trusted host
    start = time.monotonic()
    with pytest.raises(JudgeError, match="within the deadline of 2 s after 1 attempt"):
        OpenAIJudge(drip.url, "m", timeout_s=2, retries=0).complete(["q"])
    assert time.monotonic() - start < 20
