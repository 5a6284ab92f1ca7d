"""Reduce Kineto trace events, one at a time, to the intervals and counts the diagnosis uses.

Times are kept in microseconds relative to the first event's timestamp (doubles stay exact
to well under a microsecond that way) in flat ``array('d')`` columns, so a trace with
millions of kernels costs 16 bytes per kernel, not a dict each.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.calls.copies import Copies
from gpuwise.telemetry.readers.kineto.calls.device import (
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    DeviceEvents,
)
from gpuwise.telemetry.readers.kineto.calls.host import HostCalls
from gpuwise.telemetry.readers.kineto.decode import (
    NO_ARGS,
    NOT_COMPLETE,
    PASSING,
    TraceEvent,
    event_of,
)
from gpuwise.telemetry.readers.kineto.excerpt import first_launch_loads, outside_wait
from gpuwise.telemetry.readers.kineto.intervals import Intervals, busy_before
from gpuwise.telemetry.readers.kineto.job.engine_steps import EngineSteps
from gpuwise.telemetry.readers.kineto.job.kind import (
    BACKWARD,
    COMPILED,
    CONV,
    LOADER,
    OPTIMIZER,
    STEP,
    JobMarks,
    kernel_marks,
)
from gpuwise.telemetry.readers.kineto.job.phases import read_timeline
from gpuwise.telemetry.readers.kineto.job.timeline import Timeline
from gpuwise.telemetry.readers.kineto.members import (
    EVENT_KINDS,
    device_dict,
    distributed_info,
    image_like,
)

INF = math.inf
OLD_CATEGORIES = frozenset({"Operator", "Runtime", "Kernel", "Memcpy", "Memset"})
NEW_CATEGORIES = frozenset(
    {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
)


class EventTally:
    """Accumulates what ``read_trace`` reports, one event at a time."""

    def __init__(self) -> None:
        self.events = 0
        self.saw_events = False
        self.invalid: list[tuple[int, str]] = []
        self.base_us: float | None = None
        self.span = [float("inf"), float("-inf")]
        self.loader, self.compiled = Intervals(), Intervals()
        self.steps: dict[str, tuple[float, float]] = {}
        self.copies = Copies()
        self.sync_by_name: Counter[str] = Counter()
        self.sync_at: list[tuple[float, str]] = []  # (start, name) of each cuda_sync event
        self.categories: set[str] = set()
        self.gpu_ids: set[int] = set()
        self.device_props: list[dict[str, Any]] = []
        self.rank: int | None = None
        self._kind_of: dict[Any, str | None] = {}
        self._plain: dict[str, bool] = {}  # host span names no collector keeps
        self.device = DeviceEvents()
        self.host = HostCalls()
        self.marks = JobMarks()
        self.engine_steps = EngineSteps()
        self.unplaced: Counter[str] = Counter()
        self.profiler_ranges = 0
        self.nonfinite = 0
        self.compiled_regions = 0
        self.image_inputs: bool | None = None
        self.distributed: dict[str, Any] = {}
        self._head_wait: tuple[tuple[float, float] | None] | None = None
        self._loads: tuple[tuple[float, float, int] | None] | None = None
        self.timeline = Timeline()
        self._phases: dict[str, Any] | None = None

    def add_member(self, key: str, value: Any) -> None:
        """Take a top-level member other than ``traceEvents``."""
        if key == "deviceProperties" and isinstance(value, list):
            self.device_props = [d for d in value if isinstance(d, dict)]
        elif key == "distributedInfo" and isinstance(value, dict):
            rank = value.get("rank")
            self.rank = rank if isinstance(rank, int) else None
            self.distributed = distributed_info(value)
        elif key == "baseTimeNanoseconds" and isinstance(value, int):
            self.distributed["base_time_ns"] = value

    def add(self, ev: Any) -> None:
        """Take one trace event."""
        self.add_batch([ev])

    def add_batch(self, events: list[Any]) -> None:
        """Take trace events, in file order (the hot loop: a few dict reads per event).

        The span's bounds and the clock's base stay in locals until the batch ends.
        """
        self.saw_events = True
        kind_of, host, passing = self._kind_of, self.host, PASSING
        lo, hi = self.span
        base = self.base_us
        index = self.events - 1
        for ev in events:
            index += 1
            if type(ev) is not TraceEvent:
                if type(ev) in passing:
                    continue
                ev = event_of(ev)
                if ev is None:
                    self.invalid.append((index, "event is not a JSON object"))
                    continue
                if ev is NOT_COMPLETE:
                    continue
            ts: Any = ev.ts
            dur: Any = ev.dur
            tt, td = type(ts), type(dur)
            if (tt is not float and tt is not int) or (td is not float and td is not int):
                self.invalid.append(
                    (index, f"complete event without numeric ts/dur: {ts!r}/{dur!r}")
                )
                continue
            if not (0 <= ts < INF and 0 <= dur < INF):
                self.nonfinite += 1
                self.invalid.append((index, f"non-finite or negative ts/dur: {ts!r}/{dur!r}"))
                continue
            if base is None:
                base = self.base_us = float(ts)
            start = ts - base
            end = start + dur
            cat = ev.cat
            kind = kind_of.get(cat, "?") if type(cat) is str else None
            if kind == "?":
                kind = self._kind(cat)
            if kind == "trace":
                continue
            if start < lo:
                lo = start
            if end > hi:
                hi = end
            if kind == "cpu":
                self._cpu(ev.name, cat, start, end, ev)
            elif kind == "runtime":
                host.runtime(ev.name, start, end, ev.args)
            elif kind == "kernel" or kind == "memcpy" or kind == "memset":
                self._device_event(ev, kind, start, end)
            elif kind == "sync":
                sync_name = str(ev.name)
                self.sync_by_name[sync_name] += 1
                self.sync_at.append((start, sync_name))
            elif kind == "range":
                self.profiler_ranges += 1
            elif kind is None:
                self._unplaced(ev, cat, start, end)
        self.span[0], self.span[1] = lo, hi
        self.events = index + 1
        self.device.flush()

    def _kind(self, cat: Any) -> str | None:
        kind = self._kind_of.get(cat, "?")
        if kind == "?":
            kind = EVENT_KINDS.get(cat.lower()) if isinstance(cat, str) else None
            self._kind_of[cat] = kind
            if isinstance(cat, str):
                self.categories.add(cat)
        return kind

    def _device_event(self, ev: Any, kind: str, start: float, end: float) -> int:
        """Take one kernel, memcpy or memset; return its class (``device.COMPUTE`` ...)."""
        args = ev.args
        if args is None:
            args = NO_ARGS
        device = args.device
        if type(device) is not int:
            device = ev.pid
        if type(device) is int and device not in self.gpu_ids:
            self.gpu_ids.add(device)
        name = ev.name
        if type(name) is not str:
            name = str(name)
        if kind == "memcpy":
            self.copies.add(name, args, start, end)
        return self.device.add(name, kind, start, end, args)

    def _unplaced(self, ev: Any, cat: Any, start: float, end: float) -> None:
        """An event of a category this reader does not know: counted, named, never dropped."""
        name = str(cat) if cat is not None else "(no category)"
        if name.lower() in HOST_CATEGORIES or name.lower() in DEVICE_CATEGORIES:
            return
        self.unplaced[name] += 1
        args = ev.args
        if args is not None and ("stream" in args or "device" in args):
            self.device.add(str(ev.name), "other", start, end, args)

    def _is_plain(self, name: str) -> bool:
        """True for a host span name that no collector keeps (most ``aten::`` ops)."""
        plain = not (
            self.engine_steps.matters(name)
            or self.timeline.matters(name)
            or self.marks.marks_of(name)
        )
        self._plain[name] = plain
        return plain

    def _cpu(self, name: Any, cat: Any, start: float, end: float, ev: Any) -> None:
        if type(name) is not str:
            name = str(name)
        if cat == "cpu_op" or cat == "Operator":
            self.host.cpu_op(name, ev.args)
        plain = self._plain.get(name)
        if plain is None:
            plain = self._is_plain(name)
        if plain:  # only counted: the same as the calls below, which keep nothing of it
            self.marks.spans += 1
            return
        self.engine_steps.host(name, start, end, ev)
        self.timeline.host(name, start, end)
        mark = self.marks.host(name)
        if not mark:
            return
        if mark & STEP and name.startswith("ProfilerStep#"):
            self.steps.setdefault(name, (start, end - start))
        elif mark & LOADER:
            self.loader.add(start, end)
        elif mark & COMPILED:
            self.compiled_regions += 1
            self.compiled.add(start, end)
        elif mark & CONV and self.image_inputs is not True:
            self.image_inputs = image_like(ev.args)

    def window(self) -> tuple[float, float, str]:
        """Return ``(start_us, end_us, source)`` of the analysis window.

        Profiler steps when there are any; else the span of the device work
        (``device_span``): a trace is often an excerpt, and the host's prologue before the
        first kernel and epilogue after the last are not the job's idle time; else, for a
        trace without device work, the span of every timed event.
        """
        if self.steps:
            spans = self.steps.values()
            return (min(s for s, _ in spans), max(s + d for s, d in spans), "profiler_steps")
        steady = self.phases()["steady_us"]
        if steady is not None:
            return steady[0], steady[1], "steady_state"
        starts, ends = self.gpu_all()
        if starts.size:
            wait, loads = self.head_wait(), self.first_launches()
            lo = float(starts.min()) if wait is None else wait[1]
            if loads is not None:
                lo = max(lo, float(starts[starts >= loads[1]].min()))
            return lo, float(ends.max()), "device_span"
        if self.span[0] <= self.span[1]:
            return self.span[0], self.span[1], "whole_trace"
        return 0.0, 0.0, "empty"

    def phases(self) -> dict[str, Any]:
        """The timeline's steps, phases and one-time costs (``phases``), read once."""
        if self._phases is None:
            trained = self.marks.host_count(BACKWARD | OPTIMIZER) > 0 or (
                not self.marks.spans and any(kernel_marks(n) & BACKWARD for n in self.device.names)
            )
            self._phases = read_timeline(
                self.timeline,
                sorted(self.steps.values()),
                (self.span[0], self.span[1]) if self.span[0] <= self.span[1] else (0.0, 0.0),
                self.host,
                (self.device.names, lambda: self.device.columns(self.host)),
                trained,
                self.loader.arrays(),
            )
        return self._phases

    def head_wait(self) -> tuple[float, float] | None:
        """``(wait_from, cut)`` of a wait on work queued before the trace began (µs).

        Only for traces without profiler steps: the device work before ``cut`` belongs to
        the excerpt's edge (``excerpt.outside_wait``).
        """
        if self.steps:
            return None
        if self._head_wait is None:
            self._head_wait = (outside_wait(*self.gpu_all(), *self.host.waits()),)
        return self._head_wait[0]

    def first_launches(self) -> tuple[float, float, int] | None:
        """``(load_us, cut_us, launches)`` of first launches loading code at the head.

        Only for traces judged over their device span (no profiler steps, no steady
        state): the device work before ``cut`` is start-up (``excerpt.first_launch_loads``).
        """
        if self.steps or self.phases()["steady_us"] is not None:
            return None
        if self._loads is None:
            slow = (
                np.frombuffer(self.host.slow_starts, dtype=np.float64),
                np.frombuffer(self.host.slow_ends, dtype=np.float64),
            )
            self._loads = (first_launch_loads(*self.gpu_all(), *slow),)
        return self._loads[0]

    def vendor(self) -> str | None:
        """The device vendor: from ``deviceProperties`` names, else from the runtime calls."""
        for p in self.device_props:
            name = str(p.get("name") or "").lower()
            if "amd" in name or "instinct" in name or "radeon" in name or "gcnArchName" in p:
                return "amd"
            if any(k in name for k in ("nvidia", "tesla", "geforce", "quadro", "rtx")):
                return "nvidia"
        return self.host.vendor()

    def naming(self) -> str:
        """Return which generation of category names the trace uses."""
        old, new = bool(self.categories & OLD_CATEGORIES), bool(self.categories & NEW_CATEGORIES)
        return "mixed" if old and new else "old" if old else "new" if new else "unknown"

    def gpu_all(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the kernel, memcpy and memset intervals together."""
        return self.device.of_kind("kernel", "memcpy", "memset")

    def gpu_span_us(self) -> float | None:
        """Return first GPU event start to last GPU event end, or None without GPU events."""
        starts, ends = self.gpu_all()
        return float(ends.max() - starts.min()) if starts.size else None

    def kernel_sum_in(self, lo: float, hi: float) -> float:
        """Return the summed kernel time (microseconds) of kernels clipped to the window."""
        starts, ends = self.device.of_kind("kernel")
        return float(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None).sum())

    def sync_stats(self, lo: float, hi: float) -> dict[str, Any]:
        """Return ``cuda_sync`` event counts and the host calls that blocked in the window.

        ``events``/``by_name`` count the profiler's ``cuda_sync`` events: the whole
        trace's, or the window's where the window is the steady state (start-up's are
        one-time costs); ``runtime_calls``/``runtime_s`` count the synchronize calls (CUDA
        and HIP);
        ``blocking`` lists every blocking call by name: synchronisations, allocator calls
        and synchronous copies, with their host time and call site.
        """
        blocking = self.host.blocking(lo, hi, busy_before(*self.gpu_all()))
        syncs = [b for b in blocking if b["kind"] == "sync"]
        by_name = self.sync_by_name
        if not self.steps and self.phases()["steady_us"] is not None:
            # the steady state is judged: start-up's sync events are one-time costs
            by_name = Counter(n for at, n in self.sync_at if lo <= at < hi)
        return {
            "events": int(sum(by_name.values())),
            "by_name": dict(by_name),
            "runtime_calls": sum(int(b["calls"]) for b in syncs),
            "runtime_s": sum(float(b["time_s"]) for b in syncs),
            "blocking": blocking,
        }

    def device_dicts(self) -> list[dict[str, Any]]:
        """Return the GPUs that ran work (all listed ones when none did) as device dicts."""
        props = [p for p in self.device_props if p.get("id") in self.gpu_ids]
        return [device_dict(p) for p in (props or self.device_props)]
