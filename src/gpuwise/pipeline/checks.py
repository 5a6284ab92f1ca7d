"""Checks a pipeline makes on its settings and requests, and the errors they raise."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpuwise.errors import NoDeviceError, UsageError
from gpuwise.pipeline.errors import DeadlineExceeded, StageError
from gpuwise.pipeline.request import Request


def deadline_error(req: Request, now: float, before: str) -> DeadlineExceeded:
    """The error of a request dropped at ``now`` while waiting for ``before``."""
    waited_ms = (now - req.submit_t) * 1e3
    limit_ms = ((req.deadline_t or now) - req.submit_t) * 1e3
    return DeadlineExceeded(
        f"request {req.index} waited {waited_ms:.1f} ms for {before}, past its deadline of "
        f"{limit_ms:.1f} ms; it was dropped; raise the deadline, lower the load, or add capacity"
    )


def stage_error(stage: str, err: BaseException) -> BaseException:
    """What a request that ``stage`` raised ``err`` on fails with.

    An ``Exception`` is passed on as it is (the caller sees their own error); a
    ``SystemExit``, ``KeyboardInterrupt`` or other ``BaseException`` becomes a
    ``StageError``: it ends the request, never the pipeline's worker thread.
    """
    if isinstance(err, Exception):
        return err
    return StageError(
        f"{stage} raised {type(err).__name__}({err}); the request failed and the pipeline "
        f"goes on; return or raise an Exception from {stage} instead"
    )


def shape_error(sample: torch.Tensor, spec: tuple[tuple[int, ...], torch.dtype]) -> StageError:
    """The error of a sample whose shape or dtype differs from its batch's."""
    return StageError(
        f"pre returned a sample of shape {tuple(sample.shape)} {sample.dtype}; this pipeline's "
        f"batches hold {spec[0]} {spec[1]} (its first sample's); make pre return one shape "
        "(resize or pad in pre)"
    )


def torch_device(device: str | torch.device) -> torch.device:
    """Return ``device`` as a torch device; CUDA must be available when asked for."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise NoDeviceError(
            f"device '{device}' was asked for but CUDA is not available here; "
            "use device='cpu' (the CPU is then the device)"
        )
    return dev


def check_settings(
    max_batch: int, max_delay_ms: float, max_queue: int | None, buckets: Sequence[int]
) -> None:
    """Raise ``UsageError`` naming every pipeline setting out of range."""
    problems = []
    if max_batch < 1:
        problems.append(f"max_batch={max_batch} (use 1 or more)")
    if not max_delay_ms >= 0:
        problems.append(f"max_delay_ms={max_delay_ms} (use 0 or more)")
    if max_queue is not None and max_queue < 1:
        problems.append(f"max_queue={max_queue} (use 1 or more)")
    if buckets and (min(buckets) < 1 or max(buckets) < max_batch):
        problems.append(f"buckets={tuple(buckets)} (positive, the largest >= max_batch)")
    if problems:
        raise UsageError("Pipeline settings out of range: " + "; ".join(problems))
