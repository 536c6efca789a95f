"""The prompt stream: B problems per step, the same for every agent, resumable.

Epochs cycle when the run is longer than the dataset; each epoch's order is a seeded
shuffle (``seed``, epoch), so the stream is a pure function of (seed, position) and a
resumed run continues with exactly the prompts the uninterrupted run would have seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from vlcohort.data.problems import Problem


@dataclass
class StreamPosition:
    epoch: int = 0
    index: int = 0  # next position within the epoch's order


class ProblemStream:
    def __init__(self, problems: Sequence[Problem], seed: int, shuffle: bool = True):
        if not problems:
            raise ValueError("the training set is empty: nothing to stream")
        self.problems = list(problems)
        self.seed = seed
        self.shuffle = shuffle
        self.pos = StreamPosition()
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.problems)))
        if self.shuffle:
            random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def next(self) -> Problem:
        if self.pos.index >= len(self._order):
            self.pos = StreamPosition(self.pos.epoch + 1, 0)
            self._order = self._epoch_order(self.pos.epoch)
        p = self.problems[self._order[self.pos.index]]
        self.pos.index += 1
        return p

    def state(self) -> dict:
        return {"epoch": self.pos.epoch, "index": self.pos.index}

    def load_state(self, state: dict) -> None:
        self.pos = StreamPosition(int(state["epoch"]), int(state["index"]))
        self._order = self._epoch_order(self.pos.epoch)
