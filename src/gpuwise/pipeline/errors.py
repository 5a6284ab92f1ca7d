"""Errors a serving pipeline raises to its callers (all ``GpuwiseError`` subclasses)."""

from __future__ import annotations

from gpuwise.errors import GpuwiseError


class Overloaded(GpuwiseError):
    """The pipeline's queue is full: the request was rejected at once (backpressure)."""


class DeadlineExceeded(GpuwiseError):
    """A request waited past its deadline and was dropped before it ran further."""


class StageError(GpuwiseError):
    """A stage returned something the next stage cannot take (names the stage)."""


class PipelineClosed(GpuwiseError):
    """The pipeline is closing or closed and takes no more requests."""
