"""What Katib's suggestion services compute with numpy, in the standard library, bit for bit:
`numpy.random.RandomState(seed)` (MT19937 seeded by `init_genrand`) and its `choice` of a
list (a bounded integer by masked rejection, the legacy generator's), and `numpy.arange` over
floats. Katib's grid is built and walked with them (its optuna service: `GridSampler`,
`convert_to_combinations`); tests/doors/test_katib_order.py holds them to numpy's own."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
SEED_MAX = 2**32 - 1  # (RandomState's: "Seed must be between 0 and 2**32 - 1")


class RandomState:
    """`numpy.random.RandomState(seed)` for an integer seed: the draws its `choice` makes."""

    def __init__(self, seed: int) -> None:
        if not 0 <= seed <= SEED_MAX:
            raise ValueError("Seed must be between 0 and 2**32 - 1")
        state = [seed]
        for i in range(1, 624):  # (MT19937's init_genrand)
            state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & SEED_MAX)
        self._mt = random.Random()
        self._mt.setstate((3, (*state, 624), None))  # (Python's Mersenne Twister, that state)

    def bounded(self, high: int) -> int:
        """`randint(0, high + 1)`: 32-bit draws masked to `high`'s bits until one is ≤ it."""
        mask = (1 << high.bit_length()) - 1
        while True:
            value = self._mt.getrandbits(32) & mask
            if value <= high:
                return value

    def choice(self, items: Sequence[T]) -> T:
        return items[self.bounded(len(items) - 1)] if len(items) > 1 else items[0]


def arange(start: float, stop: float, step: float) -> list[float]:
    """`numpy.arange(start, stop, step).tolist()` for floats: its length, its first two
    values, then `start + i * delta` with delta the difference of those two (numpy's fill)."""
    length = math.ceil((stop - start) / step)
    if length <= 0:
        return []
    if length == 1:
        return [start]
    second = start + step
    delta = second - start
    return [start, second, *(start + i * delta for i in range(2, length))]
