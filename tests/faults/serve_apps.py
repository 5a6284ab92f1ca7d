"""Serving apps for the ``serve-bench`` fault tests (``tests.faults.serve_apps:NAME``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwise.pipeline.bench.example import ServingApp
from tests.faults import serving_stages as st


def fine() -> ServingApp:
    """A quick app: ints in, doubled ints out."""
    return ServingApp("fine", st.pre, st.model, st.post, lambda i: i % 100)


def broken_inputs() -> ServingApp:
    """``make_input`` raises after a few requests (a bug in the user's input factory)."""

    def make_input(i: int) -> Any:
        if i >= 5:
            raise KeyError(f"no sample {i}")
        return i

    return ServingApp("broken inputs", st.pre, st.model, st.post, make_input)


def always_failing() -> ServingApp:
    """Every request fails in pre."""
    return ServingApp("failing", st.pre, st.model, st.post, lambda i: ("raise", i))


def raising_factory() -> ServingApp:
    """The factory itself raises (the user's code)."""
    raise FileNotFoundError("weights.pt")


def big_inputs() -> ServingApp:
    """1 MB inputs: a few thousand in flight exceed a small machine's memory."""
    blob = np.zeros(1 << 20, np.uint8)
    return ServingApp("big", lambda x: np.zeros(4, np.int64), st.model, st.post, lambda i: blob)
