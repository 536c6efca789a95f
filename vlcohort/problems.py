"""The Problem record: one unlabeled (or labelled) question, as every part of vlcohort sees it.

Adapters render it, engines generate for it, the grader and the vote read its options, and
metrics read its gold. Gold is never shown to a model: adapters render only ``text``,
``images`` and ``options``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LETTERS = "ABCDEFGH"


@dataclass
class Problem:
    """One question.

    Attributes:
        id: unique within a dataset; error messages and outputs are keyed by it.
        text: the question as shown to the model. It may hold image placeholders
            (``<image>`` or ``<image1>``, ``<image2>``...) marking where each image goes; when
            it holds none, images are placed before the text.
        images: 0..n images, each a path (str / Path), raw bytes, a PIL image, or a
            ``{"bytes": ..., "path": ...}`` dict as HF ``datasets`` Image features yield.
        options: the option texts in letter order (A, B, ...) for multiple choice, else None.
            This is the form the grader takes, so that "C" and the text of option C are one
            answer.
        gold: the reference answer, if known. Used for metrics and the ``ground_truth``
            reward only; never rendered.
        source: where the record came from (dataset name, file), for messages and metrics.
        meta: anything else a loader wants to keep (benchmark fields, versions).
    """

    id: str
    text: str
    images: list[Any] = field(default_factory=list)
    options: list[str] | None = None
    gold: str | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.options is not None and len(self.options) > len(LETTERS):
            raise ValueError(
                f"problem {self.id!r}: {len(self.options)} options, at most {len(LETTERS)} "
                f"(letters {LETTERS[0]}-{LETTERS[-1]}) are supported"
            )
