"""What a trace shows about its job, in size: premises of fixes, job kind, vendor.

``Premises`` are each fix's precondition measured on the trace's device facts (a share of
device time, not the mere presence of an event); ``job_of`` gives the job kind, engine and
vendor; ``fit_to_job`` drops the fixes whose scope (``fix_scope``) does not fit them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes.scope import keep_fitting
from gpuwise.records import Finding
from gpuwise.records.trace import TraceFacts

LOW_PRECISION_SHARE = 0.5
COMPILED_SHARE = 0.5
"""A job is compiled when half its device time ran in compiled regions (or Triton kernels)."""

GRAPHED_SHARE = 0.5
"""...and already graphed when half its device time was replayed by graph launches."""

H2D_BLOCKING_SHARE = 0.02
"""Copies on the compute stream block it when they take 2 % of the device span."""


@dataclass(frozen=True)
class Premises:
    """What the trace shows about the job, in size: each fix's precondition.

    Attributes:
        compiled: Half the device time ran in compiled regions or Triton kernels.
        eager: Neither compiled nor replayed as graphs (compile/graph advice fits).
        ungraphed: Under half the device time came from CUDA/HIP graph launches.
        images: A convolution's input was a 4-D image batch.
        h2d_blocks_compute: Host-to-device copies on the compute stream take 2 % of the
            device span (copies on a side stream already overlap compute).
        fp32_gemm: Half the GEMM/convolution time runs in fp32/tf32.
        layout_conversions: NCHW<->NHWC conversion kernels are among the top kernels.
    """

    compiled: bool
    images: bool
    h2d_blocks_compute: bool
    fp32_gemm: bool
    layout_conversions: bool
    eager: bool = True
    ungraphed: bool = True

    @classmethod
    def of(cls, f: TraceFacts) -> Premises:
        """Read the premises from a trace's device facts."""
        compiled, prec, h2d = f.compiled, f.gemm_precision_s, f.h2d
        total = sum(prec.values())
        names = [k.name for k in f.top_kernels]
        share = compiled.get("device_share")
        if share is None:  # a document written before shares were kept
            is_compiled = bool(compiled.get("regions") or compiled.get("triton_kernels"))
        else:
            is_compiled = float(share) >= COMPILED_SHARE
        graphed = float(f.graphs.get("device_share") or 0.0) >= GRAPHED_SHARE
        blocking = float(h2d.get("on_compute_stream_s") or 0.0)
        return cls(
            compiled=is_compiled,
            images=f.image_inputs is True,
            h2d_blocks_compute=f.device_span_s > 0
            and blocking / f.device_span_s >= H2D_BLOCKING_SHARE,
            fp32_gemm=total > 0
            and (prec.get("fp32", 0.0) + prec.get("tf32", 0.0)) / total >= LOW_PRECISION_SHARE,
            layout_conversions=any("nchwToNhwc" in n or "nhwcToNchw" in n for n in names),
            eager=not is_compiled and not graphed,
            ungraphed=not graphed,
        )

    def held(self) -> dict[str, bool]:
        """The premises by name (``fix_scope`` premises)."""
        return {k: bool(getattr(self, k)) for k in self.__dataclass_fields__}


def job_of(ctx: Context) -> tuple[str, str | None, str | None]:
    """``(job kind, engine, vendor)`` of the Run's trace; ``("unknown", None, None)`` without."""
    f = facts_of(ctx)
    if f is None:
        return "unknown", None, None
    vendor = f.vendor if f.device_events else ("cpu" if f.launch_calls == 0 else f.vendor)
    return f.job_kind, f.job.get("engine"), vendor


def fit_to_job(found: list[Finding], ctx: Context) -> list[Finding]:
    """Drop from each finding the fixes that do not fit the traced job (``fix_scope``).

    Runs without a trace keep their fixes: their job kind is not known.
    """
    if facts_of(ctx) is None:
        return found
    job, _, vendor = job_of(ctx)
    p = premises(ctx)
    held = p.held() if p is not None else {}
    out = []
    for f in found:
        fixes = keep_fitting(f.fixes, job, vendor, held)
        out.append(f if fixes == f.fixes else dataclasses.replace(f, fixes=fixes))
    return out


def has_facts(ctx: Context) -> bool:
    """True when the Run's trace section carries device facts."""
    return facts_of(ctx) is not None


def facts_of(ctx: Context) -> TraceFacts | None:
    """The device facts of the Run's trace (None without them)."""
    return ctx.trace.facts if ctx.trace is not None else None


def premises(ctx: Context) -> Premises | None:
    """The premises of a trace Run (None for Runs without device facts)."""
    f = facts_of(ctx)
    return Premises.of(f) if f is not None else None
