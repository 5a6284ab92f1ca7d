from __future__ import annotations

import threading
import time

import torch


class FakeModel:
    """A model whose step takes ``a + b * batch`` seconds; output row i is 2 * input row i."""

    def __init__(self, a_s: float = 0.002, b_s: float = 0.0005, fail_on: int | None = None):
        self.a_s, self.b_s, self.fail_on = a_s, b_s, fail_on
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with self.lock:
            self.sizes.append(int(x.shape[0]))
        if self.fail_on is not None and bool((x == self.fail_on).any()):
            raise RuntimeError(f"model failed on a batch holding {self.fail_on}")
        time.sleep(self.a_s + self.b_s * x.shape[0])
        return x.float() * 2


def pre(i: int) -> torch.Tensor:
    return torch.full((3,), i, dtype=torch.int64)


def post(row: torch.Tensor) -> float:
    return float(row[0])
