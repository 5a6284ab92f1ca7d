"""Fixes fitted to what a traced job already is: no fix for what is applied.

A trace names its optimizer (``Optimizer.step#SGD.step``) and shows its implementation
(``aten::_foreach_*`` or ``aten::_fused_*`` ops inside the step, ``multi_tensor_apply``
kernels), whether autocast runs its GEMMs in half precision, and whether one step
evaluates a closure many times (L-BFGS: a full-batch method). So:

- the optimizer fix is written for the job's own class: fused where PyTorch has a fused
  update for it on the GPU (Adam, AdamW, SGD; Adagrad's fused update is CPU-only in the
  releases these traces come from), foreach where it has only that, and none where the
  trace already runs the best the class has, or the class has neither (L-BFGS);
- no mixed-precision fix where the GEMMs already run in half precision;
- no "larger batch" or "gradient accumulation" for a closure optimizer's full batch;
- no optimizer fix for a job whose trace shows no optimizer step: none among its host
  ops and no optimizer kernel on the device (a forward pass, a micro-test, a manual
  update, or a trace of device events only).

Runs without a trace, or whose setup was recorded by ``profile``, are left as they are
(``fix_terms.in_user_terms`` writes those in the user's terms).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.records import Finding, Fix

FUSED_ON_GPU = frozenset({"Adam", "AdamW", "SGD"})
"""torch.optim classes with a fused update on CUDA and ROCm."""

FOREACH = frozenset(
    {"Adam", "AdamW", "SGD", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam",
     "RMSprop", "Rprop"}
)  # fmt: skip
"""torch.optim classes with a foreach (multi-tensor) update."""


def fit_to_trace_anatomy(found: list[Finding], ctx: Context) -> list[Finding]:
    """Drop or rewrite the fixes that the traced job's anatomy shows do not apply."""
    facts = ctx.trace.facts if ctx.trace is not None else None
    if facts is None or ctx.run.extra.get("setup"):
        return found
    tl = facts.timeline or {}
    applied = ctx.anatomy.applied
    closure = float(tl.get("closure_evaluations") or 0.0) >= 2
    ev = facts.job.get("evidence") or {}
    # no optimizer step among the host ops and no optimizer kernel on the device: whether
    # the host ops were recorded or not, nothing here steps an optimizer (issue 44 #3)
    no_optimizer = not ev.get("optimizer_spans") and not ev.get("optimizer_kernel_s")
    out = []
    for f in found:
        fixes = tuple(
            new
            for fix in f.fixes
            for new in _fit(fix, tl, applied, closure=closure, no_optimizer=no_optimizer)
        )
        out.append(f if fixes == f.fixes else dataclasses.replace(f, fixes=fixes))
    return out


def _fit(
    fix: Fix, tl: dict[str, Any], applied: dict[str, Any], *, closure: bool, no_optimizer: bool
) -> list[Fix]:
    if "torch.optim" in fix.how and ("fused=True" in fix.how or "foreach=True" in fix.how):
        if no_optimizer:
            return []  # the host ops were recorded and no optimizer step is among them
        return optimizer_fix(tl.get("optimizer"), tl.get("optimizer_impl"))
    if closure and _batch_fix(fix):
        return []  # one step evaluates the whole data set: there is no batch to grow
    if applied.get("amp_dtype") == "half" and "torch.autocast(" in fix.how:
        return []
    return [fix]


def _batch_fix(fix: Fix) -> bool:
    text = f"{fix.action} {fix.how}".lower()
    return "batch size" in text or "batch_size" in text or "accumulation" in text


def optimizer_fix(cls: Any, impl: Any) -> list[Fix]:
    """The optimizer fix for a traced job's class and implementation (``[]``: none applies).

    Args:
        cls: The class name from ``Optimizer.step#Class.step`` (None: not recorded).
        impl: ``"fused"``, ``"foreach"``, ``"for-loop"`` or None (not told).
    """
    if impl == "fused":
        return []
    if not isinstance(cls, str):
        if impl == "foreach":
            return []  # already multi-tensor; the class that could fuse it is not known
        return [
            Fix(
                "Launch fewer, larger optimizer kernels",
                "your torch.optim optimizer with foreach=True, or fused=True where it has one "
                "(Adam, AdamW, SGD)",
            )
        ]
    if cls in FUSED_ON_GPU:
        return [
            Fix(
                f"Update all parameters of {cls} in one fused kernel",
                f"torch.optim.{cls}(params, ..., fused=True)",
            )
        ]
    if cls in FOREACH and impl != "foreach":
        return [
            Fix(
                f"Update {cls}'s parameters in a few foreach kernels ({cls} has no fused "
                "update on the GPU)",
                f"torch.optim.{cls}(params, ..., foreach=True)",
            )
        ]
    return []
