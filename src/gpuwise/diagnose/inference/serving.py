"""Rules over a serving run that name the stage bounding its throughput, with the fix.

A serving pipeline is a chain of stages that run at once (pre pool ∥ device ∥ post
pool), so its throughput is the smallest stage capacity, not a sum of times:

    capacity(pre)    = pre_workers  / mean pre seconds per request
    capacity(device) = mean batch size / mean device seconds per batch
    capacity(post)   = post_workers / mean post seconds per request

The bottleneck is the stage with the highest utilization (throughput / capacity). The
Amdahl-style bound of removing it is the next-smallest capacity over its own: past that,
the next stage binds. Inside the device, copies take a share of each batch's time, and
removing a share f allows at most ``1 / (1 - f)``. A fitted step-time model
``device_s = a + b * batch`` (least squares over the batches) says what a fuller or
bigger batch would give.

Example:
    >>> [f.kind for f in diagnose_serving(result)][:1]     # doctest: +SKIP
    ['pre_bound']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import feed
from gpuwise.records import Finding, Fix, Run
from gpuwise.records.serving import ServingResult

SATURATED = 0.7
"""A stage busy over 70 % of the time is the one holding throughput back."""

TRANSFER_SHARE = 0.2
"""Copies taking a fifth of the device's time per batch are worth naming."""

UNDERFILLED = 0.5
"""Batches under half full while the device is busy over half the time waste its fixed cost."""

WAIT_SHARE = 0.5
"""Requests waiting in queues over half of their latency are queueing, not being served."""

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def diagnose_serving(result: ServingResult) -> list[Finding]:
    """Diagnose one serving run; the first finding is the stage bounding it (or ``healthy``).

    Args:
        result: What a pipeline measured.

    Returns:
        Findings on throughput first (most severe, then by ``max_speedup``), then
        ``queueing``, which is about latency.
    """
    stats = _Stats(result)
    if stats.throughput <= 0:
        summary = "No request completed, so no stage can be judged"
        fix = Fix("Offer load for longer, or look at the failed requests' errors", "")
        return [Finding("no_measurements", "warning", summary, {"completed": 0}, None, (fix,))]
    found = [f for rule in RULES if (f := rule(stats)) is not None]
    # what bounds throughput first; queueing (latency) is its consequence under load
    found.sort(
        key=lambda f: (
            f.kind == "queueing",
            SEVERITY_ORDER.get(f.severity, 3),
            -(f.max_speedup or 1.0),
        )
    )
    if stats.utilization(stats.bottleneck()) < SATURATED and (
        not found or found[0].severity == "info"
    ):
        found.insert(0, _healthy(stats))
    return found


def main_kind(result: ServingResult) -> str:
    """Kind of the stage that bounds throughput (``pre_bound``, ``model_bound``, ...)."""
    stats = _Stats(result)
    return f"{stats.bottleneck()}_bound" if stats.throughput > 0 else "no_measurements"


class _Stats:
    """The numbers every rule reads, computed once."""

    def __init__(self, result: ServingResult) -> None:
        self.result = result
        self.settings = result.settings
        self.throughput = result.throughput_per_s()
        self.stage = {k: v or 0.0 for k, v in result.stage_mean_s().items()}
        self.batches = result.batch_stats()
        self.latency = result.latency_s()
        device_s = self.batches["mean_device_s"] or 0.0
        size = self.batches["mean_size"] or 0.0
        self.capacity = {
            "pre": _rate(self.settings.pre_workers, self.stage["pre"]),
            "model": _rate(size, device_s),
            "post": _rate(self.settings.post_workers, self.stage["post"]),
        }

    def utilization(self, stage: str) -> float:
        return min(1.0, self.throughput / self.capacity[stage])

    def bottleneck(self) -> str:
        return max(self.capacity, key=self.utilization)

    def bound(self, stage: str) -> float:
        """Most speedup from removing ``stage`` as a limit: the next capacity over its own."""
        others = [c for s, c in self.capacity.items() if s != stage]
        return min(others) / self.capacity[stage]

    def evidence(self, stage: str) -> dict[str, Any]:
        return {
            "throughput_per_s": round(self.throughput, 2),
            f"{stage}_busy_fraction": round(self.utilization(stage), 3),
            **{f"{s}_capacity_per_s": round(c, 1) for s, c in self.capacity.items()},
        }

    def fit(self) -> tuple[float, float] | None:
        """``(a_s, b_s)`` of ``device_s = a + b * batch``, from batches of 2+ sizes."""
        sizes = np.array([b.size for b in self.result.batches], dtype=np.float64)
        if np.unique(sizes).size < 2:
            return None
        times = np.array([b.device_s for b in self.result.batches], dtype=np.float64)
        b_s, a_s = np.polyfit(sizes, times, 1)
        return (float(a_s), float(b_s)) if a_s > 0 and b_s > 0 else None


def _rate(workers: float, seconds: float) -> float:
    return workers / seconds if seconds > 0 else float("inf")


def _stage_finding(
    stats: _Stats, stage: str, summary: str, fixes: tuple[Fix, ...]
) -> Finding | None:
    if stats.bottleneck() != stage or stats.utilization(stage) < SATURATED:
        return None
    speedup = min(stats.bound(stage), 100.0)
    severity = fx.severity_for(speedup) or "info"
    evidence = stats.evidence(stage)
    evidence[f"{stage}_per_request_ms"] = round(stats.stage[stage] * 1e3, 3)
    return Finding(f"{stage}_bound", severity, summary, evidence, round(speedup, 3), fixes)


def pre_bound(stats: _Stats) -> Finding | None:
    """The pre pool is the busiest stage."""
    n = stats.settings.pre_workers
    summary = (
        f"Preprocessing bounds throughput: {n} pre worker{'s' if n > 1 else ''} at "
        f"{stats.utilization('pre'):.0%} while the device waits"
    )
    fixes = (
        _more_pre_workers(stats, n),
        Fix(
            "Do less per sample on the CPU: decode at reduced size, resize/normalise on the device",
            "pre = lambda b: gpuwise.data.jpeg.decode_resize(b, 224); Pipeline(..., transform=...)",
        ),
        Fix(
            "Keep pre in code that releases the GIL (simplejpeg, OpenCV, torch ops)",
            "a pure-Python pre runs one thread at a time, whatever pre_workers says",
        ),
    )
    return _stage_finding(stats, "pre", summary, fixes)


IDLE_CORE = 0.5
"""Half a core unused is room for one more pre worker."""


def _more_pre_workers(stats: _Stats, n: int) -> Fix:
    """More pre workers where the run left cores idle; more cores where it used them all.

    The run's ``load`` says how many cores the process used and could use (serve-bench
    measures both); a run without them (an older file) gets the workers fix.
    """
    used, cores = stats.result.load.get("cores_used"), stats.result.load.get("cores")
    if used is None or not cores or cores - used >= IDLE_CORE:
        return Fix("Add pre workers where cores are idle", f"Pipeline(..., pre_workers={n + 1})")
    return Fix(  # another worker on the same cores would only take turns with the others
        f"Give the server more cores (it used {used:.1f} of its {cores})",
        f"raise the container's CPU limit or the affinity mask (taskset), then "
        f"Pipeline(..., pre_workers={n + 1})",
    )


def post_bound(stats: _Stats) -> Finding | None:
    """The post pool is the busiest stage."""
    n = stats.settings.post_workers
    summary = (
        f"Postprocessing bounds throughput: {n} post worker(s) at {stats.utilization('post'):.0%}"
    )
    fixes = (
        Fix("Add post workers", f"Pipeline(..., post_workers={n + 1})"),
        Fix(
            "Reduce outputs on the device (top-k, argmax) so post handles a few numbers",
            "model = lambda x: net(x).softmax(1).topk(5)",
        ),
    )
    return _stage_finding(stats, "post", summary, fixes)


def transfer_bound(stats: _Stats) -> Finding | None:
    """The device is the bottleneck and copies take a large share of its time."""
    device_s = sum(b.device_s for b in stats.result.batches)
    if stats.bottleneck() != "model" or device_s <= 0 or stats.utilization("model") < SATURATED:
        return None
    share = sum(b.h2d_s + b.d2h_s for b in stats.result.batches) / device_s
    if share < TRANSFER_SHARE:
        return None
    speedup = fx.amdahl(share)
    evidence = {
        "copy_device_fraction": round(share, 3),
        "h2d_bytes_per_batch": stats.batches.get("mean_h2d_bytes"),
        **stats.evidence("model"),
    }
    summary = f"Copies to and from the device take {share:.0%} of each batch's device time"
    fixes = (
        feed.uint8_across(),
        Fix(
            "Return only what post needs (reduce on the device)",
            "model = lambda x: net(x).topk(5)",
        ),
    )
    severity = fx.severity_for(speedup) or "info"
    return Finding("transfer_bound", severity, summary, evidence, round(speedup, 3), fixes)


def model_bound(stats: _Stats) -> Finding | None:
    """The device runs the model nearly all the time: the pipeline is where it should be."""
    if stats.bottleneck() != "model" or stats.utilization("model") < SATURATED:
        return None
    fill = stats.batches["mean_fill"] or 0.0
    evidence = stats.evidence("model")
    evidence["mean_fill_fraction"] = round(fill, 3)
    fit = stats.fit()
    speedup = None
    fixes: list[Fix] = []
    if fit is not None and fill >= 0.9:
        a_s, b_s = fit
        big = 2 * stats.settings.max_batch
        now = stats.settings.max_batch / (a_s + b_s * stats.settings.max_batch)
        speedup = round((big / (a_s + b_s * big)) / now, 3)
        evidence.update(batch_fixed_ms=round(a_s * 1e3, 3), per_row_ms=round(b_s * 1e3, 4))
        fixes.append(
            Fix(
                f"Raise max_batch to {big} (measured {a_s * 1e3:.2f} ms per batch + "
                f"{b_s * 1e3:.3f} ms per row: up to {speedup:.2f}x, at a higher latency)",
                f"Pipeline(..., max_batch={big})",
            )
        )
    fixes.append(Fix("Make the model cheaper: lower precision, torch.compile, a smaller model", ""))
    summary = f"The model bounds throughput: the device is busy {stats.utilization('model'):.0%}"
    severity = fx.severity_for(speedup or 1.0) or "info"
    return Finding("model_bound", severity, summary, evidence, speedup, tuple(fixes))


def underfilled_batches(stats: _Stats) -> Finding | None:
    """Batches leave small while the device is busy: its fixed cost per batch is wasted."""
    fill = stats.batches["mean_fill"]
    busy = stats.batches["device_busy_fraction"] or 0.0
    fit = stats.fit()
    if fill is None or fill >= UNDERFILLED or busy < UNDERFILLED or fit is None:
        return None
    a_s, b_s = fit
    size, full = stats.batches["mean_size"], stats.settings.max_batch
    speedup = (full / (a_s + b_s * full)) / (size / (a_s + b_s * size))
    delay_ms = max(1.0, 1e3 * full / max(stats.throughput, 1e-9))
    evidence = {
        "mean_fill_fraction": round(fill, 3),
        "mean_batch_size": round(size, 2),
        "device_busy_fraction": round(busy, 3),
        "batch_fixed_ms": round(a_s * 1e3, 3),
        "per_row_ms": round(b_s * 1e3, 4),
    }
    summary = f"Batches leave {fill:.0%} full while the device is busy {busy:.0%} of the time"
    fixes = (
        Fix(
            "Wait longer for a batch to fill (about max_batch / request rate)",
            f"Pipeline(..., max_delay_ms={delay_ms:.0f})",
        ),
        Fix(
            "Lower max_batch to what the load fills",
            f"Pipeline(..., max_batch={max(1, round(size))})",
        ),
    )
    severity = fx.severity_for(speedup) or "info"
    return Finding("underfilled_batches", severity, summary, evidence, round(speedup, 3), fixes)


def queueing(stats: _Stats) -> Finding | None:
    """Requests spend most of their latency waiting in queues."""
    mean_s = stats.latency["mean"] or 0.0
    wait_s = stats.stage["queue"] + stats.stage["batch_wait"] + stats.stage["post_wait"]
    if mean_s <= 0 or wait_s / mean_s < WAIT_SHARE:
        return None
    share = wait_s / mean_s
    speedup = fx.amdahl(share)
    evidence = {
        "wait_latency_fraction": round(share, 3),
        "queue_ms": round(stats.stage["queue"] * 1e3, 3),
        "batch_wait_ms": round(stats.stage["batch_wait"] * 1e3, 3),
        "post_wait_ms": round(stats.stage["post_wait"] * 1e3, 3),
        "p99_ms": round((stats.latency["p99"] or 0.0) * 1e3, 3),
    }
    summary = (
        f"Requests wait in queues for {share:.0%} of their latency (the load exceeds capacity)"
    )
    fixes = (
        Fix(
            f"Add capacity at the bottleneck ({stats.bottleneck()}), or offer less load",
            "gpuwise serve-bench --slo-p99-ms T  # finds the fastest setting meeting T",
        ),
        Fix(
            "Shed load early instead of queueing it",
            "Pipeline(..., max_queue=2 * max_batch); pipe.submit(x, deadline_ms=T)",
        ),
    )
    severity = fx.severity_for(speedup) or "info"
    return Finding("queueing", severity, summary, evidence, round(speedup, 3), fixes)


def _healthy(stats: _Stats) -> Finding:
    stage = stats.bottleneck()
    summary = (
        f"No stage is saturated: the busiest, {stage}, is at {stats.utilization(stage):.0%}; "
        "the pipeline keeps up with the load offered"
    )
    return Finding("healthy", "info", summary, stats.evidence(stage), None, ())


RULES = (pre_bound, post_bound, transfer_bound, model_bound, underfilled_batches, queueing)


def serving_run(result: ServingResult, command: list[str] | None, app: str) -> Run:
    """Wrap a serving result as a diagnosed ``gpuwise.run/1`` Run (section ``serving``).

    Args:
        result: What the pipeline measured.
        command: The command line that produced it, if any.
        app: Name of the served app, for the report.
    """
    import torch

    from gpuwise._version import __version__

    meta = {"app": app, "gpuwise_version": __version__, "torch_version": torch.__version__}
    return Run(
        source="serve-bench",
        command=command,
        devices=[{"id": result.settings.device}],
        findings=diagnose_serving(result),
        meta=meta,
        serving=result,
    )
