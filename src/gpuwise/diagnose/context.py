"""The signals the diagnosis rules read, derived once from a Run.

``Context`` turns the Run (steps, utilization summary, samples, the typed trace section)
into the handful of numbers the rules compare with their thresholds, so each rule in
``rules.py`` stays a few lines long and every signal has one definition.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.diagnose.anatomy.data_kind import loader_image_side
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Fix, Run, Step
from gpuwise.records.anatomy import JobAnatomy
from gpuwise.records.trace_section import TraceSection

MEMORY_USABLE = 0.9
"""Leave 10 % of device memory for the allocator's fragmentation and cuDNN workspaces."""

MIN_STEP_SAMPLES = 3
"""Utilization samples needed inside the steps' span to prefer them over the whole run
(startup and teardown, with the GPU idle, would otherwise dilute the mean)."""

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags that mean bf16 arithmetic runs in hardware."""


@dataclass(frozen=True)
class Context:
    """Signals of one Run (see module docstring).

    Attributes:
        run: The Run being diagnosed.
        stats: ``records.step_stats`` of its steps.
        trace: ``run.trace``, when the Run came from a trace.
        cores: CPU cores of the job's machine (the Run's CPU device; this machine's for a
            job run here; None for a trace that does not record them).
        local_ranks: Processes per machine sharing those cores.
        anatomy: What the job is (``run.anatomy``, read here when the Run has none).
    """

    run: Run
    stats: dict[str, Any]
    trace: TraceSection | None
    cores: int | None
    local_ranks: int
    anatomy: JobAnatomy

    @classmethod
    def of(cls, run: Run) -> Context:
        """Derive the context of ``run``."""
        return cls(
            run=run,
            stats=run.step_stats(),
            trace=run.trace,
            cores=_cores(run),
            local_ranks=_local_ranks(run),
            anatomy=run.anatomy or read_anatomy(run),
        )

    @property
    def steps(self) -> list[Step]:
        """The Run's steps."""
        return self.run.steps

    def fraction(self, phase: str) -> float | None:
        """Share of step time in ``phase``; for data wait, a trace's DataLoader share."""
        fractions = self.stats.get("fractions")
        if fractions is not None:
            return float(fractions[phase])
        if phase == "data_wait" and self.trace is not None and self.trace.dataloader_s:
            return _opt_float(self.trace.dataloader_fraction)
        return None

    def step_evidence(self, phase: str) -> dict[str, Any]:
        """Mean seconds of ``phase`` and of the whole step, and the step count."""
        phases = self.stats.get("phases_s")
        if not phases:
            return {}
        return {
            f"{phase}_mean_s": round(phases[phase], 6),
            "step_mean_s": round(self.stats["mean_s"], 6),
            "steps": self.stats["count"],
        }

    def trace_evidence(self, *keys: str) -> dict[str, Any]:
        """Trace figures (``TraceSection`` attributes named by ``keys``) as ``trace_<key>``."""
        if self.trace is None:
            return {}
        return {f"trace_{k}": _round(getattr(self.trace, k)) for k in keys}

    def h2d_fraction(self) -> tuple[float | None, str]:
        """Host-to-device copy share: of the step, or of GPU busy time for a stepless trace."""
        if self.steps and any(s.h2d_s > 0 or s.h2d_count for s in self.steps):
            return float(self.stats["fractions"]["h2d"]), "h2d_fraction"
        h2d = _h2d_copies(self.trace)
        busy = float(self.trace.gpu_busy_s or 0.0) if self.trace is not None else 0.0
        if self.steps or not h2d or busy <= 0:
            return None, ""
        copy_s = sum(float(c.get("time_s") or 0.0) for c in h2d.values())
        return min(1.0, copy_s / busy), "h2d_gpu_busy_fraction"

    def pageable_share(self) -> float | None:
        """Share of host-to-device bytes copied from pageable memory."""
        total = sum(s.h2d_bytes for s in self.steps)
        if total > 0:
            return sum(s.h2d_pageable_bytes for s in self.steps) / total
        h2d = _h2d_copies(self.trace)
        all_bytes = sum(int(c.get("bytes") or 0) for c in h2d.values())
        if all_bytes <= 0:
            return None
        return int(h2d.get("pageable", {}).get("bytes") or 0) / all_bytes

    def copy_evidence(self) -> dict[str, Any]:
        """Counts, bytes and times of host-to-device copies."""
        if any(s.h2d_count for s in self.steps):
            ev: dict[str, Any] = {
                "h2d_count": sum(s.h2d_count for s in self.steps),
                "h2d_bytes": sum(s.h2d_bytes for s in self.steps),
                "h2d_pageable_bytes": sum(s.h2d_pageable_bytes for s in self.steps),
                "h2d_mean_s": round(self.stats["phases_s"]["h2d"], 6),
            }
        else:
            ev = {}
        for memory, c in _h2d_copies(self.trace).items():
            ev[f"trace_h2d_{memory}_count"] = c.get("count")
            ev[f"trace_h2d_{memory}_bytes"] = c.get("bytes")
            ev[f"trace_h2d_{memory}_s"] = _round(c.get("time_s"))
            ev[f"trace_h2d_{memory}_max_bandwidth_gb_s"] = _round(c.get("max_bandwidth_gb_s"))
        profiled = self.run.extra.get("h2d")
        if isinstance(profiled, dict) and profiled.get("gpu_s") is not None:
            ev["h2d_gpu_s"] = _round(profiled["gpu_s"], 6)  # copy time measured on the GPU
        ev.update(self.trace_evidence("kernel_s", "gpu_busy_s"))
        return ev

    def unexplained_gpu_idle(self) -> tuple[float | None, dict[str, Any]]:
        """GPU idle share inside steps that waiting for data does not explain."""
        t = self.trace
        if t is not None and t.window_source == "profiler_steps" and t.gpu_busy_fraction:
            busy, wait = float(t.gpu_busy_fraction), float(t.dataloader_fraction or 0)
            idle = max(0.0, 1.0 - busy - wait)
            return idle, {
                "gpu_idle_unexplained_fraction": round(idle, 4),
                "trace_gpu_busy_fraction": round(busy, 4),
                "trace_dataloader_fraction": round(wait, 4),
            }
        util = self.gpu_mean_utilization()
        fractions = self.stats.get("fractions")
        if util is None or not fractions:
            return None, {}
        idle = max(0.0, float(fractions["compute"]) - util)
        return idle, {
            "gpu_idle_unexplained_fraction": round(idle, 4),
            "gpu_mean_utilization_pct": round(util * 100, 2),
            "compute_fraction": round(float(fractions["compute"]), 4),
        }

    def gpu_mean_utilization(self) -> float | None:
        """Mean GPU utilization (0..1) while steps ran, else over the whole recording."""
        during = self._gpu_utils_during_steps()
        if len(during) >= MIN_STEP_SAMPLES:
            return sum(during) / len(during) / 100.0
        means = [
            s["mean_utilization_pct"]
            for d, s in self._gpu_summaries()
            if s.get("mean_utilization_pct") is not None
        ]
        return sum(means) / len(means) / 100.0 if means else None

    def _gpu_utils_during_steps(self) -> list[float]:
        if not self.steps:
            return []
        lo = min(s.start_s for s in self.steps)
        hi = max(s.start_s + s.total_s for s in self.steps)
        return [
            float(x.utilization_pct)
            for x in self.run.samples
            if x.device.startswith("gpu") and x.utilization_pct is not None and lo <= x.t_s <= hi
        ]

    def median_batch(self) -> int | None:
        """Median batch size when every step knows it."""
        sizes = [s.batch_size for s in self.steps if s.batch_size is not None]
        if not sizes or len(sizes) != len(self.steps):
            return None
        return int(statistics.median(sizes))

    def step_coverage(self) -> float:
        """Share of the recorded time that steps account for (0 without steps)."""
        durations = [s.get("duration_s") or 0.0 for s in self.run.utilization.values()]
        if not self.steps or not durations or max(durations) <= 0:
            return 0.0 if not self.steps else 1.0
        per_rank: dict[int, float] = {}
        for s in self.steps:
            per_rank[s.rank] = per_rank.get(s.rank, 0.0) + s.total_s
        return max(per_rank.values()) / max(durations)

    def _gpu_summaries(self) -> list[tuple[str, dict[str, Any]]]:
        return [(d, s) for d, s in self.run.utilization.items() if d.startswith("gpu")]

    def idlest_gpu(self) -> tuple[str, dict[str, Any]] | None:
        """The GPU with the largest idle fraction, with its summary."""
        known = [(d, s) for d, s in self._gpu_summaries() if s.get("idle_fraction") is not None]
        return max(known, key=lambda ds: ds[1]["idle_fraction"]) if known else None

    def idle_evidence(self, device: str, s: dict[str, Any]) -> dict[str, Any]:
        """Numbers behind an idle-GPU finding."""
        utils = [
            x.utilization_pct
            for x in self.run.samples
            if x.device == device and x.utilization_pct is not None
        ]
        mems = [
            x.memory_used_bytes
            for x in self.run.samples
            if x.device == device and x.memory_used_bytes is not None
        ]
        return {
            "idle_fraction": round(s["idle_fraction"], 4),
            "zero_utilization_fraction": round(sum(u == 0 for u in utils) / len(utils), 4)
            if utils
            else None,
            "busy_fraction": _round(s.get("busy_fraction")),
            "mean_utilization_pct": _round(s.get("mean_utilization_pct")),
            "duration_s": _round(s.get("duration_s")),
            "idle_time_s": _round(s["idle_fraction"] * (s.get("duration_s") or 0.0)),
            "peak_memory_used_bytes": s.get("peak_memory_used_bytes"),
            "min_memory_used_bytes": min(mems) if mems else None,
            "samples": s.get("samples"),
        }

    def thermal_share(self) -> tuple[float | None, float | None]:
        """Share of GPU samples with a thermal throttle reason, and the peak temperature."""
        known = [
            x
            for x in self.run.samples
            if x.device.startswith("gpu") and x.throttle_reasons is not None
        ]
        temps = [x.temperature_c for x in self.run.samples if x.temperature_c is not None]
        if not known:
            return None, max(temps) if temps else None
        hot = sum(any("thermal" in r for r in x.throttle_reasons or ()) for x in known)
        return hot / len(known), max(temps) if temps else None

    def headroom(self) -> tuple[int | None, int | None, int | None]:
        """``(batch factor that fits, peak bytes, total bytes)`` of the fullest GPU."""
        pairs = [
            (s.get("peak_memory_used_bytes"), s.get("memory_total_bytes") or self._device_memory(d))
            for d, s in self._gpu_summaries()
        ]
        known = [(int(p), int(t)) for p, t in pairs if p and t]
        if not known:
            return None, None, None
        peak, total = max(known, key=lambda pt: pt[0] / pt[1])
        return int(total * MEMORY_USABLE // peak), peak, total

    def _device_memory(self, device: str) -> int | None:
        for d in self.run.devices:
            if d.get("id") == device and isinstance(d.get("memory_total_bytes"), int):
                return int(d["memory_total_bytes"])
        return None

    def image_side(self) -> int | None:
        """The side of the job's images, read from its first batch (None: not known)."""
        return loader_image_side(self.run.extra.get("setup"))

    def bigger_batch_fix(self) -> Fix:
        """The bigger-batch fix, sized by the measured memory headroom when known."""
        return fx.bigger_batch(*self.headroom())

    @property
    def has_gpu(self) -> bool:
        """True when the Run names a GPU device (a trace's, a log's or a profiled one)."""
        ids = [str(d.get("id", "")) for d in self.run.devices]
        return any(i.startswith("gpu") for i in [*ids, *self.run.utilization])

    def compute_capability(self) -> str | None:
        """Compute capability of the first GPU, None on a CPU-only Run."""
        for d in self.run.devices:
            if str(d.get("id", "")).startswith("gpu") and d.get("compute_capability"):
                return str(d["compute_capability"])
        return None

    def cpu_bf16(self) -> bool:
        """True when the Run's CPU device says it has bf16 hardware."""
        for d in self.run.devices:
            if d.get("id") == "cpu":
                flags = d.get("flags") or ()
                return bool(d.get("bf16")) or any(f in flags for f in CPU_BF16_FLAGS)
        return False


def _h2d_copies(trace: TraceSection | None) -> dict[str, dict[str, Any]]:
    if trace is None:
        return {}
    return dict(trace.copies.get("h2d") or {})


def _cores(run: Run) -> int | None:
    """The job's host cores: its recorded CPU device; this machine's only for a job run here.

    A Run read from files (``analyze``) that records no CPU device ran elsewhere: None.
    """
    for d in run.devices:
        if d.get("id") == "cpu" and isinstance(d.get("cores"), int):
            return int(d["cores"])
    if run.source == "analyze" and run.trace is not None:
        return None
    return os.cpu_count() or 1


def _local_ranks(run: Run) -> int:
    return max(1, len({s.rank for s in run.steps}))


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _round(v: Any, digits: int = 4) -> Any:
    return round(v, digits) if isinstance(v, float) else v
