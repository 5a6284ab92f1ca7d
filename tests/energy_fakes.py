"""A hand-moved clock and a quantized energy counter, shared by the energy tests."""

from __future__ import annotations

import math

POWER_W = 300.0
PERIOD_S = 0.1


class Clock:
    """An injected clock the test moves by hand (``t_s``)."""

    def __init__(self) -> None:
        self.t_s = 0.0

    def __call__(self) -> float:
        return self.t_s


def quantized(t_s: float) -> float:
    """A 300 W GPU whose energy counter (joules since driver load) moves every 100 ms."""
    return 5000.0 + POWER_W * math.floor(t_s / PERIOD_S + 1e-9) * PERIOD_S
