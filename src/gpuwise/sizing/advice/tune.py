"""Find, on the real device, the largest batch that fits and the fastest batch.

``find_batch_size`` grows the batch by doubling from a start (seeded from the memory
estimate when one is given), then bisects between the last batch that fitted and the
first that did not. Every probe runs one warm-up step and ``repeats`` timed steps; the
batch with the highest measured samples/s is reported beside the largest that fits,
because they often differ.

Out-of-memory protocol: a probe that raises ``torch.OutOfMemoryError`` (or gpuwise's
``OutOfMemoryProbe``) is recorded as not fitting. The exception and its traceback are
dropped before the caches are freed (``gc.collect`` and ``torch.cuda.empty_cache``), since
the traceback's frames hold the probe's tensors. On the CPU a real out-of-memory would
take the machine down, so a memory limit is enforced instead: a probe whose predicted
peak (from ``peak_bytes_fn``, else extrapolated from the peaks measured by earlier probes)
exceeds the limit is not run. Without ``peak_bytes_fn`` each CPU probe's peak is measured
from the allocator's record (torch.profiler memory events), and one above the limit does
not fit.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpuwise.errors import OutOfMemoryProbe, UsageError

logger = logging.getLogger(__name__)

TUNE_SCHEMA = "gpuwise.tune/1"
_OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, OutOfMemoryProbe)


@dataclass(frozen=True)
class Probe:
    """One tried batch size (``step_s`` is the median of the timed steps)."""

    batch_size: int
    fits: bool
    step_s: float | None = None
    samples_per_s: float | None = None
    peak_bytes: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class TuneResult:
    """What the search found.

    Attributes:
        max_batch_size: Largest batch that fitted (agreed by all ranks under torchrun).
        best_batch_size: Fitting batch with the highest measured samples/s.
        best_samples_per_s: That throughput.
        probes: Every probe, in the order run.
        device: ``"cpu"`` or ``"cuda:N"``.
        memory_limit_bytes: The limit enforced (None: the device's own memory).
        memory_before_bytes: CUDA bytes allocated before the search (None on the CPU).
        memory_after_bytes: CUDA bytes allocated after it (equal when nothing leaked).
        start_batch_size: Where the search started.
        capped: True when ``max_batch`` fitted, so the real limit is higher.
        ranks_agreed: True when torch.distributed was initialized and ranks agreed.
    """

    max_batch_size: int
    best_batch_size: int
    best_samples_per_s: float | None
    probes: tuple[Probe, ...]
    device: str
    memory_limit_bytes: int | None
    memory_before_bytes: int | None
    memory_after_bytes: int | None
    start_batch_size: int
    capped: bool
    ranks_agreed: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``gpuwise.tune/1`` without the precision part)."""
        data = asdict(self)
        data["probe_count"] = len(self.probes)
        return data


def release_memory(device: torch.device) -> None:
    """Collect garbage and return cached device memory to the driver."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def agree_min(value: int, dist: Any = None) -> tuple[int, bool]:
    """The minimum of ``value`` over all ranks when torch.distributed is initialized.

    Args:
        value: This rank's value.
        dist: The ``torch.distributed`` module, or a stand-in with ``is_available``,
            ``is_initialized``, ``all_reduce`` and ``ReduceOp`` (for tests).

    Returns:
        ``(agreed value, whether an all-reduce ran)``.
    """
    dist = dist if dist is not None else torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return value, False
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item()), True


def _default_cpu_limit() -> int:
    import psutil

    return int(psutil.virtual_memory().available * 0.8)


class _Search:
    """State of one search: the probes so far and how to run one."""

    def __init__(
        self,
        step_fn: Callable[[int], None],
        device: torch.device,
        limit: int | None,
        peak_fn: Callable[[int], int] | None,
        repeats: int,
        clock: Callable[[], float],
        baseline_bytes: int = 0,
    ) -> None:
        self.step_fn, self.device, self.limit = step_fn, device, limit
        self.baseline_bytes = baseline_bytes
        self.peak_fn, self.repeats, self.clock = peak_fn, repeats, clock
        self.probes: list[Probe] = []

    def predicted_peak(self, batch: int) -> int | None:
        if self.peak_fn is not None:
            return self.peak_fn(batch)
        measured = sorted(
            (p.batch_size, p.peak_bytes) for p in self.probes if p.fits and p.peak_bytes is not None
        )
        if not measured:
            return None
        b0, p0 = measured[-1]
        if len(measured) == 1:
            return int(p0 * batch / b0)  # proportional: over-predicts, which is safe
        b1, p1 = measured[-2]
        slope = (p0 - p1) / (b0 - b1)
        return int(p0 + slope * (batch - b0))

    def probe(self, batch: int) -> Probe:
        predicted = self.predicted_peak(batch) if self.limit is not None else None
        if predicted is not None and self.limit is not None and predicted > self.limit:
            result = Probe(
                batch,
                False,
                peak_bytes=predicted,
                reason=f"predicted peak {predicted} B > limit {self.limit} B",
            )
        else:
            result = self._run(batch)
        self.probes.append(result)
        logger.debug("probe %s", result)
        return result

    def _run(self, batch: int) -> Probe:
        reason = None
        try:
            peak = self._warm_up(batch)
            times = []
            for _ in range(self.repeats):
                started = self.clock()
                self.step_fn(batch)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                times.append(self.clock() - started)
        except _OOM_ERRORS as err:
            reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
        if reason is not None:  # the exception and its frames are gone by now
            release_memory(self.device)
            return Probe(batch, False, reason=reason)
        if peak is not None and self.limit is not None and peak > self.limit:
            return Probe(
                batch,
                False,
                peak_bytes=peak,
                reason=f"measured peak {peak} B > limit {self.limit} B",
            )
        step_s = statistics.median(times) if times else None
        rate = batch / step_s if step_s else None
        return Probe(batch, True, step_s, rate, peak)

    def _warm_up(self, batch: int) -> int | None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.step_fn(batch)
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.limit is None or self.peak_fn is not None:
            self.step_fn(batch)  # the estimate guards the limit; profiling would slow it
            return None
        from gpuwise.sizing.memory.measured import measure_cpu_peak_bytes

        return measure_cpu_peak_bytes(lambda: self.step_fn(batch), self.baseline_bytes)

    def seed(self, max_batch: int) -> int:
        """Largest power of two whose predicted peak is within the limit (1 if unknown)."""
        if self.peak_fn is None or self.limit is None:
            return 1
        batch = 1
        while batch * 2 <= max_batch and self.peak_fn(batch * 2) <= self.limit:
            batch *= 2
        return batch

    def explore_smaller(self, fit: int, max_probes: int, extra: int = 3) -> None:
        """Probe smaller powers of two below ``fit`` while throughput keeps up.

        The largest batch that fits is often not the fastest (allocator pressure, cache
        sizes), so up to ``extra`` smaller batches are timed; the walk stops when one is
        more than 10 % slower than the best so far.
        """
        tried = {p.batch_size for p in self.probes}
        batch = 1 << max(fit - 1, 0).bit_length() - 1 if fit > 1 else 0
        while batch >= 1 and extra > 0 and len(self.probes) < max_probes:
            if batch not in tried:
                extra -= 1
                rate = self.probe(batch).samples_per_s or 0.0
                best = max((p.samples_per_s or 0.0) for p in self.probes if p.fits)
                if rate < 0.9 * best:
                    break
            batch //= 2

    def search(self, start: int, max_batch: int, max_probes: int) -> int:
        """Largest fitting batch: double from ``start``, halve if it fails, then bisect."""
        fit, fail = 0, None
        batch = start
        while len(self.probes) < max_probes:
            if self.probe(batch).fits:
                fit = batch
                if batch >= max_batch:
                    break
                batch = min(batch * 2, max_batch)
            else:
                fail = batch
                break
        while fit == 0 and fail is not None and fail > 1 and len(self.probes) < max_probes:
            batch = fail // 2
            if self.probe(batch).fits:
                fit = batch
            else:
                fail = batch
        while fit and fail is not None and fail - fit > 1 and len(self.probes) < max_probes:
            batch = (fit + fail) // 2
            if self.probe(batch).fits:
                fit = batch
            else:
                fail = batch
        return fit


def find_batch_size(
    step_fn: Callable[[int], None],
    *,
    start: int | None = None,
    max_batch: int = 1024,
    memory_limit_bytes: int | None = None,
    device: str | torch.device = "cpu",
    peak_bytes_fn: Callable[[int], int] | None = None,
    repeats: int = 3,
    max_probes: int = 24,
    clock: Callable[[], float] = time.perf_counter,
    dist: Any = None,
    cpu_baseline_bytes: int = 0,
) -> TuneResult:
    """Find the largest batch that fits and the batch with the best measured throughput.

    Args:
        step_fn: Runs one full step (forward, backward, optimizer) at a batch size.
        start: First batch to try (default: seeded from ``peak_bytes_fn`` and the limit,
            else 1).
        max_batch: Largest batch to try.
        memory_limit_bytes: Memory the step may use. On the CPU the default is 80 % of
            the memory available now; on CUDA the device's own memory (the allocator
            raises out-of-memory).
        device: Where ``step_fn`` runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        peak_bytes_fn: Predicted peak bytes at a batch size (e.g. from ``estimate``);
            probes predicted above the limit are skipped.
        repeats: Timed steps per probe, after one warm-up step.
        max_probes: Most probes to run.
        clock: Monotonic clock in seconds (injected by tests).
        dist: ``torch.distributed`` stand-in for tests (see ``agree_min``).
        cpu_baseline_bytes: Bytes the model already holds (parameters), added to the
            peaks measured on the CPU, where the profiler sees only the step's own
            allocations.

    Returns:
        The result; memory is released before returning.

    Raises:
        OutOfMemoryProbe: Not even batch 1 fits.
        UsageError: ``max_batch`` or ``repeats`` below 1.

    Example:
        >>> result = find_batch_size(lambda b: None, max_batch=8, repeats=1)
        >>> result.max_batch_size
        8
    """
    if max_batch < 1 or repeats < 1:
        raise UsageError(f"max_batch {max_batch} and repeats {repeats} must be at least 1")
    dev = torch.device(device)
    limit = memory_limit_bytes
    if limit is None and dev.type == "cpu":
        limit = _default_cpu_limit()
    before = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else None
    search = _Search(step_fn, dev, limit, peak_bytes_fn, repeats, clock, cpu_baseline_bytes)
    first = min(start or search.seed(max_batch), max_batch)
    fit = search.search(first, max_batch, max_probes)
    if fit:
        search.explore_smaller(fit, max_probes)
    release_memory(dev)
    if fit == 0:
        raise OutOfMemoryProbe(
            f"not even batch {min(p.batch_size for p in search.probes)} fits on {dev} "
            f"(limit {limit} B); reduce the model or input size, or use a larger device"
        )
    fitting = [p for p in search.probes if p.fits and p.samples_per_s is not None]
    best = max(fitting, key=lambda p: p.samples_per_s or 0.0, default=None)
    agreed_max, ranks = agree_min(fit, dist)
    best_batch = best.batch_size if best else agreed_max
    agreed_best, _ = agree_min(min(best_batch, agreed_max), dist)
    return TuneResult(
        max_batch_size=agreed_max,
        best_batch_size=agreed_best,
        best_samples_per_s=best.samples_per_s if best else None,
        probes=tuple(search.probes),
        device=str(dev),
        memory_limit_bytes=limit,
        memory_before_bytes=before,
        memory_after_bytes=torch.cuda.memory_allocated(dev) if dev.type == "cuda" else None,
        start_batch_size=first,
        capped=fit >= max_batch,
        ranks_agreed=ranks,
    )
