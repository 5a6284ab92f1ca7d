"""Tune a model end to end: build its real step, search the batch, check bf16.

``gpuwise tune`` is this function and a renderer. The batch search itself is
``tune.find_batch_size``; the step is ``steps.make_training_step``; the precision check
is ``precision.compare_precision``. This module puts them in order and returns the
``gpuwise.tune/1`` object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gpuwise.errors import NoDeviceError, OutOfMemoryProbe
from gpuwise.sizing.advice.bf16_check import compare_precision
from gpuwise.sizing.advice.real_step import make_training_step
from gpuwise.sizing.advice.tune import TUNE_SCHEMA, find_batch_size
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.step.routes import autocast_precision

PRECISION_CHECK_REPEATS = 5
"""Fewest timed steps per precision in the bf16 check (it compares two close timings)."""


@dataclass(frozen=True)
class TuneRequest:
    """What to tune, with ``gpuwise tune``'s defaults; each field is one of its flags.

    Attributes:
        model: A built-in model name or ``package.module:factory``.
        shape: One sample's shape without the batch, e.g. ``"3x224x224"`` (default: the
            model's own).
        seq_len: Sequence length for token models (default: the model's own).
        precision: The step's precision route (``choices.PRECISIONS``).
        optimizer: One of ``choices.OPTIMIZERS``.
        checkpoint: Gradient checkpointing of the model's repeated blocks.
        freeze: Name prefixes of parameters to freeze.
        job: The whole sizing job (the CLI's); when given, the model fields above are
            ignored.
        start_batch: First batch to try (default: from the estimate and the limit).
        max_batch: Largest batch to try.
        memory_limit_bytes: Memory the step may use (default: see ``find_batch_size``).
        repeats: Timed steps per probe, after one warm-up step.
        precision_check: Time fp32 against bf16 autocast at the fastest batch.
    """

    model: str
    shape: str | None = None
    seq_len: int | None = None
    precision: str = "fp32"
    optimizer: str = "adamw"
    checkpoint: bool = False
    freeze: tuple[str, ...] = ()
    start_batch: int | None = None
    max_batch: int = 256
    memory_limit_bytes: int | None = None
    repeats: int = 3
    precision_check: bool = True
    job: SizingJob | None = None

    def sizing_job(self) -> SizingJob:
        """The job to tune: ``job``, or one made of the model fields."""
        if self.job is not None:
            return self.job
        return SizingJob(
            self.model,
            self.shape,
            seq_len=self.seq_len,
            precision=self.precision,
            optimizer=self.optimizer,
            checkpoint="non-reentrant" if self.checkpoint else None,
            freeze=self.freeze,
        )


def resolve_device(name: str) -> torch.device:
    """The device ``name`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``), checked.

    ``auto`` is CUDA when PyTorch sees a GPU, else the CPU.

    Raises:
        NoDeviceError: The device is not there; the message says why and what to use.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            build = "has no CUDA" if torch.version.cuda is None else f"sees {count} GPU(s)"
            raise NoDeviceError(
                f"--device {name}: PyTorch {torch.__version__} {build}; use --device cpu, "
                "or run `gpuwise doctor` to see why"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise NoDeviceError("--device mps: MPS is not available here; use --device cpu")
    return device


def _refuse_impossible_limit(
    request: TuneRequest, peak_bytes_fn: Callable[[int], int] | None
) -> None:
    """Refuse, from the estimate, a limit below the smallest batch's peak (nothing is built)."""
    limit = request.memory_limit_bytes
    if limit is None or peak_bytes_fn is None:
        return
    smallest = peak_bytes_fn(1)
    if smallest > limit:
        raise OutOfMemoryProbe(
            f"--memory-limit {limit:,} B is below the estimated peak of the smallest batch "
            f"({smallest:,} B by the traced estimate); nothing was built or run. Raise the "
            "limit, or shrink the job (--lora, --freeze, --precision bf16-pure, "
            "--optimizer adam8bit)"
        )


def tune_model(
    request: TuneRequest,
    device: torch.device,
    *,
    peak_bytes_fn: Callable[[int], int] | None = None,
    say: Callable[[str], None] = lambda text: None,
) -> dict[str, Any]:
    """Build the model's step on ``device``, find the batch sizes, check bf16.

    Args:
        request: What to tune.
        device: Where the steps run (see ``resolve_device``).
        peak_bytes_fn: Estimated peak bytes at a batch size; probes above the limit are
            skipped without running them.
        say: Called with a short line at each stage (for a progress display).

    Returns:
        The ``gpuwise.tune/1`` object: ``schema``, ``model``, ``step_precision``, the
        fields of ``TuneResult.to_dict()`` and ``precision`` (the bf16 check, or
        ``None`` when not asked for).

    Raises:
        GpuwiseError: Not even the smallest batch fits, or the model cannot be built.

    Example:
        >>> doc = tune_model(TuneRequest("mnist_mlp", max_batch=64), resolve_device("cpu"))
        >>> doc["max_batch_size"] <= 64
        True
    """
    job = request.sizing_job()
    _refuse_impossible_limit(request, peak_bytes_fn)
    say(f"building {request.model}")
    built = make_training_step(job, device)
    autocast = autocast_precision(job.precision)

    def probe(batch: int) -> None:
        say(f"timing batch {batch} on {device}")
        built.step(batch, autocast)

    result = find_batch_size(
        probe,
        start=request.start_batch,
        max_batch=request.max_batch,
        memory_limit_bytes=request.memory_limit_bytes,
        device=device,
        peak_bytes_fn=peak_bytes_fn,
        repeats=request.repeats,
        cpu_baseline_bytes=built.parameter_bytes,
    )
    check = None
    if request.precision_check:
        say(f"timing fp32 against bf16 at batch {result.best_batch_size}")
        repeats = max(request.repeats, PRECISION_CHECK_REPEATS)
        check = compare_precision(built.step, result.best_batch_size, device, repeats=repeats)
    return {
        "schema": TUNE_SCHEMA,
        "model": request.model,
        "step_precision": job.precision,
        "job": job.describe(),
        **result.to_dict(),
        "precision": check.to_dict() if check else None,
    }
