"""Rules over the compute split of profiled steps: optimizer share, backward vs forward, batch.

The split (``steps.compute_split`` of the Run contract) comes from the profiler's forward,
backward and optimizer regions. The optimizer update costs the same whatever the batch, so
its share is measured evidence of a fixed per-step cost; the small-batch verdict uses it
when it was measured, and the step's median (not its mean, which an evaluation pass or a
checkpoint save can inflate) otherwise.
"""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding, Fix

SMALL_BATCH = 8
SHORT_STEP_S = 0.05
"""Batches of <= 8 samples in steps under 50 ms: fixed per-step costs (Python, launches,
optimizer) may dominate the work the batch carries."""

PER_SAMPLE_S = 0.004
"""...but only when each sample costs little: an eager step's fixed cost is one to a few
milliseconds, so at over 4 ms per sample the step grows with the batch and a bigger batch
gains little."""

MEASURED_BATCH = 32
"""With a measured optimizer share, batches up to 32 are judged on it."""

FIXED_SHARE = 0.25
"""An optimizer update taking a quarter of the step is a fixed cost a larger batch spreads."""

BACKWARD_RATIO = 3.0
"""Backward costs about twice the forward; over three times points at recomputation
(activation checkpointing) or hooks run during backward."""

BACKWARD_MIN_FORWARD_S = 0.002
"""...once the forward does real work: under 2 ms a step, autograd's fixed cost per node
alone makes the backward several times the forward."""


def optimizer_bound(ctx: Context) -> Finding | None:
    """The optimizer update takes a large share of each step."""
    split = ctx.stats.get("compute_split")
    if not split:
        return None
    f = float(split["optimizer"])
    speedup = fx.amdahl(f)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    evidence = {
        "optimizer_fraction": round(f, 4),
        "optimizer_s": _per_step(ctx, f),
        "forward_fraction": round(float(split["forward"]), 4),
        "backward_fraction": round(float(split["backward"]), 4),
    }
    summary = f"The optimizer update takes {f:.1%} of each step, whatever the batch"
    fixes = (fused_optimizer(), ctx.bigger_batch_fix())
    return Finding("optimizer_bound", severity, summary, evidence, round(speedup, 3), fixes)


def backward_heavy(ctx: Context) -> Finding | None:
    """Backward much longer than the usual ~2x forward."""
    split = ctx.stats.get("compute_split")
    if not split or float(split["forward"]) <= 0:
        return None
    ratio = float(split["backward"]) / float(split["forward"])
    forward_s = _per_step(ctx, float(split["forward"]))
    if ratio < BACKWARD_RATIO or forward_s is None or forward_s < BACKWARD_MIN_FORWARD_S:
        return None
    evidence = {
        "backward_to_forward": round(ratio, 2),
        "backward_fraction": round(float(split["backward"]), 4),
        "forward_fraction": round(float(split["forward"]), 4),
    }
    summary = f"Backward takes {ratio:.1f}x the forward (about 2x is usual)"
    fixes = (
        Fix(
            "Check for recomputation: activation checkpointing reruns the forward in backward",
            "torch.utils.checkpoint only around the largest blocks, or not at all",
        ),
        Fix(
            "Check for hooks on gradients (tensor.register_hook, module backward hooks)",
            "print(model._backward_hooks) and each parameter's _backward_hooks",
        ),
    )
    return Finding("backward_heavy", "info", summary, evidence, None, fixes)


def small_batch(ctx: Context) -> Finding | None:
    """Tiny batches in short steps: fixed per-step costs dominate."""
    batch = ctx.median_batch()
    step_s = ctx.stats.get("median_s") or ctx.stats.get("mean_s")
    if batch is None or step_s is None:
        return None
    split = ctx.stats.get("compute_split")
    fixed = float(split["optimizer"]) if split else None
    measured = fixed is not None and batch <= MEASURED_BATCH and fixed >= FIXED_SHARE
    guessed = batch <= SMALL_BATCH and step_s < SHORT_STEP_S and step_s / batch <= PER_SAMPLE_S
    if not (measured or guessed):
        return None
    evidence: dict[str, Any] = {
        "batch_size": batch,
        "step_median_s": round(step_s, 6),
        "step_mean_s": _round(ctx.stats.get("mean_s")),
        "per_sample_s": round(step_s / max(batch, 1), 6),
        "fixed_cost_fraction": None if fixed is None else round(fixed, 4),
        "samples_per_s": ctx.stats.get("samples_per_s"),
    }
    basis = f"the optimizer alone takes {fixed:.0%}" if measured else "per-step overhead dominates"
    summary = f"Batches of {batch} in {step_s * 1e3:.1f} ms steps: {basis}"
    fixes = (ctx.bigger_batch_fix(), measure_curve(), fx.fewer_launches())
    speedup = round(fx.amdahl(fixed), 3) if measured and fixed is not None else None
    return Finding("small_batch", "warning", summary, evidence, speedup, fixes)


def fused_optimizer() -> Fix:
    """Fix: one fused kernel (or a few foreach kernels) for the whole update."""
    return Fix(
        "Update all parameters in a few kernels instead of one loop per tensor",
        "torch.optim.AdamW(model.parameters(), fused=True)  # or foreach=True",
    )


def measure_curve() -> Fix:
    """Fix: measure step time against the batch size."""
    return Fix(
        "Measure time per sample against the batch size before choosing one",
        "gpuwise tune package.module:factory --start-batch 4  # times each batch it tries",
    )


def _per_step(ctx: Context, fraction: float) -> float | None:
    mean_s = ctx.stats.get("mean_s")
    return None if mean_s is None else round(fraction * float(mean_s), 6)


def _round(v: Any) -> float | None:
    return None if v is None else round(float(v), 6)
