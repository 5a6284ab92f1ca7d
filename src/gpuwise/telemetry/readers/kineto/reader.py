"""Reader of PyTorch profiler (Kineto) Chrome traces: ``.json`` or ``.json.gz``.

The trace is parsed as a stream (``_json_stream``): each event is decoded, reduced to the
few numbers the diagnosis needs (intervals of GPU work, profiler steps, data-loader waits,
host-to-device copies, synchronisations) and dropped. Both generations of category names
are read: the old ``Operator``/``Runtime``/``Kernel``/``Memcpy``/``Memset`` and the new
``cpu_op``/``cuda_runtime``/``kernel``/``gpu_memcpy``/``gpu_memset``/``cuda_sync``/
``user_annotation``, and MTIA's ``mtia_ccp_events``/``mtia_runtime``. Every device event is
also kept by name, class and stream for the device facts (``facts``); categories
the reader does not know are counted and named, never silently dropped. Timestamps are
microseconds, as Chrome traces define them.

Example:
    >>> tr = read_trace("worker0.pt.trace.json.gz")  # doctest: +SKIP
    >>> round(tr.dataloader_fraction, 3), len(tr.steps)  # doctest: +SKIP
    (0.396, 6)
"""

from __future__ import annotations

import contextlib
import gc
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuwise.errors import LogFormatError
from gpuwise.records import Step
from gpuwise.records.trace import TraceFacts
from gpuwise.records.trace_section import TraceSection
from gpuwise.telemetry.readers._json_stream import (
    Corrupt,
    JsonStream,
    JsonStreamError,
    TextSource,
)
from gpuwise.telemetry.readers.kineto.decode import decode_events
from gpuwise.telemetry.readers.kineto.events import EventTally
from gpuwise.telemetry.readers.kineto.facts import trace_facts
from gpuwise.telemetry.readers.kineto.intervals import union_s
from gpuwise.telemetry.readers.kineto.steps import step_records

US = 1e-6
"""Chrome trace timestamps and durations are microseconds."""


class UnusableEventError(LogFormatError):
    """A strict read met an unusable event (non-numeric, non-finite or negative time)."""


@dataclass(frozen=True, slots=True)
class SkippedEvent:
    """A trace event that could not be used.

    Attributes:
        record: Index of the event in ``traceEvents`` (from 0).
        offset: Character offset of the problem in the (unpacked) JSON text, when known.
        reason: What was wrong.
    """

    record: int
    offset: int | None
    reason: str


@dataclass(frozen=True)
class TraceRead:
    """What a Kineto trace says about the job.

    Attributes:
        path: The file read.
        category_names: ``"old"`` (2021 Kineto), ``"new"`` or ``"unknown"``.
        events: Trace events decoded.
        skipped: Events that were malformed or unusable, with the reason.
        truncated: True when the file ended before the JSON document did.
        window_s: Analysis window: first ProfilerStep start to last ProfilerStep end;
            without ProfilerSteps the span of the device work (the host's prologue and
            epilogue of an excerpt are not the job's idle); without device work the span
            of all timed events.
        window_source: ``"profiler_steps"``, ``"steady_state"`` (no ProfilerStep: the
            steady steps of the optimizer steps or the recurring kernel, after start-up
            and warm-up; ``phases``), ``"device_span"`` (neither: first
            device event to last) or ``"whole_trace"`` (no device event either).
        step_durations_s: Duration of each ProfilerStep, in order.
        dataloader_s: Time inside DataLoader ``__next__`` within the window.
        gpu_busy_s: Union of kernel, memcpy and memset intervals within the window.
        kernel_s: Sum of kernel durations within the window.
        memcpy_s: Union of memcpy intervals within the window.
        memset_s: Union of memset intervals within the window.
        gpu_active_span_s: First GPU event start to last GPU event end (whole trace).
        copies: Per direction and memory kind (``"h2d"`` -> ``"pageable"``/``"pinned"``/...)
            the ``count``, ``bytes``, ``time_s`` and ``bandwidth_gb_s`` of memcpy events in
            the whole trace.
        sync: ``events`` (``cuda_sync`` events), ``by_name`` counts, ``runtime_calls`` and
            ``runtime_s`` of blocking ``cuda*Synchronize`` runtime calls in the window.
        devices: GPUs from ``deviceProperties`` that ran work, as NVML-style device dicts.
        rank: ``distributedInfo.rank`` when the trace has it.
        steps: One Step per ProfilerStep (data wait, host-to-device copy, compute).
        start_us: Timestamp of the first event (the trace's clock, microseconds).
        facts: Device facts: kernel classes, communication overlap, idle split, launch
            statistics, top kernels, per-step figures (``records.trace.TraceFacts``).
    """

    path: str
    category_names: str
    events: int
    skipped: list[SkippedEvent]
    truncated: bool
    window_s: float
    window_source: str
    step_durations_s: list[float]
    dataloader_s: float
    gpu_busy_s: float
    kernel_s: float
    memcpy_s: float
    memset_s: float
    gpu_active_span_s: float | None
    copies: dict[str, dict[str, dict[str, float | int | None]]]
    sync: dict[str, Any]
    devices: list[dict[str, Any]]
    rank: int | None
    steps: list[Step] = field(default_factory=list)
    facts: TraceFacts | None = None
    start_us: float | None = None

    def fraction(self, seconds: float) -> float | None:
        """Return ``seconds`` as a share of the window (None for an empty window)."""
        return seconds / self.window_s if self.window_s > 0 else None

    @property
    def dataloader_fraction(self) -> float | None:
        """Share of the window spent in DataLoader ``__next__``."""
        return self.fraction(self.dataloader_s)

    @property
    def gpu_busy_fraction(self) -> float | None:
        """Share of the window with any kernel, memcpy or memset running."""
        return self.fraction(self.gpu_busy_s)

    @property
    def memcpy_fraction(self) -> float | None:
        """Share of the window with a memcpy running."""
        return self.fraction(self.memcpy_s)

    def to_section(self) -> TraceSection:
        """Return the Run's trace section: these figures and the device facts, typed."""
        steps = self.step_durations_s
        return TraceSection(
            file=os.path.basename(self.path),
            format="kineto",
            category_names=self.category_names,
            events=self.events,
            skipped=len(self.skipped),
            truncated=self.truncated,
            window_s=self.window_s,
            window_source=self.window_source,
            profiler_steps=len(steps),
            step_mean_s=sum(steps) / len(steps) if steps else None,
            dataloader_s=self.dataloader_s,
            dataloader_fraction=self.dataloader_fraction,
            gpu_busy_s=self.gpu_busy_s,
            gpu_busy_fraction=self.gpu_busy_fraction,
            kernel_s=self.kernel_s,
            memcpy_s=self.memcpy_s,
            memcpy_fraction=self.memcpy_fraction,
            memset_s=self.memset_s,
            gpu_active_span_s=self.gpu_active_span_s,
            copies=self.copies,
            sync=self.sync,
            rank=self.rank,
            start_us=self.start_us,
            facts=self.facts,
            busy_fraction=self.gpu_busy_fraction,
        )


def read_trace(path: str | os.PathLike[str], *, strict: bool = True) -> TraceRead:
    """Read a PyTorch profiler (Kineto) Chrome trace.

    Args:
        path: A ``.json`` trace, gzip-compressed or not (detected from its first bytes).
        strict: Raise on the first malformed or truncated part (default). With False,
            malformed events are skipped and listed in ``skipped``, and a truncated file
            yields what was read before the cut.

    Returns:
        The window, step, GPU-busy, copy and sync figures, and Steps built from
        ProfilerSteps.

    Raises:
        LogFormatError: The file is missing, not a Chrome trace, or (``strict``) corrupt;
            the message names the file and the character offset or event.

    Example:
        >>> tr = read_trace("trace.json.gz")  # doctest: +SKIP
        >>> tr.gpu_busy_fraction  # doctest: +SKIP
        0.56
    """
    name = os.fspath(path)
    tally = EventTally()
    skipped: list[SkippedEvent] = []
    truncated = _parse(name, tally, skipped, strict)
    return _build(name, tally, skipped, truncated)


def _open_text(path: str) -> TextSource:
    try:
        return TextSource(path)
    except OSError as err:
        raise LogFormatError(f"cannot open trace {path!r}: {err.strerror}; check the path") from err


def _parse(path: str, tally: EventTally, skipped: list[SkippedEvent], strict: bool) -> bool:
    """Stream the document into ``tally``; return True when the input was truncated."""
    cut: list[Exception] = []

    def on_read_error(err: Exception) -> None:
        if strict:
            raise LogFormatError(
                f"trace {path!r} is truncated or its gzip stream is corrupt ({err}); "
                "re-copy the file, or read what is there with strict=False"
            ) from err
        cut.append(err)

    with _open_text(path) as fh:
        stream = JsonStream(fh, on_read_error)
        corrupt: list[Corrupt] | None = None if strict else []
        try:
            with _collector_paused():
                _walk(stream, tally, corrupt)
        except (JsonStreamError, zlib.error, UnicodeError) as err:
            if strict or not isinstance(err, JsonStreamError):
                raise _format_error(path, err, tally.events) from err
            cut.append(err)
            skipped.append(SkippedEvent(tally.events, err.offset, f"document ends: {err}"))
    if strict and tally.invalid:
        index, reason = tally.invalid[0]
        raise UnusableEventError(
            f"trace {path!r} event #{index} is unusable: {reason}; "
            f"drop --strict (strict=False) to skip such events ({len(tally.invalid)} in this file)"
        )
    for c in corrupt or []:
        skipped.append(SkippedEvent(c.index, c.offset, f"malformed JSON: {c.reason}"))
    skipped.extend(SkippedEvent(i, None, reason) for i, reason in tally.invalid)
    return bool(cut)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while events stream in.

    Each batch of decoded events is a few thousand dicts that die together and hold no
    reference cycles (reference counting frees them); the collector would still scan every
    live object each time allocations pile up, ~15 % of the read. It is restored after.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _walk(stream: JsonStream, tally: EventTally, corrupt: list[Corrupt] | None) -> None:
    first = stream.peek()
    if first == "[":
        for batch in stream.batches(corrupt, decode_events):
            tally.add_batch(batch)
        return
    if first != "{":
        raise JsonStreamError("expected a JSON object or array (a Chrome trace)", 0)
    for key in stream.members():
        if key == "traceEvents":
            for batch in stream.batches(corrupt, decode_events):
                tally.add_batch(batch)
        else:
            tally.add_member(key, stream.value())
    if not tally.saw_events:
        raise JsonStreamError("no 'traceEvents' array in the document", stream.offset)


def _format_error(path: str, err: Exception, events: int) -> LogFormatError:
    where = f"character {err.offset}" if isinstance(err, JsonStreamError) else "its data"
    return LogFormatError(
        f"trace {path!r} is not a readable Chrome/Kineto trace at {where} "
        f"(after {events} events): {err}; expected a torch.profiler export "
        "(.json or .json.gz); drop --strict (strict=False) to skip corrupt events"
    )


def _seconds(us: float | None) -> float | None:
    return None if us is None else us * US


def _build(path: str, t: EventTally, skipped: list[SkippedEvent], truncated: bool) -> TraceRead:
    w0, w1, source = t.window()
    steps_us = sorted(t.steps.values())
    facts = trace_facts(t)
    main = facts.compute_stream()
    return TraceRead(
        path=path,
        category_names=t.naming(),
        events=t.events,
        skipped=skipped,
        truncated=truncated,
        window_s=(w1 - w0) * US,
        window_source=source,
        step_durations_s=[dur * US for _, dur in steps_us],
        dataloader_s=union_s(t.loader, w0, w1),
        gpu_busy_s=union_s(t.gpu_all(), w0, w1),
        kernel_s=t.kernel_sum_in(w0, w1) * US,
        memcpy_s=union_s(t.device.of_kind("memcpy"), w0, w1),
        memset_s=union_s(t.device.of_kind("memset"), w0, w1),
        gpu_active_span_s=_seconds(t.gpu_span_us()),
        copies=t.copies.stats(),
        sync=t.sync_stats(w0, w1),
        devices=t.device_dicts(),
        rank=t.rank,
        steps=step_records(t, w0, rank=t.rank or 0, stream=None if main is None else main.stream),
        facts=facts,
        start_us=t.base_us,
    )
