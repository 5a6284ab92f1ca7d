"""Host-side calls of a Kineto trace: launches, graph launches, and calls that block the host.

CUDA and ROCm (HIP) runtime/driver calls are read alike. Each call name is classified once:

- ``launch``: puts work on the device (kernel launches, async copies and sets);
- ``graph``: replays a captured graph (``cudaGraphLaunch``, ``hipGraphLaunch``);
- ``capture``: records a graph (``cudaStreamBeginCapture``/``EndCapture``,
  ``hipGraphInstantiate``): launches made meanwhile are captured, not run;
- ``sync``: blocks the host until the device (or a stream or event) catches up
  (``cudaDeviceSynchronize``, ``hipStreamSynchronize``, ...);
- ``alloc``: allocates or frees device or pinned memory (``cudaMalloc``, ``hipFree``, ...);
  ``cudaFree``/``hipFree`` also synchronise the device;
- ``copy``: a synchronous copy (``cudaMemcpy``, ``hipMemcpyWithStream``, ...; not ``*Async``);
- ``create``: stream and event creation, a one-time cost kept apart (``phases``).

Blocking calls are kept with their time, name and ``External id`` (which names the CPU op
that made them: the call site), in flat columns.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.decode import NO_ARGS
from gpuwise.telemetry.readers.kineto.intervals import member

LAUNCH, GRAPH, SYNC, ALLOC, COPY, OTHER, CAPTURE, CREATE = range(8)
BLOCKING_KINDS = {SYNC: "sync", ALLOC: "alloc", COPY: "copy"}
"""Kinds of host calls that block the host, by the name the trace section uses."""

_SYNC = re.compile(
    r"^(cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize$|^cu(Ctx|Stream|Event)Synchronize$"
)
_ALLOC = re.compile(
    r"^(cuda|hip)(Malloc|Free|MallocHost|FreeHost|HostAlloc|HostMalloc|HostFree|MallocManaged|"
    r"MallocPitch|ExtMallocWithFlags|MallocArray|FreeArray)$|^cuMem(Alloc|Free|AllocHost|"
    r"FreeHost|HostAlloc)(_v2)?$"
)
_COPY = re.compile(
    r"^(cuda|hip)Memcpy(2D|3D|Peer|DtoH|HtoD|DtoD|ToSymbol|FromSymbol|WithStream|Parallel)?$"
    r"|^cuMemcpy(HtoD|DtoH|DtoD|Peer)?(_v2)?$"
)
_GRAPH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
_CAPTURE = re.compile(r"^(cuda|hip|cu)(StreamBeginCapture|StreamEndCapture|GraphInstantiate)")
_CREATE = re.compile(r"^(cuda|hip|cu)(Stream|Event)Create")
HIP, CUDA = 1, 2
"""Runtime APIs a call name's prefix tells (``hip*``, ``cu*``)."""

SLOW_LAUNCH_US = 1000.0
"""A launch call of a millisecond or more loads its module or initialises the context."""
_LAUNCH = re.compile(r"Launch|^(cuda|cu|hip)Memcpy|^(cuda|cu|hip)Memset")


def call_kind(name: str) -> int:
    """Return the kind (``LAUNCH`` ... ``OTHER``) of a runtime or driver call name."""
    if _GRAPH.match(name):
        return GRAPH
    if _CAPTURE.match(name):
        return CAPTURE
    if _SYNC.match(name):
        return SYNC
    if _ALLOC.match(name):
        return ALLOC
    if _COPY.match(name):
        return COPY
    if _CREATE.match(name):
        return CREATE
    return LAUNCH if _LAUNCH.search(name) else OTHER


class HostCalls:
    """Columns of the host calls a trace records (times in microseconds)."""

    def __init__(self) -> None:
        self.corr, self.corr_start = array("q"), array("d")
        self.graph_corr = array("q")
        self.launch_calls = 0
        self.graph_launches = 0
        self.capture_calls = 0
        self.launch_corr = array("q")
        self.hip_calls = 0
        self.cuda_calls = 0
        self.b_starts, self.b_ends = array("d"), array("d")
        self.b_kinds, self.b_names, self.b_ext = array("b"), array("l"), array("q")
        self.op_ext, self.op_names = array("q"), array("l")
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._kind_of: dict[str, tuple[int, int]] = {}  # name -> (call kind, HIP/CUDA/0)
        self.create_starts, self.create_ends = array("d"), array("d")
        self.slow_starts, self.slow_ends = array("d"), array("d")

    def name_id(self, name: str) -> int:
        """Intern ``name``; return its index in ``names``."""
        nid = self._ids.get(name)
        if nid is None:
            nid = self._ids[name] = len(self.names)
            self.names.append(name)
        return nid

    def runtime(self, name: Any, start: float, end: float, args: Any) -> None:
        """Take one runtime/driver call."""
        if args is None:
            args = NO_ARGS
        corr = args.correlation
        if type(corr) is int:
            self.corr.append(corr)
            self.corr_start.append(start)
        if type(name) is not str:
            return
        known = self._kind_of.get(name)
        if known is None:
            vendor = HIP if name.startswith("hip") else CUDA if name.startswith("cu") else 0
            known = self._kind_of[name] = (call_kind(name), vendor)
        kind = known[0]
        if known[1] == HIP:
            self.hip_calls += 1
        elif known[1] == CUDA:
            self.cuda_calls += 1
        if kind == LAUNCH:
            self.launch_calls += 1
            if type(corr) is int:
                self.launch_corr.append(corr)
            if end - start >= SLOW_LAUNCH_US:
                self.slow_starts.append(start)
                self.slow_ends.append(end)
            return
        if kind == CREATE:
            self.create_starts.append(start)
            self.create_ends.append(end)
            return
        if kind == CAPTURE:
            self.capture_calls += 1
            return
        if kind == GRAPH:
            self.launch_calls += 1
            self.graph_launches += 1
            if type(corr) is int:
                self.graph_corr.append(corr)
            return
        if kind == COPY:
            self.launch_calls += 1  # a synchronous copy puts work on the device too
        if kind != OTHER:
            ext = args.get("External id", args.get("external id"))
            self.b_starts.append(start)
            self.b_ends.append(end)
            self.b_kinds.append(kind)
            self.b_names.append(self.name_id(name))
            self.b_ext.append(ext if type(ext) is int else -1)

    def cpu_op(self, name: str, args: Any) -> None:
        """Take a CPU op's ``External id`` (it names the op behind a blocking call)."""
        ext = None if args is None else args.external_id
        if type(ext) is int:
            self.op_ext.append(ext)
            self.op_names.append(self.name_id(name))

    def launch_times(self, correlations: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Return the launch time of each correlation id (NaN when no call has it)."""
        return _lookup(self.corr, self.corr_start, correlations)

    def from_graph(self, correlations: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Return a mask of the correlation ids launched by a graph launch."""
        graph = np.frombuffer(self.graph_corr, dtype=np.int64)
        return member(correlations, graph) & (correlations >= 0)

    def captured(self, ran: np.ndarray[Any, Any]) -> int:
        """Launches whose correlation no device event carries: captured into a graph.

        Counted only when the trace records graph capture calls (elsewhere a launch
        without its device event is one the profiler dropped).
        """
        if not self.capture_calls:
            return 0
        launched = np.frombuffer(self.launch_corr, dtype=np.int64)
        return int((~member(launched, ran)).sum())

    def vendor(self) -> str | None:
        """``"amd"`` when the calls are HIP's, ``"nvidia"`` for CUDA's, None without calls."""
        if not (self.hip_calls or self.cuda_calls):
            return None
        return "amd" if self.hip_calls > self.cuda_calls else "nvidia"

    def blocking(self, lo: float, hi: float, busy: Any = None) -> list[dict[str, Any]]:
        """Return the blocking calls starting in ``[lo, hi)``, grouped by name.

        Args:
            lo: Window start (µs).
            hi: Window end (µs).
            busy: ``F(t)``, the device's busy time before each ``t`` (µs), vectorised;
                when given, each row also has ``device_idle_s``: the device's idle time
                while the calls blocked the host.

        Each row: ``name``, ``kind`` (``sync``/``alloc``/``copy``), ``calls``, ``time_s``
        (summed host time), ``longest_s`` and ``call_site`` (the CPU op that made most
        of them, None when the trace does not link them).
        """
        starts = np.frombuffer(self.b_starts, dtype=np.float64)
        if not starts.size:
            return []
        ends = np.frombuffer(self.b_ends, dtype=np.float64)
        names = np.frombuffer(self.b_names, dtype=np.int64)
        kinds = np.frombuffer(self.b_kinds, dtype=np.int8)
        inside = (starts >= lo) & (starts < hi)
        sites = self._call_sites(np.frombuffer(self.b_ext, dtype=np.int64))
        rows = []
        for nid in sorted(set(names[inside].tolist())):  # np.unique imports numpy.ma
            mask = inside & (names == nid)
            dur = (ends - starts)[mask]
            site_ids, counts = np.unique(sites[mask], return_counts=True)
            best = int(site_ids[np.argmax(counts)]) if site_ids.size else -1
            row = {
                "name": self.names[nid],
                "kind": BLOCKING_KINDS[int(kinds[mask][0])],
                "calls": int(mask.sum()),
                "time_s": float(dur.sum()) * 1e-6,
                "longest_s": float(dur.max()) * 1e-6,
                "call_site": self.names[best] if best >= 0 else None,
            }
            if busy is not None:
                a, b = starts[mask], np.minimum(ends[mask], hi)
                row["device_idle_s"] = (
                    float(np.clip((b - a) - (busy(b) - busy(a)), 0, None).sum()) * 1e-6
                )
            rows.append(row)
        return sorted(rows, key=lambda r: -float(r["time_s"]))

    def waits(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the starts and ends of the calls that wait for device work (sync, copy)."""
        starts = np.frombuffer(self.b_starts, dtype=np.float64)
        ends = np.frombuffer(self.b_ends, dtype=np.float64)
        kinds = np.frombuffer(self.b_kinds, dtype=np.int8)
        mask = (kinds == SYNC) | (kinds == COPY)
        return starts[mask], ends[mask]

    def op_names_of(self, ext: np.ndarray[Any, Any]) -> list[str | None]:
        """The name of the CPU op with each ``External id`` (None when none has it)."""
        return [self.names[i] if i >= 0 else None for i in self._call_sites(ext).tolist()]

    def _call_sites(self, ext: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Return the name id of the CPU op with each External id (-1 when none)."""
        op_ext = np.frombuffer(self.op_ext, dtype=np.int64)
        op_names = np.frombuffer(self.op_names, dtype=np.int64).astype(np.float64)
        found = _lookup(op_ext, op_names, ext)
        return np.where(np.isnan(found), -1, found).astype(np.int64)


def _lookup(keys: Any, values: Any, wanted: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Return ``values[keys == w]`` for each ``w`` in ``wanted`` (the first; NaN if none)."""
    k = np.frombuffer(keys, dtype=np.int64) if not isinstance(keys, np.ndarray) else keys
    v = np.frombuffer(values, dtype=np.float64) if not isinstance(values, np.ndarray) else values
    out = np.full(wanted.shape, np.nan)
    if not k.size or not wanted.size:
        return out
    order = np.argsort(k, kind="stable")
    sk, sv = k[order], v[order]
    at = np.clip(np.searchsorted(sk, wanted), 0, sk.size - 1)
    hit = (sk[at] == wanted) & (wanted >= 0)
    out[hit] = sv[at[hit]]
    return out
