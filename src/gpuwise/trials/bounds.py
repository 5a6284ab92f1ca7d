"""The most one fix could gain: a per-fix bound, tighter than its finding's.

A finding's bound (``profile``/``analyze``: "at most N x") is Amdahl's for removing its
stage entirely. A fix removes only part of it, so ``gpuwise try`` promises, per fix:

- ``optimizer_fused`` / ``optimizer_foreach``: the optimizer's share of the step times the
  share of the update the flag saves. That saving is measured here, before any trial: the
  user's optimizer class is stepped on tensors of the job's own parameter sizes (up to
  ``MAX_ELEMENTS`` of them), once as the job built it and once with the flag, interleaved,
  fastest of ``ROUNDS`` each. A fused update still reads and writes every parameter and
  its state; only the per-tensor work goes.
- ``loader_workers``: ``w`` workers make batches in parallel, so the wait can at best fall
  to ``wait / w`` and hide behind compute: the step is at least ``max(compute, wait / w)``.
- Any other fix keeps its finding's bound (or none).

Where the saving cannot be measured (no such class in ``torch.optim``, a CUDA job from a
process without a GPU), the finding's bound stays, and the basis says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpuwise.diagnose.fixes.catalog import amdahl

MAX_ELEMENTS = 4_000_000
"""Parameter elements the optimizer measurement steps at most (16 MB of fp32 a tensor kind)."""

ROUNDS = 7
"""Timed update pairs; the fastest of each side is kept (another process only slows one)."""


def loader_bound(
    wait_fraction: float, workers: int, finding_bound: float | None = None
) -> tuple[float, str]:
    """The bound of ``workers`` loader workers on a step waiting ``wait_fraction`` for data.

    Never above ``finding_bound``, the finding's own (rounded) bound for removing the wait.
    """
    f = min(max(wait_fraction, 0.0), 0.99)
    bound = 1 / max(1 - f, f / max(1, workers))
    basis = (
        f"the {f:.0%} data wait made by {workers} worker(s) in parallel: at best the step "
        f"is max(compute, wait / {workers})"
    )
    return _capped(min(bound, amdahl(f)), finding_bound), basis


def _capped(bound: float, finding_bound: float | None) -> float:
    """``bound`` to 3 decimals, never above the finding's own bound (rounded or not)."""
    return round(bound, 3) if finding_bound is None else min(round(bound, 3), finding_bound)


def optimizers_bound(
    finding_bound: float | None,
    evidence: Mapping[str, Any],
    flagged: Sequence[tuple[Mapping[str, Any], str]],
) -> tuple[float | None, str]:
    """The bound of several optimizers' flags (a GAN's two): their savings, by parameters.

    Each ``(record, flag)``'s measured saving is weighted by the elements its optimizer
    updates; one that cannot be measured leaves the finding's bound.
    """
    if len(flagged) == 1:
        return optimizer_bound(finding_bound, evidence, *flagged[0])
    f = float(evidence.get("optimizer_fraction") or 0.0)
    savings = [update_saving(record, flag) for record, flag in flagged]
    sizes = [sum(int(n) for n in record.get("numels") or []) for record, _ in flagged]
    if f <= 0 or finding_bound is None or any(s is None for s in savings) or not sum(sizes):
        return finding_bound, "the whole optimizer update removed (its finding's bound)"
    saving = sum(float(s or 0.0) * n for s, n in zip(savings, sizes, strict=True)) / sum(sizes)
    names = " and ".join(f"{r.get('class')}(..., {flag}=True)" for r, flag in flagged)
    basis = (
        f"the optimizers' {f:.0%} of the step x the {saving:.0%} of their updates that "
        f"{names} saved on the job's parameter sizes, measured here"
    )
    return _capped(amdahl(f * saving), finding_bound), basis


def update_saving(record: Mapping[str, Any], flag: str) -> float | None:
    """The share of one optimizer update that ``flag=True`` saves, measured on this machine.

    Args:
        record: The optimizer's setup record (class, flags, device, parameter sizes).
        flag: ``fused`` or ``foreach``.

    Returns:
        ``1 - flagged / as built`` in ``[0, 1]``, or ``None`` when it cannot be measured.
    """
    import torch

    cls = getattr(torch.optim, str(record.get("class")), None)
    device = str(record.get("device") or "cpu")
    numels = [int(n) for n in record.get("numels") or []]
    if cls is None or not numels or (device == "cuda" and not torch.cuda.is_available()):
        return None
    kept: list[int] = []
    total = 0
    for n in numels:
        if total + n > MAX_ELEMENTS and kept:
            break
        kept.append(min(n, MAX_ELEMENTS))
        total += kept[-1]
    as_built = {k: record[k] for k in ("foreach", "fused") if record.get(k) is not None}
    try:
        first = _optimizer(cls, kept, device, as_built)
        second = _optimizer(cls, kept, device, {**as_built, flag: True})
        times: tuple[list[float], list[float]] = ([], [])
        for i in range(ROUNDS + 2):
            for side, opt in enumerate((first, second)):
                t0 = time.perf_counter()
                opt.step()
                if device == "cuda":
                    torch.cuda.synchronize()
                if i >= 2:  # two warm-up updates each
                    times[side].append(time.perf_counter() - t0)
    except (RuntimeError, TypeError, ValueError):
        return None
    return min(max(1 - min(times[1]) / min(times[0]), 0.0), 1.0)


def _optimizer(cls: type, numels: list[int], device: str, flags: dict[str, Any]) -> Any:
    import torch

    params = []
    for n in numels:
        p = torch.zeros(n, device=device, requires_grad=True)
        p.grad = torch.full_like(p, 1e-3)
        params.append(p)
    return cls(params, lr=1e-6, **flags)


def optimizer_bound(
    finding_bound: float | None, evidence: Mapping[str, Any], record: Mapping[str, Any], flag: str
) -> tuple[float | None, str]:
    """The bound of ``flag=True`` on the job's optimizer, and how it was set (module note)."""
    f = float(evidence.get("optimizer_fraction") or 0.0)
    saving = update_saving(record, flag)
    if saving is None or f <= 0 or finding_bound is None:
        return finding_bound, "the whole optimizer update removed (its finding's bound)"
    basis = (
        f"the optimizer's {f:.0%} of the step x the {saving:.0%} of its update that "
        f"{flag}=True saved on the job's parameter sizes, measured here"
    )
    return _capped(amdahl(f * saving), finding_bound), basis
