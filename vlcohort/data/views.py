"""Per-agent views: each agent may see its own wording of a question.

The paper's "Different family+" setting gives one agent the original question and another a
rewritten one. Only the *text* differs between views: images, options and gold stay the
dataset's, so the agents' votes are over the same answer space and can be compared.

Views are resolved once at load (``attach_views``: the text goes into
``problem.meta["views"][agent name]``) so that a missing rewrite is skipped and counted
before training starts, not discovered mid-run; ``view_of`` then swaps the text at render.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from vlcohort import bounded_json
from vlcohort.data.problems import DataError, LoadReport, Problem, split_options
from vlcohort.errors import json_error_text


def load_rewrites(path: str | Path) -> dict[str, str]:
    """``{id: question}`` from a JSON object, a JSON list of records, or JSONL records.

    A record is ``{"id": ..., "question": ...}`` (``text`` or ``rewrite`` also accepted for
    the question). A malformed line or record is an error naming the file and line: a
    rewrite file is small and hand-made, so it is fixed rather than skipped.
    """
    p = Path(path)
    raw = p.read_text(encoding="utf-8")
    records: list[tuple[int, Any]]
    try:
        whole = bounded_json.loads(raw, max_chars=len(raw))
    except bounded_json.BadJSON as e:
        if e.syntax is None:  # JSON, past a bound
            raise DataError(f"{p}: {e}; a rewrite file holds flat records") from None
        whole = None
        records = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((n, bounded_json.loads(line)))
            except bounded_json.BadJSON as e:
                why = f"not valid JSON ({json_error_text(e.syntax)})" if e.syntax else str(e)
                raise DataError(f"{p}, line {n}: {why}") from None
    if isinstance(whole, dict):
        return {str(k): str(v) for k, v in whole.items() if v is not None}
    if isinstance(whole, list):
        records = [(i + 1, r) for i, r in enumerate(whole)]
    elif whole is not None:  # one JSONL record parses as a whole document too
        records = [(1, whole)]
    out: dict[str, str] = {}
    for n, rec in records:
        if not isinstance(rec, dict) or "id" not in rec:
            raise DataError(f"{p}, record {n}: expected an object with 'id' and 'question'")
        text = next((rec[k] for k in ("question", "text", "rewrite") if k in rec), None)
        if text is None:
            raise DataError(f"{p}, record {n}: no 'question' field (id {rec['id']!r})")
        out[str(rec["id"])] = str(text)
    return out


def attach_views(problems: Sequence[Problem], views: Sequence[tuple[str, str, str]],
                 report: LoadReport) -> list[Problem]:
    """Resolve each agent's text for each problem; problems some agent cannot see are
    skipped (reasons ``view_missing``, ``empty_question``) and counted in ``report``.

    ``views``: (agent name, column, rewrite file) with one of column / rewrite file set.
    A choices block in the view text is removed when the problem has options (adapters
    append the options themselves, as for the original question).
    """
    if not views:
        return list(problems)
    rewrites = {f: load_rewrites(f) for _, _, f in views if f}
    kept = []
    for p in problems:
        texts: dict[str, str] = {}
        ok = True
        for name, column, rewrite_file in views:
            fld = column or f"{rewrite_file}[{p.id!r}]"
            text = (p.meta.get("columns", {}).get(column) if column
                    else rewrites[rewrite_file].get(p.id))
            row = p.meta.get("row", -1)
            if text is None:
                report.skip("view_missing", row, fld,
                            f"problem {p.id!r}: no question for agent {name!r}")
                ok = False
                break
            text = str(text).strip()
            if p.options:
                text = split_options(text)[0].strip() or text
            if not text:
                report.skip("empty_question", row, fld,
                            f"problem {p.id!r}: empty question for agent {name!r}")
                ok = False
                break
            texts[name] = text
        if ok:
            p.meta["views"] = texts
            kept.append(p)
    report.loaded = len(kept)
    return kept


def view_of(problem: Problem, agent: str) -> Problem:
    """The problem as ``agent`` sees it (the same object when it has no view of its own)."""
    text = problem.meta.get("views", {}).get(agent)
    if text is None or text == problem.text:
        return problem
    return dataclasses.replace(problem, text=text)
