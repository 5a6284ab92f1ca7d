"""One rank's Kineto trace reduced to a ``RankSummary`` (what a worker process hands back).

The trace is read by the same streaming reader as a single trace (``reader``), with a tally
that also keeps, for every collective the rank took part in, when it began and ended and
what the profiler recorded about it. PyTorch's ``record_param_comms`` puts these keys in the
``args`` of the collective's host op and, from torch 2.1, of its NCCL/RCCL kernel too:

* ``Collective name`` (``allreduce``, ``_allgather_base``, ``send`` ...),
* ``Process Group Name`` / ``Process Group Description`` (``default_pg``, ``mesh_dp``),
* ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
* ``Seq`` (the group's sequence number of the call) where the torch version records it,
* ``Src Rank`` / ``Dst Rank`` for point-to-point calls.

Older traces carry only the host annotation ``nccl:all_reduce`` (or ``gloo:...``) with its
``Input Dims``; then the host call stands in for the kernel (``CollectiveColumns.source``).
A rank's node comes from a top-level ``host_name``/``hostname`` member when the exporter
wrote one, else from the file's name where torch's ``tensorboard_trace_handler`` named it
(``{host}_{pid}.{ms}.pt.trace.json``: real traces rarely carry a host field).
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any

import numpy as np

from gpuwise.records import Step
from gpuwise.records.rank_summary import CollectiveColumns, RankSummary, StepColumns
from gpuwise.records.trace import COLLECTIVES
from gpuwise.telemetry.readers.inputs import Piece, detect, read_piece
from gpuwise.telemetry.readers.kineto.calls.collectives import collective_kind
from gpuwise.telemetry.readers.kineto.calls.device import COMMUNICATION
from gpuwise.telemetry.readers.kineto.decode import NO_ARGS
from gpuwise.telemetry.readers.kineto.events import EventTally
from gpuwise.telemetry.readers.kineto.reader import SkippedEvent, TraceRead, _build, _parse

HOST_KEYS = ("host_name", "hostname", "hostName", "host")
_HOST_OP = re.compile(r"^(nccl|rccl|gloo|ucc|mpi):(\w+)$")
_STEP_NUMBER = re.compile(r"#(\d+)")
_HANDLER_NAME = re.compile(r"(?P<host>.+)_(?P<pid>\d+)\.(?P<ms>\d+)\.pt\.trace\.json(\.gz)?")
"""The name ``torch.profiler.tensorboard_trace_handler`` gives a trace: host, pid, ms."""
Row = tuple[float, float, int, int, int, str, int, int]
"""start, end, kind, size, seq, group, src, dst."""


class RankTally(EventTally):
    """``EventTally`` that also keeps each collective call and the rank's host name."""

    def __init__(self) -> None:
        super().__init__()
        self.node: str | None = None
        self.kernel_calls: list[Row] = []
        self.host_calls: list[Row] = []

    def add_member(self, key: str, value: Any) -> None:
        """Take a top-level member; a host name is kept as the rank's node."""
        super().add_member(key, value)
        if self.node is None:
            self.node = _host_name(key, value)

    def _device_event(self, ev: Any, kind: str, start: float, end: float) -> int:
        cls = super()._device_event(ev, kind, start, end)
        if kind == "kernel" and cls == COMMUNICATION:
            args = NO_ARGS if ev.args is None else ev.args
            tag = args.get("Collective name")
            name = tag if isinstance(tag, str) and tag else str(ev.name)
            self.kernel_calls.append(_row(name, start, end, args))
        return cls

    def _cpu(self, name: Any, cat: Any, start: float, end: float, ev: Any) -> None:
        super()._cpu(name, cat, start, end, ev)
        if type(name) is not str:
            return
        args = NO_ARGS if ev.args is None else ev.args
        if name == "record_param_comms":
            tag = args.get("Collective name")
            if isinstance(tag, str) and tag:
                self.host_calls.append(_row(tag, start, end, args))
            return
        match = _HOST_OP.match(name)
        if match:
            self.host_calls.append(_row(match.group(2), start, end, args))


def host_of_file(path: str) -> str | None:
    """The host in a trace file named as ``tensorboard_trace_handler`` names it, or None.

    Example:
        >>> host_of_file("logs/gpu-node-07_41233.1718000000123.pt.trace.json.gz")
        'gpu-node-07'
    """
    match = _HANDLER_NAME.fullmatch(os.path.basename(path))
    return match.group("host") if match else None


def _host_name(key: str, value: Any) -> str | None:
    if key in HOST_KEYS and isinstance(value, str) and value:
        return value
    if isinstance(value, dict):
        for k in HOST_KEYS:
            if isinstance(value.get(k), str) and value[k]:
                return str(value[k])
    return None


def _row(what: str, start: float, end: float, args: Any) -> Row:
    kind = COLLECTIVES.index(collective_kind(what, what))
    group = args.get("Process Group Name") or args.get("Process Group Description") or "default"
    seq = args.get("Seq", args.get("seq"))
    src, dst = args.get("Src Rank"), args.get("Dst Rank")
    return (
        start,
        end,
        kind,
        _size(args),
        seq if type(seq) is int else -1,
        str(group),
        src if type(src) is int else -1,
        dst if type(dst) is int else -1,
    )


def _size(args: Any) -> int:
    n = args.get("In msg nelems")
    if type(n) is int:
        return n
    dims = args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list):
        first = dims[0]
        if all(type(d) is int for d in first):
            return math.prod(first)
    return -1


def read_input(path: str, strict: bool = False) -> RankSummary | Piece:
    """What a worker of ``gpuwise analyze`` hands back for one input file.

    Args:
        path: A file ``analyze`` accepts.
        strict: Raise on the first corrupt record.

    Returns:
        A ``RankSummary`` for a profiler trace, else the file's ``Piece``.
    """
    if detect(path) == "kineto":
        return read_rank_summary(path, strict=strict)
    return read_piece(path, strict=strict)


def as_piece(s: RankSummary) -> Piece:
    """The ``Piece`` a rank summary stands for (what ``read_piece`` gives for the trace)."""
    return Piece(
        s.file,
        "kineto",
        steps=list(s.steps),
        devices=list(s.devices),
        skipped=list(s.skipped),
        trace=s.trace,
    )


def read_rank_summary(path: str | os.PathLike[str], *, strict: bool = False) -> RankSummary:
    """Read one rank's trace and reduce it to a ``RankSummary`` (a worker's whole job).

    Args:
        path: The rank's ``.json``/``.json.gz`` profiler trace.
        strict: Raise on the first corrupt event instead of skipping it.

    Returns:
        The summary: trace section, Steps, per-step and per-collective columns.

    Raises:
        LogFormatError: The file is missing or not a trace (or, strict, corrupt).

    Example:
        >>> s = read_rank_summary("rank3.json.gz")  # doctest: +SKIP
        >>> s.rank, len(s.collectives)  # doctest: +SKIP
        (3, 412)
    """
    t0 = time.perf_counter()
    name = os.fspath(path)
    tally = RankTally()
    skipped: list[SkippedEvent] = []
    truncated = _parse(name, tally, skipped, strict)
    tr = _build(name, tally, skipped, truncated)
    return summarize_rank(tr, tally, time.perf_counter() - t0)


def summarize_rank(tr: TraceRead, tally: RankTally, read_s: float = 0.0) -> RankSummary:
    """Build the summary of a read trace from its reader result and tally."""
    rank = tr.rank if tr.rank is not None else -1
    base = tally.base_us or 0.0
    steps = _step_columns(tr, tally, base)
    return RankSummary(
        file=tr.path,
        rank=rank,
        node=tally.node or host_of_file(tr.path),
        trace=tr.to_section(),
        steps=tuple(tr.steps),
        devices=tuple(tr.devices),
        skipped=tuple(
            {"file": tr.path, "record": s.record, "reason": s.reason} for s in tr.skipped
        ),
        step_table=steps,
        collectives=_collectives(tally, base, rank, steps),
        kernel_mean_us=_kernel_means(tr),
        read_s=read_s,
    )


def _step_columns(tr: TraceRead, tally: RankTally, base: float) -> StepColumns:
    named = sorted((span, name) for name, span in tally.steps.items())
    if not named:
        return StepColumns()
    n = len(named)
    start = np.array([s for (s, _), _ in named], dtype=np.float64)
    dur = np.array([d for (_, d), _ in named], dtype=np.float64)
    facts = tr.facts.steps if tr.facts is not None and len(tr.facts.steps) == n else None
    own: list[Step] = tr.steps if len(tr.steps) == n else []

    def col(values: list[float]) -> np.ndarray[Any, Any]:
        return np.array(values, dtype=np.float64) if values else np.zeros(n)

    return StepColumns(
        number=np.array([_number(name, i) for i, (_, name) in enumerate(named)], dtype=np.int64),
        start_us=start + base,
        end_us=start + dur + base,
        input_s=col([s.data_wait_s for s in own]),
        compute_s=col([f.compute_s for f in facts] if facts else []),
        comm_s=col([f.comm_total_s for f in facts] if facts else []),
        idle_s=np.maximum(
            col([f.idle_s for f in facts] if facts else []) - _tail_s(tally, start, start + dur),
            0.0,
        ),
    )


def _tail_s(
    tally: RankTally, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Per step, the time from the last device event's end in it to the step's end.

    A rank done before the step ends (the others still work) idles there; that is not a
    stall of its own, so the host-stall figure leaves it out.
    """
    ends = np.sort(np.frombuffer(tally.device.ends, dtype=np.float64))
    if not ends.size:
        return np.zeros(a.shape)
    i = np.searchsorted(ends, b, side="right") - 1
    last = np.where(i >= 0, ends[np.clip(i, 0, None)], a)
    tail: np.ndarray[Any, Any] = (b - np.maximum(last, a)) * 1e-6
    return tail


def _number(name: str, index: int) -> int:
    match = _STEP_NUMBER.search(name)
    return int(match.group(1)) if match else index


def _collectives(tally: RankTally, base: float, rank: int, steps: StepColumns) -> CollectiveColumns:
    rows, source = (
        (tally.kernel_calls, "kernel") if tally.kernel_calls else (tally.host_calls, "host")
    )
    if not rows:
        return CollectiveColumns(source=source)
    rows = sorted(rows)
    groups: dict[str, int] = {}
    gid = [groups.setdefault(r[5], len(groups)) for r in rows]
    start = np.array([r[0] for r in rows], dtype=np.float64) + base
    src = np.array([r[6] for r in rows], dtype=np.int32)
    dst = np.array([r[7] for r in rows], dtype=np.int32)
    peer = np.where(src == rank, dst, np.where(dst == rank, src, -1)).astype(np.int32)
    return CollectiveColumns(
        start_us=start,
        end_us=np.array([r[1] for r in rows], dtype=np.float64) + base,
        kind=np.array([r[2] for r in rows], dtype=np.int8),
        size=np.array([r[3] for r in rows], dtype=np.int64),
        seq=np.array([r[4] for r in rows], dtype=np.int64),
        group=np.array(gid, dtype=np.int32),
        peer=peer,
        step=_step_of(start, steps),
        groups=tuple(groups),
        source=source,
    )


def _step_of(start: np.ndarray[Any, Any], steps: StepColumns) -> np.ndarray[Any, Any]:
    if not len(steps):
        return np.full(start.shape, -1, dtype=np.int64)
    i = np.searchsorted(steps.start_us, start, side="right") - 1
    inside = (i >= 0) & (start < steps.end_us[np.clip(i, 0, None)])
    return np.where(inside, steps.number[np.clip(i, 0, None)], -1).astype(np.int64)


def _kernel_means(tr: TraceRead) -> dict[str, float]:
    if tr.facts is None:
        return {}
    return {
        k.name: k.total_s / k.count * 1e6
        for k in tr.facts.top_kernels
        if k.kernel_class == "compute" and k.count
    }
