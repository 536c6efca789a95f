"""Judges for the benchmark steps the official pipelines run through GPT.

MathVista extracts the answer with a GPT call; MathVerse extracts and then scores with
GPT. The protocol modules (:mod:`eval.official`) return the exact official prompt of such
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

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, Sequence

__all__ = ["Judge", "JudgeError", "LocalJudge", "OpenAIJudge", "make_judge"]


class JudgeError(RuntimeError):
    """The judge could not produce an output (server down, bad reply, model not loadable)."""


class Judge(Protocol):
    id: str

    def complete(self, prompts: Sequence[str]) -> list[str]:
        """One output per prompt, in order."""


# --------------------------------------------------------------------------- HTTP


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


class OpenAIJudge:
    """A chat model behind an OpenAI-compatible endpoint.

    ``base_url`` is the API root the OpenAI clients take (e.g. ``https://api.openai.com/v1``
    or ``http://127.0.0.1:8000/v1``); requests go to ``{base_url}/chat/completions``.
    Connection failures, timeouts, 429 and 5xx are retried ``retries`` times with
    exponential backoff; any other status, or a reply that is not a chat completion,
    is an error at once (a retry would get the same answer). Every error names the URL.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_tokens: int = 1024, concurrency: int = 8, timeout_s: float = 120.0,
                 retries: int = 3, backoff_s: float = 1.0):
        if not model:
            raise JudgeError(f"judge {base_url}: an OpenAI-compatible judge needs a model name "
                             "(--judge-model, e.g. gpt-4o-2024-08-06)")
        if concurrency < 1 or max_tokens < 1:
            raise JudgeError(f"judge {base_url}: concurrency and max_tokens must be >= 1, got "
                             f"{concurrency} and {max_tokens}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.max_tokens = model, api_key, max_tokens
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.retries, self.backoff_s = retries, backoff_s
        self.id = f"openai:{model}:max_tokens={max_tokens}"
        self.calls = 0  # requests that returned an output (tests and the run log read it)
        self._lock = threading.Lock()

    def _payload(self, prompt: str) -> dict:
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0, "max_tokens": self.max_tokens, "stream": False}

    def _post(self, prompt: str) -> str:
        import requests

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = requests.post(self.url, json=self._payload(prompt), headers=headers,
                                  timeout=self.timeout_s)
            except requests.RequestException as e:
                last = f"could not connect ({type(e).__name__}: {e})"
                continue
            if r.status_code == 429 or r.status_code >= 500:
                last = f"HTTP {r.status_code}: {r.text[:300]}"
                continue
            if r.status_code != 200:
                hint = (" (is the base URL the API root, usually ending in /v1?)"
                        if r.status_code == 404 else
                        " (set the API key's variable, --judge-api-key-env)"
                        if r.status_code in (401, 403) else "")
                raise JudgeError(f"judge {self.url}: HTTP {r.status_code}{hint}: {r.text[:300]}")
            try:
                text = _reply_text(r.json())
            except ValueError as e:  # also json.JSONDecodeError (a ValueError)
                raise JudgeError(f"judge {self.url}: malformed reply, not a chat completion "
                                 f"({e}); reply starts: {r.text[:200]!r}") from e
            with self._lock:
                self.calls += 1
            return text
        raise JudgeError(f"judge {self.url}: {last} after {self.retries + 1} attempt(s)")

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

        from processors import adapter_for

        try:
            adapter = adapter_for(self.spec)
            model = adapter.load_model()
        except Exception as e:  # noqa: BLE001 - missing folder, bad config, broken weights
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

        from vlcohort.analysis.evaluate import generate_texts

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
    url = getattr(judge, "url", None)
    return judge.id + (f" at {url}" if url else "")

