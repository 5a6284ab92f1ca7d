"""Module-level pre functions for process workers (spawned processes import them)."""

from __future__ import annotations

import numpy as np


def python_pre(i: int) -> np.ndarray:
    """A GIL-bound pre: a pure-Python loop, then a 3-value sample [i, i, checksum]."""
    total = 0
    for k in range(2000):
        total = (total + k * i) % 1009
    if i == 7:
        raise ValueError("cannot preprocess input 7")
    return np.array([i, i, total], dtype=np.int64)
