"""``_tiny_cache``: an autouse fixture that points ``VLCOHORT_CACHE`` at a private folder of
the test session, so tiny models are built there once and the user's cache is never read
or written.

pytest registers a fixture in the module that imports it, so an autouse fixture imported
into a test module applies to every test of that module and of no other. Never import it
into a ``conftest.py``: there it would apply to the whole folder below. (The explicit
``tiny_cache`` the per-family cohort runs ask for is ``tests/processors/conftest.py``'s.)
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
