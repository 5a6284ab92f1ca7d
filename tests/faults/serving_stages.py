"""Module-level stages for the serving fault tests (spawned worker processes import them)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import numpy as np
import torch

if os.environ.get("GPUWISE_TEST_DIE_AT_IMPORT") == "1":
    os._exit(3)  # a worker whose imports fail hard


def pre(x: Any) -> np.ndarray:
    """An int -> a 4-value sample; a tuple ``(what, value)`` misbehaves on purpose."""
    if isinstance(x, tuple):
        what, value = x
        if what == "raise":
            raise ValueError(f"bad input {value}")
        if what == "exit":
            sys.exit(value)
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "sleep":
            time.sleep(value)
            return np.full(4, -1, np.int64)
        if what == "dict":
            return {"not": "an array"}  # type: ignore[return-value]
        if what == "str":
            return "text"  # type: ignore[return-value]
        if what == "objects":
            return np.array([object()] * 4)
        if what == "die":
            os._exit(value)
        if what == "pid":
            return np.full(4, os.getpid(), np.int64)
    return np.full(4, int(x), np.int64)


def model(batch: torch.Tensor) -> torch.Tensor:
    """Doubles the batch; a batch holding -7 raises SystemExit, -9 sleeps 2 s."""
    if bool((batch == -7).any()):
        raise SystemExit(7)
    if bool((batch == -9).any()):
        time.sleep(2.0)
    return batch * 2


def post(row: torch.Tensor) -> int:
    """The row's first value; an input of -11 (a row of -22) raises KeyboardInterrupt."""
    value = int(row[0])
    if value == -22:
        raise KeyboardInterrupt
    return value


UNPICKLABLE = threading.Lock()
"""An input a worker process cannot receive."""
