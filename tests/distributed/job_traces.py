"""Write the profiler traces of an N-rank job with a planted straggler and a known cause.

Used by the tests (small jobs) and ``benchmarks/many_ranks.py`` (up to 1,024 ranks). Each
rank's trace has the shape of a torch 2.x Kineto export: ``ProfilerStep#N`` and DataLoader
``__next__`` spans, compute launches (``cpu_op`` + ``cudaLaunchKernel`` + ``kernel`` linked
by ``correlation``), and for each collective PyTorch's ``record_param_comms`` host op and
its NCCL kernel with the ``args`` torch records (``Collective name``, ``Process Group
Name``/``Description``, ``In msg nelems``, ``Group size``, ``dtype``, ``Seq``; ``Src
Rank``/``Dst Rank`` for point-to-point). A top-level ``host_name`` names each rank's node.

The job is simulated in lock step: a collective instance starts on each rank when that
rank reaches it and ends on every rank at once (the last arrival plus the transfer), as
NCCL behaves. Patterns:

* ``ddp``: backward in four parts, one gradient all-reduce per part on the comm stream;
* ``fsdp``: per layer an all-gather before its forward (compute waits for it) and a
  reduce-scatter after its backward;
* ``pipeline``: point-to-point exchanges between neighbouring stages, even pairs then odd;
* ``moe``: per layer an expert all-to-all dispatch and combine (token counts differ by rank).

Causes planted on the straggler: ``input`` (longer DataLoader wait), ``host`` (the host
stalls before launching: the device idles, no input wait), ``compute`` (more kernels),
``clock`` (every kernel slower by one factor) and ``communication`` (its own extra
transfer in a group of its own before the job's collectives).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

PATTERNS = ("ddp", "fsdp", "pipeline", "moe")
CAUSES = ("input", "host", "compute", "clock", "communication")
KIND_OF = {"ddp": "all_reduce", "fsdp": "all_gather", "pipeline": "send_recv", "moe": "all_to_all"}
"""The collective kind the straggler arrives last at, per pattern."""

T0_US = 1_700_000_000_000_000.0
_DESCRIPTION = {"0": "default_pg", "ep": "mesh_ep"}
"""Process-group descriptions as torch writes them (the default group; a DeviceMesh's)."""
_KERNELS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "void at::native::(anonymous namespace)::layer_norm_kernel<c10::BFloat16, float>",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, c10::BFloat16>>",
)
_NCCL = {
    "all_reduce": ("allreduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, ulong)"),
    "all_gather": (
        "_allgather_base",
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    ),
    "reduce_scatter": (
        "_reduce_scatter_base",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    ),
    "all_to_all": (
        "all_to_allv",
        "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    ),
    "send_recv": ("send", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
}


@dataclass(frozen=True)
class JobSpec:
    """One generated job.

    Attributes:
        ranks: World size.
        pattern: One of ``PATTERNS``.
        straggler: The planted straggler's rank (None: no straggler).
        cause: One of ``CAUSES``.
        steps: Profiler steps per rank.
        kernels: Compute kernels per rank per step (the trace's size: about three events
            each, plus a few per collective).
        ranks_per_node: Ranks per ``host_name``.
        kernel_us: Duration of one compute kernel.
        severity: The planted delay as a share of the step's compute.
        seed: Seed of the jitter every rank gets (about 2 % of each phase).
        clock_offset_us: Every timestamp of node k's ranks is shifted by k times this
            (hosts' clocks disagree; the collectives still end together in real time).
        seq: Record torch's ``Seq`` in the collective args (False: matched by end time).
        also_late: Ranks late with the straggler, by the same cause (a late pair, a late
            node); with ``communication`` they run their own collective together, in a
            process group of their own (``late``), before the job's collectives.
        jitter: Relative spread of every phase (0: the ranks run in exact lock step).
        host_in_name: No ``host_name`` field; the files are named as torch's
            ``tensorboard_trace_handler`` names them, ``{host}_{pid}.{ms}.pt.trace.json``.
        more_late: Further stragglers, each ``(ranks, cause, severity)``: late by a cause
            of their own (several ranks with ``communication`` run their own collective
            together, in a group named after their first rank, ``late<rank>``).
    """

    ranks: int = 8
    pattern: str = "ddp"
    straggler: int | None = 3
    cause: str = "input"
    steps: int = 6
    kernels: int = 40
    ranks_per_node: int = 8
    kernel_us: float = 100.0
    severity: float = 0.4
    seed: int = 0
    clock_offset_us: float = 0.0
    seq: bool = True
    host_in_name: bool = False
    jitter: float = 0.02
    also_late: tuple[int, ...] = ()
    more_late: tuple[tuple[tuple[int, ...], str, float], ...] = ()

    def node(self, rank: int) -> str:
        """The host name of ``rank``."""
        return f"node{self.node_index(rank)}"

    def node_index(self, rank: int) -> int:
        """The node ``rank`` runs on, counted from 0."""
        return rank // self.ranks_per_node

    def events_per_rank(self) -> int:
        """About how many trace events each rank's file holds."""
        return self.steps * (3 * self.kernels + 40)


class _Rank:
    """One rank's events as JSON text lines, and its running clocks."""

    def __init__(self, rank: int, fh: IO[str] | None = None, offset_us: float = 0.0) -> None:
        self.rank = rank
        self.offset_us = offset_us
        self.fh = fh
        self.wrote = False
        self.lines: list[str] = []
        self.corr = rank * 10_000_000
        self.seq: dict[str, int] = {}

    def add(self, cat: str, name: str, tid: int, ts: float, dur: float, args: str) -> None:
        self.lines.append(
            f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {1000 + self.rank}, '
            f'"tid": {tid}, "ts": {ts + self.offset_us:.3f}, "dur": {dur:.3f}, "args": {{{args}}}}}'
        )

    def flush(self) -> None:
        """Write the lines gathered so far (the file stays open)."""
        if self.fh is not None and self.lines:
            self.fh.write(("", ",\n")[self.wrote] + ",\n".join(self.lines))
            self.wrote = True
            self.lines.clear()

    def kernel(self, name: str, op: str, start: float, dur: float, stream: int, extra: str) -> None:
        self.corr += 1
        c = self.corr
        self.add("cpu_op", op, 1, start - 12.0, 6.0, f'"External id": {c}{extra}')
        self.add("cuda_runtime", "cudaLaunchKernel", 1, start - 9.0, 4.0, f'"correlation": {c}')
        self.add(
            "kernel",
            name,
            stream,
            start,
            dur,
            f'"device": {self.rank % 8}, "stream": {stream}, "correlation": {c}, '
            f'"External id": {c}{extra}',
        )


class _Sim:
    """Lock-step simulation of all ranks, one step at a time (see module docstring)."""

    def __init__(self, spec: JobSpec, files: list[IO[str]] | None = None) -> None:
        self.spec = spec
        n = spec.ranks
        self.rng = np.random.default_rng(spec.seed)
        self.out = [
            _Rank(r, None if files is None else files[r], spec.clock_offset_us * spec.node_index(r))
            for r in range(n)
        ]
        self.dev = np.zeros(n)  # compute stream free at
        self.comm = np.zeros(n)  # comm stream free at
        self.kernel_us = np.full(n, spec.kernel_us)
        self.extra_kernels = np.zeros(n, dtype=np.int64)
        late = [] if spec.straggler is None else [spec.straggler, *spec.also_late]
        self.input_us = np.full(n, 0.05 * spec.kernels * spec.kernel_us)
        self.host_us = np.zeros(n)
        self.own_comm_us = np.zeros(n)
        self.own_groups: list[tuple[str, np.ndarray[Any, Any]]] = []
        groups = [(tuple(late), spec.cause, spec.severity)] if late else []
        for rows, cause, severity in [*groups, *spec.more_late]:
            self.plant(list(rows), cause, severity)

    def plant(self, rows: list[int], cause: str, severity: float) -> None:
        """Make ``rows`` late by ``cause``, ``severity`` of the step's compute."""
        spec = self.spec
        budget = spec.kernels * spec.kernel_us * severity
        for s in rows:
            if cause == "clock":
                self.kernel_us[s] *= 1.0 + severity
            if cause == "compute":
                self.extra_kernels[s] = round(spec.kernels * severity)
            if cause == "input":
                self.input_us[s] += budget
            if cause == "host":
                self.host_us[s] = budget
            if cause == "communication":
                self.own_comm_us[s] = budget
        if cause == "communication" and len(rows) > 1:
            name = "late" if rows[0] == spec.straggler else f"late{rows[0]}"
            self.own_groups.append((name, np.array(sorted(rows))))

    def jitter(self, base: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        spread = self.rng.normal(1.0, self.spec.jitter, base.shape).clip(0.9, 1.1)
        out: np.ndarray[Any, Any] = base * spread
        return out

    def run(self) -> None:
        t = T0_US
        for number in range(1, self.spec.steps + 1):
            t = self.step(number, t)

    def step(self, number: int, t: float) -> float:
        spec = self.spec
        wait = self.jitter(self.input_us)
        for r, o in enumerate(self.out):
            o.add(
                "user_annotation",
                "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                1,
                t + 1.0,
                float(wait[r]),
                '"External id": 0',
            )
            if self.host_us[r]:
                o.add(
                    "cpu_op", "aten::_local_scalar_dense", 1, t + wait[r] + 5, self.host_us[r], ""
                )
        self.dev = t + wait + 20.0 + self.host_us
        self.comm = self.dev.copy()
        if self.own_comm_us.any():
            self.own_transfer()
        getattr(self, f"_{spec.pattern}")()
        end = float(max(self.dev.max(), self.comm.max())) + 30.0
        for o in self.out:
            o.add("user_annotation", f"ProfilerStep#{number}", 1, t, end - t, '"External id": 0')
            o.flush()
        return end + 10.0

    def compute(self, kernels: int, ranks: np.ndarray[Any, Any] | None = None) -> None:
        """``kernels`` compute kernels on the compute stream of every rank (or ``ranks``)."""
        rows = range(self.spec.ranks) if ranks is None else ranks.tolist()
        dur = self.jitter(self.kernel_us)
        for r in rows:
            o, t, d = self.out[r], float(self.dev[r]), float(dur[r])
            extra = int(self.extra_kernels[r])
            count = kernels + (max(1, round(extra / self._chunks())) if extra else 0)
            for k in range(count):
                o.kernel(_KERNELS[k % len(_KERNELS)], "aten::mm", t, d, 7, "")
                t += d + 2.0
            self.dev[r] = t

    def _chunks(self) -> int:
        return {"ddp": 5, "fsdp": 8, "pipeline": 2, "moe": 8}[self.spec.pattern]

    def collective(
        self,
        kind: str,
        group: str,
        members: np.ndarray[Any, Any],
        *,
        blocking: bool,
        size: int = 1 << 20,
        sizes: np.ndarray[Any, Any] | None = None,
        xfer_us: float = 200.0,
    ) -> None:
        """One instance among ``members``: each starts when ready, all end together."""
        ready = np.maximum(self.dev[members], self.comm[members])
        end = float(ready.max()) + xfer_us
        tag, kernel = _NCCL[kind]
        for j, r in enumerate(members.tolist()):
            o = self.out[r]
            seq = o.seq[group] = o.seq.get(group, 0) + 1
            nelems = int(sizes[j]) if sizes is not None else size
            extra = (
                f', "Collective name": "{tag}", "Process Group Name": "{group}", '
                f'"Process Group Description": "{_DESCRIPTION.get(group, group)}", '
                f'"In msg nelems": {nelems}, '
                f'"Out msg nelems": {nelems}, "Group size": {len(members)}, "dtype": "BFloat16"'
                + (f', "Seq": {seq}' if self.spec.seq else "")
            )
            o.kernel(
                kernel, "record_param_comms", float(ready[j]), end - float(ready[j]), 20, extra
            )
        self.comm[members] = end
        if blocking:
            self.dev[members] = np.maximum(self.dev[members], end)

    def pair(self, a: int, b: int, group: str) -> None:
        """A point-to-point exchange between stages ``a`` and ``b`` (no sequence number)."""
        both = np.array([a, b])
        ready = np.maximum(self.dev[both], self.comm[both])
        end = float(ready.max()) + 150.0
        kernel = _NCCL["send_recv"][1]
        for j, (me, peer) in enumerate(((a, b), (b, a))):
            o = self.out[me]
            src, dst = (me, peer) if j == 0 else (peer, me)
            extra = (
                f', "Collective name": "{"send" if j == 0 else "recv"}", '
                f'"Process Group Name": "{group}", '
                f'"Process Group Description": "{_DESCRIPTION.get(group, group)}", '
                '"In msg nelems": 65536, '
                f'"Src Rank": {src}, "Dst Rank": {dst}'
            )
            o.kernel(
                kernel, "record_param_comms", float(ready[j]), end - float(ready[j]), 20, extra
            )
        self.dev[both] = end
        self.comm[both] = end

    def own_transfer(self) -> None:
        """The straggler's own transfer in a group only it records (a slow side link).

        Several late ranks run it together: an all-gather of their own group ``late``.
        """
        together: set[int] = set()
        for name, rows in self.own_groups:
            xfer = float(self.own_comm_us[rows].max())
            self.collective("all_gather", name, rows, blocking=True, size=1 << 16, xfer_us=xfer)
            together.update(rows.tolist())
        for r in np.flatnonzero(self.own_comm_us).tolist():
            if r in together:
                continue
            o = self.out[r]
            start = float(self.dev[r])
            extra = (
                ', "Collective name": "broadcast", "Process Group Name": "side", '
                f'"In msg nelems": 4096, "Seq": {o.seq.setdefault("side", 0) + 1}'
            )
            o.seq["side"] += 1
            tag_kernel = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            o.kernel(tag_kernel, "record_param_comms", start, float(self.own_comm_us[r]), 21, extra)
            self.dev[r] = start + float(self.own_comm_us[r])
            self.comm[r] = self.dev[r]

    def _ddp(self) -> None:
        k = self.spec.kernels
        everyone = np.arange(self.spec.ranks)
        self.compute(k // 2 - 3 * (k // 8))
        for _ in range(4):
            self.compute(k // 8)
            self.collective("all_reduce", "0", everyone, blocking=False, size=25 << 20)
        self.dev = np.maximum(self.dev, self.comm)

    def _fsdp(self) -> None:
        k = self.spec.kernels // 8
        everyone = np.arange(self.spec.ranks)
        for _ in range(4):
            self.collective("all_gather", "0", everyone, blocking=True, size=4 << 20)
            self.compute(k)
        for _ in range(4):
            self.collective("all_gather", "0", everyone, blocking=True, size=4 << 20)
            self.compute(k)
            self.collective("reduce_scatter", "0", everyone, blocking=False, size=16 << 20)
        self.dev = np.maximum(self.dev, self.comm)

    def _pipeline(self) -> None:
        n = self.spec.ranks
        self.compute(self.spec.kernels // 2)
        for first in (0, 1):
            for a in range(first, n - 1, 2):
                self.pair(a, a + 1, "0")
        self.compute(self.spec.kernels // 2)

    def _moe(self) -> None:
        k = self.spec.kernels // 8
        everyone = np.arange(self.spec.ranks)
        for _ in range(4):
            self.compute(k)
            tokens = self.rng.integers(3000, 5000, self.spec.ranks) * 1024
            self.collective("all_to_all", "ep", everyone, blocking=True, sizes=tokens)
            self.compute(k)
            self.collective("all_to_all", "ep", everyone, blocking=True, sizes=tokens)


def write_job(directory: str | Path, spec: JobSpec, *, gz: bool = True) -> list[Path]:
    """Write one trace per rank into ``directory``; return the paths, rank order.

    Events are written step by step to every rank's open file, so memory stays one step
    of the whole job whatever the trace size.

    Example:
        >>> paths = write_job(tmp_path, JobSpec(ranks=8, pattern="fsdp", cause="clock"))
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        folder / f"{_name(spec, r)}.pt.trace.json{'.gz' if gz else ''}" for r in range(spec.ranks)
    ]
    files = [_open(p, gz) for p in paths]
    try:
        for r, fh in enumerate(files):
            fh.write(_head(spec, r))
        _Sim(spec, files).run()
        for fh in files:
            fh.write("\n]}\n")
    finally:
        for fh in files:
            fh.close()
    return paths


def _name(spec: JobSpec, rank: int) -> str:
    if spec.host_in_name:  # torch's tensorboard_trace_handler: {host}_{pid}.{time in ms}
        return f"{spec.node(rank)}_{1000 + rank}.{1_700_000_000_000 + rank}"
    return f"rank{rank:04d}"


def _open(path: Path, gz: bool) -> IO[str]:
    if gz:
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=1)
    return path.open("w", encoding="utf-8")


def _head(spec: JobSpec, rank: int) -> str:
    head: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank % 8, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": spec.ranks},
    }
    if not spec.host_in_name:
        head["host_name"] = spec.node(rank)
    return json.dumps(head)[:-1] + ', "traceEvents": [\n'


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.distributed.job_traces DIR [--ranks N ...]``: write one job."""
    import argparse

    ap = argparse.ArgumentParser(description="write the rank traces of a generated job")
    ap.add_argument("directory")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--pattern", choices=PATTERNS, default="ddp")
    ap.add_argument("--cause", choices=CAUSES, default="input")
    ap.add_argument("--straggler", type=int, default=3, help="-1: none")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--kernels", type=int, default=40)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--also-late", type=int, nargs="*", default=[], help="ranks late with it")
    ap.add_argument("--clock-offset-us", type=float, default=0.0, help="node k's clock, k times")
    ap.add_argument(
        "--more-late",
        action="append",
        default=[],
        metavar="RANKS:CAUSE:SEVERITY",
        help="further stragglers of a cause of their own, e.g. 12,13:communication:0.4",
    )
    ap.add_argument("--no-seq", action="store_true", help="no Seq in the collective args")
    ap.add_argument("--host-in-name", action="store_true", help="{host}_{pid}.{ms} file names")
    args = ap.parse_args(argv)
    spec = JobSpec(
        ranks=args.ranks,
        pattern=args.pattern,
        cause=args.cause,
        straggler=None if args.straggler < 0 else args.straggler,
        steps=args.steps,
        kernels=args.kernels,
        ranks_per_node=args.ranks_per_node,
        also_late=tuple(args.also_late),
        clock_offset_us=args.clock_offset_us,
        seq=not args.no_seq,
        host_in_name=args.host_in_name,
        more_late=tuple(_more_late(x) for x in args.more_late),
    )
    paths = write_job(args.directory, spec)
    print(f"wrote {len(paths)} rank traces to {args.directory}")
    return 0


def _more_late(text: str) -> tuple[tuple[int, ...], str, float]:
    ranks, cause, severity = text.split(":")
    return tuple(int(r) for r in ranks.split(",")), cause, float(severity)


if __name__ == "__main__":
    raise SystemExit(main())
