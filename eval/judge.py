"""Judges for the benchmark steps the official pipelines run through GPT.

MathVista extracts the answer with a GPT call; MathVerse extracts and then scores with
GPT. The protocol modules (:mod:`vlcohort.eval.official`) return the exact official prompt of such
a step (``JudgeNeeded``); a judge here turns prompts into outputs. Two backends, one
interface (``complete(prompts) -> outputs`` in order, plus ``id``):

- :class:`OpenAIJudge`: any OpenAI-compatible ``POST {base}/chat/completions`` server
  (OpenAI itself, vLLM's or ``transformers serve``'s server, a proxy), temperature 0;
- :class:`LocalJudge`: a checkpoint folder, hub id or ``tiny:`` spec run greedily through
  the project's own adapter and ``generate`` (no server, nothing leaves the machine).

``id`` names what produced an output; the runner caches each output in ``items.jsonl``
under the judge id and the prompt's hash, so re-scoring with the same judge asks nothing
again, and a different judge is never mistaken for the one that wrote the cache.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, Sequence

from vlcohort import bounded_json

from .safe_text import clip, redact, without_surrogates

__all__ = ["Judge", "JudgeError", "LocalJudge", "OpenAIJudge", "make_judge"]

#: The most bytes of one reply body read from a URL judge: a chat completion of 1024
#: tokens is a few kB, so 4 MiB leaves room for any honest server and bounds memory.
MAX_REPLY_BYTES = 4 * 1024 * 1024
#: The longest judge output kept in a record: a judge step's output is an extraction or a
#: 0/1 verdict, and 1024 tokens are some 5,000 characters.
MAX_OUTPUT_CHARS = 64 * 1024
#: What is read of a non-200 reply's body (a message shows its first 200 characters).
ERROR_BODY_BYTES = 4096
READ_CHUNK = 64 * 1024


class JudgeError(RuntimeError):
    """The judge could not produce an output (server down, bad reply, model not loadable)."""


class Judge(Protocol):
    id: str

    def complete(self, prompts: Sequence[str]) -> list[str]:
        """One output per prompt, in order."""


# --------------------------------------------------------------------------- HTTP


def _shown_url(parts: urllib.parse.SplitResult) -> str:
    """The URL as messages show it: without a ``user:password@`` part."""
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _reply_text(body: object) -> str:
    """``choices[0].message.content`` of a chat-completion reply (``null`` content, which
    servers send for an empty completion, is the empty string); ValueError otherwise."""
    try:
        content = body["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"no choices[0].message.content ({type(e).__name__}: {e})") from e
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ValueError(f"choices[0].message.content is {type(content).__name__}, not text")
    return content


def reply_output(data: bytes, max_bytes: int = MAX_REPLY_BYTES) -> str:
    """The output text of a reply body: bounded JSON (:mod:`vlcohort.bounded_json`), then
    ``choices[0].message.content``; ValueError (one phrase) for anything else."""
    return _reply_text(bounded_json.loads(data, max_chars=max_bytes))


class _Expired(Exception):
    """The request's wall-clock deadline passed (retried like a timeout)."""


class _Transient(Exception):
    """A failure worth retrying: no connection, a reply cut short, the deadline."""


class OpenAIJudge:
    """A chat model behind an OpenAI-compatible endpoint.

    ``base_url`` is the API root the OpenAI clients take (e.g. ``https://api.openai.com/v1``
    or ``http://127.0.0.1:8000/v1``); requests go to ``{base_url}/chat/completions``.
    Connection failures, timeouts, 429 and 5xx are retried ``retries`` times with
    exponential backoff; any other status, or a reply that is not a chat completion,
    is an error at once (a retry would get the same answer). Every error names the URL.

    The server is not trusted, so each request is bounded:

    - ``timeout_s`` is a wall-clock deadline for the whole request (connect, send, every
      read of the headers and body), not a limit per socket read: a server that drips
      one byte a second is cut off when the deadline passes. Each attempt has its own
      deadline (name resolution is the one step it cannot interrupt);
    - the reply body is read in chunks and may hold at most ``max_reply_bytes``
      (:data:`MAX_REPLY_BYTES`); the output text kept at most :data:`MAX_OUTPUT_CHARS`;
    - no message, log line or record holds the API key: error bodies are redacted
      (:func:`vlcohort.eval.safe_text.redact`) and cut short, and a redirect is not followed
      (the key goes only to the host named), it is an error naming where it pointed;
    - the body is asked for uncompressed (``Accept-Encoding: identity``), so the cap
      is on what is held in memory.

    ``http_proxy`` / ``https_proxy`` / ``no_proxy`` are honoured as the standard library
    reads them (an HTTP proxy gets the absolute URL; HTTPS goes through ``CONNECT``).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_tokens: int = 1024, concurrency: int = 8, timeout_s: float = 120.0,
                 retries: int = 3, backoff_s: float = 1.0,
                 max_reply_bytes: int = MAX_REPLY_BYTES):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._parts = urllib.parse.urlsplit(self.url)
        self.shown_url = _shown_url(self._parts)
        if not model:
            raise JudgeError(redact(f"judge {self.shown_url}: an OpenAI-compatible judge needs "
                                    "a model name (--judge-model, e.g. gpt-4o-2024-08-06)",
                                    [api_key]))
        if concurrency < 1 or max_tokens < 1:
            raise JudgeError(redact(f"judge {self.shown_url}: concurrency and max_tokens must "
                                    f"be >= 1, got {concurrency} and {max_tokens}", [api_key]))
        if not 0 < timeout_s < 1e6 or max_reply_bytes < 1024:
            raise JudgeError(redact(f"judge {self.shown_url}: the timeout must be between 0 and "
                                    f"1e6 s and the reply cap >= 1024 bytes, got {timeout_s} and "
                                    f"{max_reply_bytes}", [api_key]))
        if self._parts.scheme not in ("http", "https") or not self._parts.hostname:
            raise JudgeError(redact(f"judge {self.shown_url}: not an http(s):// URL with a host",
                                    [api_key]))
        self.model, self.api_key, self.max_tokens = model, api_key, max_tokens
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.retries, self.backoff_s = retries, backoff_s
        self.max_reply_bytes = max_reply_bytes
        self.id = f"openai:{model}:max_tokens={max_tokens}"
        self.calls = 0  # requests that returned an output (tests and the run log read it)
        self._lock = threading.Lock()

    def _payload(self, prompt: str) -> dict:
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0, "max_tokens": self.max_tokens, "stream": False}

    def _safe(self, text: str) -> str:
        """``text`` without the key or any credential header's value."""
        return redact(text, [self.api_key])

    def _error(self, what: str) -> JudgeError:
        return JudgeError(self._safe(f"judge {self.shown_url}: {what}"))

    @staticmethod
    def _tls() -> ssl.SSLContext:
        """Certificates checked against ``$SSL_CERT_FILE`` or ``$REQUESTS_CA_BUNDLE`` when
        set, else certifi's bundle where it is installed (what the ``requests`` client
        used), else the system's store."""
        cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE")
        if not cafile:
            try:
                import certifi

                cafile = certifi.where()
            except ImportError:
                cafile = None
        return ssl.create_default_context(cafile=cafile)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the judge's host, or to the proxy the environment names."""
        parts = self._parts
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        proxy = urllib.request.getproxies().get(parts.scheme)
        if proxy and not urllib.request.proxy_bypass(parts.hostname):
            p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if https:
                conn = http.client.HTTPSConnection(p.hostname, p.port or 80, timeout=timeout,
                                                   context=self._tls())
                conn.set_tunnel(parts.hostname, port)
                return conn
            return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=timeout)
        if https:
            return http.client.HTTPSConnection(parts.hostname, port, timeout=timeout,
                                               context=self._tls())
        return http.client.HTTPConnection(parts.hostname, port, timeout=timeout)

    def _target(self, conn: http.client.HTTPConnection) -> str:
        """The request target: the path, or the absolute URL through an HTTP proxy."""
        parts = self._parts
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        proxied = (conn.host, conn.port) != (parts.hostname, port) and parts.scheme == "http"
        return f"http://{parts.netloc.rpartition('@')[2]}{path}" if proxied else path

    def _exchange(self, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """One request under one wall-clock deadline: (status, Location, body). The body
        of a 200 is read whole up to the cap (JudgeError past it); another status's body
        only its first :data:`ERROR_BODY_BYTES` (it is shown cut short anyway).

        A timer shuts the socket down when the deadline passes, which ends any read in
        progress (the header lines too, which the standard library reads itself); the
        body is read a chunk at a time with the socket timeout set to the time left."""
        deadline = time.monotonic() + self.timeout_s
        conn = self._connection(timeout=self.timeout_s)
        fired = threading.Event()
        held: list[socket.socket] = []  # the socket, kept: a reply with "Connection: close"
        # takes it out of ``conn``, while its body is still read through it

        def expire() -> None:
            fired.set()
            for sock in held:
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or fired.is_set():
                raise _Expired
            return remaining

        timer = threading.Timer(self.timeout_s, expire)
        timer.daemon = True
        timer.start()
        try:
            conn.connect()
            held.append(conn.sock)
            if fired.is_set():  # the deadline passed while connecting
                raise _Expired
            conn.sock.settimeout(left())
            conn.request("POST", self._target(conn), body=body, headers=headers)
            resp = conn.getresponse()
            limit = self.max_reply_bytes if resp.status == 200 else ERROR_BODY_BYTES
            declared = resp.getheader("Content-Length", "")
            if resp.status == 200 and declared.strip().isdigit() and int(declared) > limit:
                raise self._error(f"reply of {int(declared)} bytes (Content-Length) is over "
                                  f"the cap of {limit} bytes; nothing read")
            data = bytearray()
            while True:
                held[0].settimeout(left())
                chunk = resp.read1(READ_CHUNK)
                if not chunk:
                    break
                data += chunk
                if len(data) > limit:
                    if resp.status == 200:
                        raise self._error(f"reply is over the cap of {limit} bytes; stopped "
                                          "reading (a chat completion is far smaller: is the "
                                          "URL the judge's API root?)")
                    del data[limit:]
                    break
            if fired.is_set():  # the shutdown at the deadline reads as an end of body
                raise _Expired
            if resp.status == 200 and resp.length:  # Content-Length promised more
                raise _Transient(f"reply cut short ({len(data)} bytes read, {resp.length} "
                                 "more expected)")
            return resp.status, resp.getheader("Location", ""), bytes(data)
        except (OSError, http.client.HTTPException) as e:
            if fired.is_set() or time.monotonic() >= deadline:
                raise _Expired from e
            if isinstance(e, http.client.IncompleteRead):
                raise _Transient(f"reply cut short ({len(e.partial)} bytes read, "
                                 f"{e.expected} more expected)") from e
            raise _Transient(f"could not connect ({type(e).__name__}: {e})") from e
        finally:
            timer.cancel()
            conn.close()

    def _post(self, prompt: str) -> str:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Accept-Encoding": "identity", "Connection": "close"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = json.dumps(self._payload(prompt)).encode("utf-8")
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                status, location, data = self._exchange(body, headers)
            except _Expired:
                last = f"no complete reply within the deadline of {self.timeout_s:g} s"
                continue
            except _Transient as e:
                last = str(e)
                continue
            text = self._safe(data.decode("utf-8", errors="replace"))
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {clip(text)}"
                continue
            if 300 <= status < 400:
                raise self._error(f"HTTP {status}: redirected to {clip(location, 120)}, which "
                                  "is not followed (the API key goes only to the host named); "
                                  "give the final URL as --judge")
            if status != 200:
                hint = (" (is the base URL the API root, usually ending in /v1?)"
                        if status == 404 else
                        " (set the API key's variable, --judge-api-key-env)"
                        if status in (401, 403) else "")
                raise self._error(f"HTTP {status}{hint}: {clip(text)}")
            try:
                output = reply_output(data, self.max_reply_bytes)
            except ValueError as e:  # BadJSON and _reply_text's own
                raise self._error(f"malformed reply, not a chat completion "
                                  f"({clip(str(e), 120)}); reply starts: {clip(text)}") from e
            if len(output) > MAX_OUTPUT_CHARS:
                raise self._error(f"the reply's text is {len(output)} chars, over the "
                                  f"{MAX_OUTPUT_CHARS} kept per judge output (max_tokens="
                                  f"{self.max_tokens}: is the server honouring max_tokens?)")
            with self._lock:
                self.calls += 1
            return self._safe(without_surrogates(output))
        raise self._error(f"{last} after {self.retries + 1} attempt(s)")

    def complete(self, prompts: Sequence[str]) -> list[str]:
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(self._post, prompts))


# --------------------------------------------------------------------------- local model


class LocalJudge:
    """A local model as the judge: each prompt is one user turn rendered through the
    model family's chat template (no system prompt), answered greedily by the same
    batched ``generate`` as ``vlcohort eval``. The model loads on the first call."""

    def __init__(self, spec: str, *, max_tokens: int = 1024, batch_size: int = 8):
        if max_tokens < 1 or batch_size < 1:
            raise JudgeError(f"judge {spec}: max_tokens and batch size must be >= 1")
        self.spec, self.max_tokens, self.batch_size = str(spec), max_tokens, batch_size
        self.id = f"local:{spec}:max_tokens={max_tokens}"
        self.calls = 0  # prompts answered
        self._adapter = self._model = None

    def _load(self):
        import torch

        from vlcohort.processors import adapter_for

        try:
            adapter = adapter_for(self.spec)
            model = adapter.load_model()
        except Exception as e:  # missing folder, bad config, broken weights
            raise JudgeError(f"judge model {self.spec!r} could not be loaded: "
                             f"{type(e).__name__}: {e}") from e
        if torch.cuda.is_available():
            model = model.to("cuda")
        self._adapter, self._model = adapter, model

    def render(self, prompt: str):
        """The prompt as a text-only chat turn in the judge's own template."""
        from vlcohort.data.problems import Problem

        if self._adapter is None:
            self._load()
        return self._adapter.render(Problem(id="judge", text=prompt, source="judge"),
                                    system_prompt=None, instruction=None)

    def complete(self, prompts: Sequence[str]) -> list[str]:
        import torch

        from vlcohort.monitoring.heldout import generate_texts

        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            rendered = [self.render(p) for p in prompts[start:start + self.batch_size]]
            with torch.no_grad():
                out += generate_texts(self._adapter, self._model, rendered, self.max_tokens)
        self.calls += len(prompts)
        return out


# --------------------------------------------------------------------------- choice


def make_judge(target: str, model: str | None = None, *, max_tokens: int = 1024,
               concurrency: int = 8, api_key_env: str = "OPENAI_API_KEY", retries: int = 3,
               timeout_s: float = 120.0) -> Judge:
    """``http(s)://...`` -> :class:`OpenAIJudge` (``model`` required, key from
    ``$api_key_env`` when set); anything else -> :class:`LocalJudge` (``model`` unused)."""
    if target.startswith(("http://", "https://")):
        if not model:
            raise JudgeError(f"--judge {target}: a URL judge needs --judge-model NAME "
                             "(the model the server serves)")
        return OpenAIJudge(target, model, api_key=os.environ.get(api_key_env) or None,
                           max_tokens=max_tokens, concurrency=concurrency, retries=retries,
                           timeout_s=timeout_s)
    if model:
        raise JudgeError(f"--judge-model {model!r} is for a URL judge; --judge {target!r} is a "
                         "local model (path or tiny: spec)")
    return LocalJudge(target, max_tokens=max_tokens, batch_size=concurrency)


def describe(judge: Judge) -> str:
    """One line for logs: the id and, for a server, the URL."""
    url = getattr(judge, "shown_url", None)
    return judge.id + (f" at {url}" if url else "")

