"""Findings a trace's anatomy makes: its one-time start-up costs, and fp32 GEMMs on tensor cores.

- ``startup_costs`` (info): what the host did before the steady state (the first
  launches, stream and event creation, start-up syncs and allocator calls). Per-step rules
  judge the steady state only (the reader's window is the steady state when the trace has
  no profiler steps), so these costs get their own line; their one fix, a profiler
  schedule, only where start-up is most of a trace recorded without one.
- ``fp32_gemms``: fp32 GEMMs and convolutions are the bulk of device compute on a card
  with tensor cores (NVIDIA compute capability 7.0 and later, AMD Instinct MI100 and
  later): TF32 or bf16 (fp16 on Volta and Turing) runs them several times faster. The
  bound assumes the tensor rate is ``TENSOR_OVER_FP32`` times the fp32 rate.
"""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding, Fix
from gpuwise.records.trace import TraceFacts

STARTUP_SHARE = 0.5
"""Start-up taking half the recorded time: the recording holds little steady state."""

STARTUP_NOTE_SHARE = 0.2
"""Within profiler steps, a prologue under a fifth of the trace is the profiler's own."""

FP32_GEMM_SHARE = 0.5
"""fp32 GEMMs/convolutions at half the compute kernel time are the bulk of the work."""

TENSOR_OVER_FP32 = 8.0
"""Dense TF32 (NVIDIA A100: 156 vs 19.5 TFLOP/s) and fp16 (V100: 125 vs 15.7) tensor rates
over the fp32 rate; the speedup bound of the GEMMs' share uses it."""


def startup_costs(ctx: Context) -> Finding | None:
    """One-time costs before the steady state, on their own line."""
    f = _facts(ctx)
    if f is None or not f.timeline:
        return None
    tl = f.timeline
    ot = tl.get("one_time") or {}
    startup = ot.get("startup_s")
    steady = tl.get("steady_s")
    if float((f.excerpt or {}).get("first_launches_s") or 0.0) > 0:
        return _first_launches(f, ot)
    if startup is None or not steady:
        return None
    counts = {k: (ot.get(k) or {}) for k in ("syncs", "allocs", "creations", "slow_launches")}
    if startup <= 0 and not any(c.get("before") for c in counts.values()):
        return None
    span = float((f.excerpt or {}).get("trace_span_s") or 0.0) or float(steady[1])
    share = startup / span if span > 0 else 0.0
    judged_apart = ctx.trace is not None and ctx.trace.window_source == "steady_state"
    if not judged_apart and share < STARTUP_NOTE_SHARE:
        return None
    summary = (
        f"Start-up: {_time(startup)} of the {_time(span)} trace before the steady state"
        f"{_parts(counts)}; one-time costs, judged apart from the "
        f"{tl.get('steady_steps')} steady steps"
    )
    evidence: dict[str, Any] = {
        "startup_s": round(startup, 6),
        "trace_span_s": round(span, 6),
        "startup_fraction": round(share, 4),
        "steady_steps": tl.get("steady_steps"),
        "step_unit": tl.get("step_unit"),
        **{f"{k}_before_steady": c.get("before", 0) for k, c in counts.items()},
        **{f"{k}_in_trace": c.get("all", 0) for k, c in counts.items()},
    }
    fixes: tuple[Fix, ...] = ()
    if share >= STARTUP_SHARE and ctx.trace is not None and not ctx.trace.profiler_steps:
        fixes = (_schedule(),)
    return Finding("startup_costs", "info", summary, evidence, None, fixes)


def _first_launches(f: TraceFacts, ot: dict[str, Any]) -> Finding:
    """Start-up of a stepless trace: the first launches that loaded code (``excerpt``)."""
    ex = f.excerpt or {}
    startup, span = float(ex["startup_s"]), float(ex.get("trace_span_s") or 0.0)
    n, load = int(ex.get("first_launches") or 0), float(ex["first_launches_s"])
    longest = float((ot.get("slow_launches") or {}).get("longest_s") or 0.0)
    summary = (
        f"Start-up: {_time(startup)} of the {_time(span)} trace before the device work began; "
        f"{n} first launch{'es' if n != 1 else ''} held the host {_time(load)} loading their "
        f"code (the longest {_time(longest)}); one-time costs, judged apart from the work after"
    )
    evidence: dict[str, Any] = {
        "startup_s": round(startup, 6),
        "trace_span_s": round(span, 6),
        "startup_fraction": round(startup / span, 4) if span > 0 else None,
        "first_launches": n,
        "first_launches_s": round(load, 6),
        "longest_launch_s": round(longest, 6),
    }
    return Finding("startup_costs", "info", summary, evidence, None, ())


def _parts(counts: dict[str, dict[str, Any]]) -> str:
    words = {
        "slow_launches": "slow first launches",
        "creations": "stream/event creations",
        "syncs": "syncs",
        "allocs": "allocator calls",
    }
    parts = []
    launch = counts["slow_launches"]
    if launch.get("before"):
        parts.append(f"first launch {_time(float(launch.get('longest_s') or 0.0))}")
    for key in ("creations", "syncs", "allocs"):
        c = counts[key]
        if c.get("before"):
            parts.append(f"{c['before']} of {c['all']} {words[key]}")
    return f" ({'; '.join(parts)})" if parts else ""


def _schedule() -> Fix:
    return Fix(
        "Record the steady state with a profiler schedule, so the trace holds steps, not start-up",
        "torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=5), "
        "on_trace_ready=torch.profiler.tensorboard_trace_handler('./log')); prof.step() "
        "at the end of each iteration",
    )


def fp32_gemms(ctx: Context) -> Finding | None:
    """fp32 GEMMs are the bulk of device compute on a card with tensor cores."""
    f = _facts(ctx)
    if f is None or not f.device_events:
        return None
    compute = float(f.kernel_classes_s.get("compute") or 0.0)
    fp32 = float(f.gemm_precision_s.get("fp32") or 0.0)
    if compute <= 0 or fp32 / compute < FP32_GEMM_SHARE:
        return None
    found = _tensor_cores(ctx, f.vendor)
    if found is None:
        return None
    card, major = found
    share = fp32 / compute
    window = float(ctx.trace.window_s or 0.0) if ctx.trace is not None else 0.0
    of_window = min(1.0, fp32 / window) if window > 0 else share
    bound = 1.0 / ((1.0 - of_window) + of_window / TENSOR_OVER_FP32)
    severity = fx.severity_for(bound)
    if severity is None:
        return None  # the GEMMs are too small a part of the window to matter
    summary = (
        f"fp32 GEMMs and convolutions take {share:.0%} of the device's compute time "
        f"({of_window:.0%} of the window) on {card}, which has tensor cores: "
        f"{_tensor_precisions(major)} runs them up to {TENSOR_OVER_FP32:g}x faster, "
        f"at most {bound:.2f}x for the job"
    )
    evidence: dict[str, float | int | str | None] = {
        "fp32_gemm_s": round(fp32, 6),
        "compute_kernel_s": round(compute, 6),
        "fp32_gemm_fraction": round(share, 4),
        "fp32_gemm_window_fraction": round(of_window, 4),
        "device": card,
        "tensor_over_fp32": TENSOR_OVER_FP32,
    }
    fixes: list[Fix] = []
    if major is not None and major >= 8:
        fixes.append(
            Fix(
                "Run fp32 matrix multiplies on the tensor cores as TF32 (no code change)",
                "torch.backends.cuda.matmul.allow_tf32 = True; "
                "torch.backends.cudnn.allow_tf32 = True  # or "
                "torch.set_float32_matmul_precision('high')",
            )
        )
    half = fx.mixed_precision(f"{major}.0" if major is not None else "8.0", False)
    if half is not None:
        fixes.append(half)
    return Finding("fp32_gemms", severity, summary, evidence, round(bound, 3), tuple(fixes))


def _tensor_precisions(major: int | None) -> str:
    """What the card's tensor cores run.

    Volta and Turing (7.x) fp16 only, Ampere on TF32 and bf16 as well; AMD Instinct
    (``None``) bf16 and fp16.
    """
    if major is None:
        return "bf16 or fp16"
    return "TF32 or bf16" if major >= 8 else "fp16 (the one precision its tensor cores run)"


def _tensor_cores(ctx: Context, vendor: str | None) -> tuple[str, int | None] | None:
    """The card's name and major compute capability (None on AMD), if it has tensor cores.

    Tensor (matrix) cores: NVIDIA compute capability 7.0 and later, AMD Instinct MI100
    and later.
    """
    for d in ctx.run.devices:
        if not str(d.get("id", "")).startswith("gpu"):
            continue
        name = str(d.get("name") or "GPU")
        cc = d.get("compute_capability")
        low = name.lower()
        if vendor == "amd" or any(m in low for m in _AMD_MATRIX):
            return (name, None) if any(m in low for m in _AMD_MATRIX) else None
        if isinstance(cc, str) and cc[:1].isdigit() and "." in cc:
            major = int(cc.split(".")[0])
            return (name, major) if major >= 7 else None
    return None


_AMD_MATRIX = ("instinct", "mi100", "mi210", "mi250", "mi300", "mi325", "mi355")


def _facts(ctx: Context) -> TraceFacts | None:
    return ctx.trace.facts if ctx.trace is not None else None


def _time(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


ANATOMY_RULES = (startup_costs, fp32_gemms)
