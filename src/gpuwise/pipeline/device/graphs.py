"""CUDA graphs per batch-size bucket: the model's launches replayed as one, where asked.

Note [graphs per bucket]
    A CUDA graph replays a captured sequence of kernels with one launch, so a small
    model's per-batch cost (dozens of launches from Python, each holding the GIL) shrinks
    to one; but a graph is captured for fixed shapes. The pipeline pads every batch to a
    bucket (``buckets``), so the model sees as many shapes as there are buckets: one
    graph each, captured on the first batch of that size (after warm-up runs on a side
    stream, as PyTorch's ``torch.cuda.graph`` asks), then replayed: the batch is copied
    into the graph's static input, the graph replays, and its static output is what the
    stager copies back to the host. The copy back ends before the next batch is staged
    (Note [two staging slots]), so one static output per bucket is enough. A size that is
    not a bucket runs eagerly. Without CUDA, or without buckets, the model runs eagerly
    and ``graph_note`` says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gpuwise.errors import UsageError

log = logging.getLogger(__name__)

Model = Callable[[torch.Tensor], Any]
Capture = Callable[[Model, torch.Tensor], Callable[[torch.Tensor], Any]]
"""``capture(model, example) -> replay``; ``replay(x)`` runs the captured model on ``x``."""

WARMUP_RUNS = 3
"""Eager runs on a side stream before a capture (cuDNN/cuBLAS pick their kernels there)."""


def graph_note(device: torch.device, buckets: Sequence[int]) -> str | None:
    """Why CUDA graphs cannot be used here (``None``: they can).

    Raises:
        UsageError: No buckets were given (a graph replays one batch shape).
    """
    if not buckets:
        raise UsageError(
            "cuda_graphs needs buckets: a graph replays one batch shape; give buckets such "
            "as (1, 2, 4, 8, 16) so each batch is padded to one of them"
        )
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device; the model runs eagerly on {device}"
    if not torch.cuda.is_available():
        return "CUDA graphs need CUDA, which this PyTorch cannot reach; the model runs eagerly"
    return None


class GraphedModel:
    """The model, replayed from one CUDA graph per bucket (Note [graphs per bucket]).

    Args:
        model: Batch -> outputs (tensors whose first dimension is the batch).
        buckets: The batch sizes to capture.
        capture: Captures the model for one example batch (default: CUDA's).
    """

    def __init__(self, model: Model, buckets: Sequence[int], capture: Capture | None = None):
        self.model, self.buckets = model, frozenset(buckets)
        self._capture = capture or cuda_capture
        self._replays: dict[tuple[int, ...], Callable[[torch.Tensor], Any]] = {}
        self.eager_batches = 0
        """Batches whose size is not a bucket (run eagerly)."""

    def __call__(self, x: torch.Tensor) -> Any:
        """Run ``x`` on its bucket's graph (captured on first use), else eagerly."""
        if int(x.shape[0]) not in self.buckets:
            self.eager_batches += 1
            return self.model(x)
        key = tuple(x.shape)
        replay = self._replays.get(key)
        if replay is None:
            log.info("capturing a CUDA graph for batches of shape %s", key)
            replay = self._replays[key] = self._capture(self.model, x)
        return replay(x)

    @property
    def captured(self) -> list[tuple[int, ...]]:
        """Shapes captured so far, in order."""
        return list(self._replays)


def cuda_capture(model: Model, example: torch.Tensor) -> Callable[[torch.Tensor], Any]:
    """Capture ``model`` on ``example``'s shape with ``torch.cuda.graph``; return a replay."""
    static_x = example.clone()
    side = torch.cuda.Stream(device=example.device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(example.device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_RUNS):
            model(static_x)
    torch.cuda.current_stream(example.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()  # type: ignore[no-untyped-call]
    with torch.cuda.graph(graph):
        static_out = model(static_x)

    def replay(x: torch.Tensor) -> Any:
        static_x.copy_(x, non_blocking=True)
        graph.replay()  # type: ignore[no-untyped-call]
        return static_out

    return replay
