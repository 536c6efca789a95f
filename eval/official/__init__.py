"""Official scoring protocols, one module per benchmark, behind one interface.

Each benchmark module (``mathvista``, ``mathverse``, ``mathvision``, ``wemath``) defines

- ``PROTOCOL``: one sentence for the summary: which official code is reproduced and how
  that was checked;
- ``verdict(problem, response, extracted, judged, use_judge) -> dict | JudgeNeeded``: the
  official verdict of one response. ``extracted`` is our extractor's span (the fallback
  for steps the official pipeline does with GPT); ``judged`` maps a judge step name to the
  judge's output already obtained for this response (from the cache in ``items.jsonl``).
  When the protocol needs a judge output it does not have yet and ``use_judge`` is true, it
  returns :class:`JudgeNeeded` (the step and the exact prompt); the caller batches those
  over all records, asks the judge, and calls again with the outputs. A returned dict has
  ``official_prediction``, ``official_correct`` and ``official_rule`` (which rule decided);
- optionally ``report(rows) -> dict``: the benchmark's headline (``headline``, named by
  ``headline_name``: the number papers report) and tables, from ``[(problem, {"maj",
  "mean"})]`` per item (:func:`vlcohort.eval.runner.benchmark_report`).

:func:`official_verdict` wraps that: any exception inside a protocol counts the item wrong
with the reason recorded (as the official scripts, which catch everything), never a
crashed run. Keeping ``verdict`` a pure function of (problem, response, judge outputs)
is what makes re-scoring from a saved ``items.jsonl`` free and exact.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["JudgeNeeded", "OFFICIAL_BENCHMARKS", "official_verdict", "protocol_module",
           "protocol_note"]

#: Benchmarks with an official protocol module (``eval/official/<name>.py``).
OFFICIAL_BENCHMARKS = ("mathvista", "mathverse", "mathvision", "wemath")


@dataclass(frozen=True)
class JudgeNeeded:
    """A protocol step that needs the judge: ``step`` names it in the record's ``judge``
    cache (e.g. ``"extract"``, ``"score"``), ``prompt`` is the official prompt text."""

    step: str
    prompt: str


def protocol_module(benchmark: str):
    """The official protocol module of ``benchmark``, or None when it has none."""
    if benchmark not in OFFICIAL_BENCHMARKS:
        return None
    return importlib.import_module(f"vlcohort.eval.official.{benchmark}")


def protocol_note(benchmark: str) -> str:
    mod = protocol_module(benchmark)
    return getattr(mod, "PROTOCOL", "") if mod is not None else ""


def official_verdict(problem, response: str | None, extracted: str | None,
                     judged: Mapping[str, str] | None = None,
                     use_judge: bool = False) -> dict[str, Any] | JudgeNeeded | None:
    """The official verdict fields of one response (None: the benchmark has no official
    protocol); a protocol that raises gives ``official_correct: False`` with
    ``official_rule: "error"`` and the exception in ``official_error``."""
    mod = protocol_module(problem.source)
    if mod is None or not hasattr(mod, "verdict"):
        return None
    try:
        out = mod.verdict(problem, response or "", extracted, dict(judged or {}), use_judge)
    except Exception as e:  # the official scripts count any failure as wrong
        return {"official_prediction": None, "official_correct": False, "official_rule": "error",
                "official_error": f"{type(e).__name__}: {e}"[:500]}
    if isinstance(out, JudgeNeeded):
        return out
    out.setdefault("official_rule", "official")
    out["official_correct"] = bool(out.get("official_correct"))
    return out
