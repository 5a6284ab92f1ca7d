"""Device events of a Kineto trace, kept by name, class and stream, in flat columns.

Every device event (CUDA/ROCm kernel, memcpy, memset, MTIA command-processor event, or an
event of an unknown category that names a stream) becomes one row: start, end, stream,
kernel class, name index and, when the trace links it to a host launch call through
``args.correlation``, the launch time. Names are interned so a million launches of twenty
kernels cost twenty strings.

Kernel classes (DESIGN.md vocabulary): ``compute``, ``communication``, ``memory`` and
``other`` (events of a category the reader could not place; they are counted and named).
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import numpy as np

from gpuwise.records.trace import COLLECTIVES
from gpuwise.telemetry.readers.kineto.calls.collectives import (
    collective_kind,
    collective_tag,
    is_communication,
)
from gpuwise.telemetry.readers.kineto.calls.host import HostCalls
from gpuwise.telemetry.readers.kineto.intervals import member

__all__ = ["DeviceColumns", "DeviceEvents", "collective_kind", "kernel_class"]

COMPUTE, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KIND_CODES = {"kernel": 0, "memcpy": 1, "memset": 2, "other": 3}
"""Event kinds as the reader routes them (``other``: an unknown category naming a stream)."""
CLASS_NAMES = ("compute", "communication", "memory", "other")

DEVICE_CATEGORIES = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "mtia_ccp_events": "kernel",
}
"""Categories (lower-cased) of work that runs on the device: CUDA/ROCm and MTIA."""

LAUNCH_CATEGORIES = frozenset(
    {"cuda_runtime", "cuda_driver", "runtime", "mtia_runtime", "privateuse1_runtime"}
)
"""Host calls that launch device work; their ``args.correlation`` links the device event."""

HOST_CATEGORIES = frozenset(
    {
        "cpu_op",
        "operator",
        "user_annotation",
        "gpu_user_annotation",
        "python_function",
        "cuda_sync",
        "trace",
        "overhead",
        "cpu_instant_event",
        "external_correlation",
        "collective_comm",
        "cuda_profiler_range",
        *LAUNCH_CATEGORIES,
    }
)
"""Categories that are host-side spans or markers, not device time."""

_MEMORY_NAME = re.compile(r"^(Memcpy|Memset|dma)", re.IGNORECASE)
_COMPILED = re.compile(r"^triton_|^triton__")


def kernel_class(name: str, kind: str, args: Any) -> int:
    """Return the class of one device event (``COMPUTE`` ... ``OTHER``).

    Args:
        name: Kernel or copy name.
        kind: ``"kernel"``, ``"memcpy"``, ``"memset"`` or ``"other"`` (unknown category).
        args: The event's ``args``; NCCL kernels of newer traces carry a collective name.
    """
    if kind in ("memcpy", "memset") or _MEMORY_NAME.match(name):
        return MEMORY
    if is_communication(name, args):
        return COMMUNICATION
    return OTHER if kind == "other" else COMPUTE


PRECISIONS = ("fp32", "tf32", "half", "unknown")
# searched in the lower-cased name: case-blind patterns cost several times more
_GEMM_CONV = re.compile(r"gemm|conv|matmul|wgrad|dgrad|fprop")
_HALF = re.compile(r"h884|h1688|h16816|hgemm|bf16|f16|fp16|half|__nv_bfloat16|s16816|i8816")
_TF32 = re.compile(r"tf32|s1688|s16816tf32|1688gemm")
_FP32 = re.compile(r"sgemm|scudnn|fp32|<float|float,|f32|\bfloat\b")


def gemm_precision(name: str) -> str | None:
    """Return the precision a GEMM/convolution kernel name shows, None for other kernels."""
    low = name.lower()
    if not _GEMM_CONV.search(low):
        return None
    if _HALF.search(low):
        return "half"
    if _TF32.search(low):
        return "tf32"
    if _FP32.search(low):
        return "fp32"
    return "unknown"


def is_compiled_kernel(name: str) -> bool:
    """True for kernels that Inductor/Triton generated (a compiled region ran)."""
    return bool(_COMPILED.match(name))


OTHER_COLLECTIVE = COLLECTIVES.index("other")


class DeviceEvents:
    """Columns of device events (times in microseconds from the trace's first event)."""

    def __init__(self) -> None:
        self.starts, self.ends = array("d"), array("d")
        self.streams, self.classes, self.name_ids = array("q"), array("b"), array("l")
        self.kinds = array("b")
        self.correlations = array("q")
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._of: dict[str, dict[str, tuple[int, int]]] = {k: {} for k in KIND_CODES}
        self.colls = array("b")
        self.vague_rows, self.vague_ext = array("q"), array("q")
        self._coll_of: dict[tuple[int, str | None], int] = {}
        self.group_rows, self.group_ids = array("q"), array("l")
        self.group_names: list[str] = []
        self._group_of: dict[str, int] = {}
        self._rows: list[tuple[float, float, int, int, int, int, int, int]] = []
        self.count = 0

    def flush(self) -> None:
        """Move the rows ``add`` buffered into the columns (after each batch of events).

        One tuple per event while the events stream by, then one ``extend`` per column:
        eight appends per event cost more than the rest of ``add``.
        """
        if not self._rows:
            return
        columns: tuple[array[Any], ...] = (
            self.starts,
            self.ends,
            self.streams,
            self.classes,
            self.name_ids,
            self.kinds,
            self.correlations,
            self.colls,
        )
        for column, values in zip(columns, zip(*self._rows, strict=True), strict=True):
            column.extend(values)  # type: ignore[arg-type]
        self._rows.clear()

    def add(self, name: str, kind: str, start: float, end: float, args: Any) -> int:
        """Append one device event (``kind``: a key of ``KIND_CODES``); return its class.

        The row reaches the columns at the next ``flush``.
        """
        known = self._of[kind].get(name)
        if known is None:
            known = self._learn(name, kind, args)
        cls, nid = known
        coll = -1
        if cls == COMMUNICATION:
            # Per event: one kernel name (``ncclDevKernel_Generic``) runs every collective.
            key = (nid, collective_tag(args))
            coll = self._coll_of.get(key, -2)
            if coll == -2:
                coll = self._coll_of[key] = COLLECTIVES.index(collective_kind(name, key[1]))
            ext = args.get("External id")
            if coll == OTHER_COLLECTIVE and type(ext) is int:
                self.vague_rows.append(self.count)  # the op that launched it may say
                self.vague_ext.append(ext)
            group = args.get("Process Group Description") or args.get("Process Group Name")
            if isinstance(group, str) and group:
                self._group(group)
        stream = args.stream
        corr = args.correlation
        self._rows.append(
            (
                start,
                end,
                stream if type(stream) is int else -1,
                cls,
                nid,
                KIND_CODES[kind],
                corr if type(corr) is int else -1,
                coll,
            )
        )
        self.count += 1
        return cls

    def _group(self, group: str) -> None:
        """Note the process group of the communication event being added."""
        gid = self._group_of.get(group)
        if gid is None:
            gid = self._group_of[group] = len(self.group_names)
            self.group_names.append(group)
        self.group_rows.append(self.count)
        self.group_ids.append(gid)

    def _learn(self, name: str, kind: str, args: Any) -> tuple[int, int]:
        nid = self._ids.get(name)
        if nid is None:
            nid = self._ids[name] = len(self.names)
            self.names.append(name)
        known = self._of[kind][name] = (kernel_class(name, kind, args), nid)
        return known

    def of_kind(self, *kinds: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the (starts, ends) of the events of the given kinds (all columns)."""
        codes = np.frombuffer(self.kinds, dtype=np.int8)
        mask = member(codes, [KIND_CODES[k] for k in kinds])
        return (
            np.frombuffer(self.starts, dtype=np.float64)[mask],
            np.frombuffer(self.ends, dtype=np.float64)[mask],
        )

    def __len__(self) -> int:
        return len(self.starts)

    def columns(self, host: HostCalls) -> DeviceColumns:
        """Return numpy columns, with each event's host launch time (NaN when unlinked)."""
        corr = np.frombuffer(self.correlations, dtype=np.int64)
        launch = host.launch_times(corr)
        return DeviceColumns(
            starts=np.frombuffer(self.starts, dtype=np.float64),
            ends=np.frombuffer(self.ends, dtype=np.float64),
            streams=np.frombuffer(self.streams, dtype=np.int64),
            classes=np.frombuffer(self.classes, dtype=np.int8),
            name_ids=np.frombuffer(self.name_ids, dtype=np.int64),
            launches=launch,
            names=self.names,
            graphed=host.from_graph(corr),
            colls=self._collectives(host),
        )

    def _collectives(self, host: HostCalls) -> np.ndarray[Any, Any]:
        """Each event's collective kind; a generic, untagged kernel's from its launching op.

        ``ncclDevKernel_Generic`` launched by an engine's own NCCL wrapper carries no
        profiler tag, but its ``External id`` names the op (``vllm::all_reduce``).
        """
        colls = np.frombuffer(self.colls, dtype=np.int8)
        if not self.vague_rows:
            return colls
        colls = colls.copy()
        rows = np.frombuffer(self.vague_rows, dtype=np.int64)
        ops = host.op_names_of(np.frombuffer(self.vague_ext, dtype=np.int64))
        kinds = {op: COLLECTIVES.index(collective_kind(op)) for op in set(ops) if op}
        for row, op in zip(rows.tolist(), ops, strict=True):
            if op:
                colls[row] = kinds[op]
        return colls


class DeviceColumns:
    """Device events as numpy columns (see ``DeviceEvents``)."""

    def __init__(
        self,
        *,
        starts: np.ndarray[Any, Any],
        ends: np.ndarray[Any, Any],
        streams: np.ndarray[Any, Any],
        classes: np.ndarray[Any, Any],
        name_ids: np.ndarray[Any, Any],
        launches: np.ndarray[Any, Any],
        names: list[str],
        graphed: np.ndarray[Any, Any] | None = None,
        colls: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.starts, self.ends, self.streams = starts, ends, streams
        self.classes, self.name_ids, self.launches = classes, name_ids, launches
        self.names = names
        self.graphed = np.zeros(starts.shape, dtype=bool) if graphed is None else graphed
        self.colls = np.full(starts.shape, -1, dtype=np.int8) if colls is None else colls

    def pick(self, mask: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the (starts, ends) of the events selected by ``mask``."""
        return self.starts[mask], self.ends[mask]

    def of_class(self, cls: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the (starts, ends) of one kernel class."""
        return self.pick(self.classes == cls)

    def subset(self, mask: np.ndarray[Any, Any]) -> DeviceColumns:
        """Return the events selected by ``mask`` (names shared)."""
        return DeviceColumns(
            starts=self.starts[mask],
            ends=self.ends[mask],
            streams=self.streams[mask],
            classes=self.classes[mask],
            name_ids=self.name_ids[mask],
            launches=self.launches[mask],
            names=self.names,
            graphed=self.graphed[mask],
            colls=self.colls[mask],
        )
