"""Rules over a Run's measurements that name what limits the job (DESIGN.md, "Diagnose").

Each rule reads one signal (a phase fraction from the steps in ``phase_rules``, the device
utilization summary in ``device_rules``, or a typed section such as ``run.trace``) and
returns a Finding or nothing. ``diagnose`` runs them all (``RULES``) and orders the result:
most severe first, then by ``max_speedup``; when nothing reaches a warning the first finding
is ``healthy``.

Example:
    >>> from gpuwise.records import Run, Step
    >>> run = Run("api", steps=[Step(0, 0.0, 0.6, 0.0, 0.4, 0.0)])
    >>> [(f.kind, round(f.max_speedup, 2)) for f in diagnose(run)][:1]
    [('input_bound', 2.5)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuwise.diagnose import job_rules as jr
from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.diagnose.anatomy.trace_findings import ANATOMY_RULES
from gpuwise.diagnose.anatomy.trace_fit import fit_to_trace_anatomy
from gpuwise.diagnose.context import Context
from gpuwise.diagnose.device_rules import idle_reserved, memory_headroom, thermal_throttle
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes.terms import in_user_terms
from gpuwise.diagnose.inference.batching import idle_between_batches
from gpuwise.diagnose.inference.quantized import dense_decode_gemms
from gpuwise.diagnose.phase_rules import (
    gpu_idle_between_phases,
    host_sync,
    host_to_device,
    input_bound,
    postprocess,
)
from gpuwise.diagnose.step_rules import backward_heavy, optimizer_bound, small_batch
from gpuwise.diagnose.trace import capture as tc
from gpuwise.diagnose.trace import host as th
from gpuwise.diagnose.trace import rules as tr
from gpuwise.records import Finding, Fix, Run

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

Rule = Callable[[Context], "Finding | None"]


def diagnose(run: Run) -> list[Finding]:
    """Name what limits a run, with evidence, the speedup on offer and the fixes.

    Args:
        run: A Run with steps, samples/utilization and ``extra`` sections, as built by
            ``gpuwise profile``, the explicit API or ``analyze``. Only its ``anatomy`` is
            filled in, when missing: the rules read what the job is before judging it.

    Returns:
        Findings, most severe first and then by ``max_speedup``; the first is the main
        bottleneck, or ``healthy`` when nothing reaches a warning (``no_measurements``
        when a profiled Run has no steps, or any Run holds no steps, samples or trace).

    Example:
        >>> diagnose(Run("analyze"))[0].kind
        'no_measurements'
    """
    if run.anatomy is None:
        run.anatomy = read_anatomy(run)
    if not (run.steps or run.utilization or run.trace is not None):
        return [_nothing_measured(0, run.meta)]
    ctx = Context.of(run)
    found = [f for rule in RULES if (f := rule(ctx)) is not None]
    found.extend(th.host_blocking(ctx))
    capture = tc.graph_capture(ctx)
    if capture is not None:  # nothing ran yet: the feed findings would misread the trace
        found = [capture, *(f for f in found if f.kind not in tc.CAPTURE_MISREADS)]
    kinds = {f.kind for f in found}
    found.extend(f for f in _distributed(run) if f.kind not in kinds)
    if run.trace is not None and run.trace.alignment is not None:
        from gpuwise.diagnose.ranks.waiting import split_waiting

        found = split_waiting(found, run)  # waiting for a late rank is the straggler's
    found = tr.fit_to_job(found, ctx)
    found = jr.fit_to_anatomy(fit_to_trace_anatomy(found, ctx), ctx)  # nothing for what is applied
    found = _notes_without_fixes(found)
    found.sort(key=_payoff_key)
    cpu_job = any(f.kind == "cpu_job" for f in found)  # the CPU is the device: it leads
    if not cpu_job and not any(f.severity in ("critical", "warning") for f in found):
        stepless = not run.steps and run.source == "profile"
        nothing = _nothing_measured(len(run.samples), run.meta) if stepless else None
        found.insert(0, nothing or _healthy(ctx))
    return in_user_terms(found, run.extra.get("setup"))  # the user's optimizer and framework


NOTE_SPEEDUP = 1.01
"""An info finding whose bound is under 1 % of the time is a note of no size: no fixes."""


def _notes_without_fixes(found: list[Finding]) -> list[Finding]:
    """Drop the remedies of info findings too small to pay for one (a 0.5 ms sync)."""
    return [
        dataclasses.replace(f, fixes=())
        if f.severity == "info"
        and f.fixes
        and f.max_speedup is not None
        and f.max_speedup < NOTE_SPEEDUP
        else f
        for f in found
    ]


FAILURE_KINDS = frozenset({"rank_failed"})
"""Findings that explain why the job stopped come before any about its speed."""


def _payoff_key(f: Finding) -> tuple[bool, int, float]:
    return f.kind not in FAILURE_KINDS, SEVERITY_ORDER.get(f.severity, 3), -(f.max_speedup or 1.0)


def _distributed(run: Run) -> list[Finding]:
    alignment = run.trace.alignment if run.trace is not None else None
    out: list[Finding] = []
    if alignment is not None:  # matched collectives name the rank the others waited for
        from gpuwise.diagnose.ranks.straggler.finding import aligned_straggler

        found = aligned_straggler(alignment)
        out += [found] if found is not None else []
    if run.ranks is None:
        return out
    from gpuwise.diagnose.ranks.rules import findings

    aligned = alignment is not None
    return out + [f for f in findings(run) if not (aligned and f.kind == "straggler")]


def _nothing_measured(samples: int, meta: dict[str, Any]) -> Finding:
    failed = [n for n in meta.get("interpreters") or () if n.get("gpuwise") != "borrowed"]
    if failed:
        return _hooks_not_armed(samples, failed[0])
    summary = "No training or inference steps were seen, so no stage can be judged"
    fixes = (
        Fix(
            "Mark the loop's steps when it uses neither a DataLoader nor an optimizer",
            "for batch in gpuwise.watch(batches): ...",
        ),
        Fix("Sample the device while the job runs", "gpuwise profile --interval 0.1 -- CMD"),
    )
    evidence = {"steps": 0, "samples": samples}
    return Finding("no_measurements", "warning", summary, evidence, None, fixes)


def _hooks_not_armed(samples: int, note: dict[str, Any]) -> Finding:
    where = note.get("executable") or "the command's Python"
    summary = (
        f"No steps were recorded: {where} (Python {note.get('python')}) could not arm "
        f"gpuwise's step hooks ({note.get('error')})"
    )
    fixes = (
        Fix(
            "Run the script with a Python that has torch and Python >= 3.10",
            "gpuwise profile -- /path/to/venv/bin/python train.py",
        ),
        Fix("Or install gpuwise beside the script's torch", f"{where} -m pip install gpuwise"),
    )
    evidence = {"steps": 0, "samples": samples, "interpreter_error": note.get("error")}
    return Finding("no_measurements", "warning", summary, evidence, None, fixes)


def _healthy(ctx: Context) -> Finding:
    fractions = ctx.stats.get("fractions") or {}
    evidence: dict[str, Any] = {f"{p}_fraction": round(v, 4) for p, v in fractions.items()}
    evidence.update(ctx.trace_evidence("gpu_busy_fraction"))
    fixes = [ctx.bigger_batch_fix()] if ctx.headroom()[0] else []
    precision = fx.mixed_precision(ctx.compute_capability(), ctx.cpu_bf16())
    p = tr.premises(ctx)
    if p is not None and not p.fp32_gemm:
        precision = None  # the trace's GEMM/conv kernels already run in low precision
    if jr.compute_immaterial(ctx):
        precision = None  # the step is not in its matmuls: bf16 has nothing to speed up
    fixes = [f for f in (precision, *fixes) if f is not None]
    summary = "No stage dominates: the device is kept fed; speed now comes from the model"
    if ctx.anatomy.too_small:
        summary = f"Too small to judge per-step costs ({ctx.anatomy.too_small}); nothing to fix"
        fixes = []  # nothing to fix means no fix follows
    return Finding("healthy", "info", summary, evidence, None, tuple(fixes))


RULES: tuple[Rule, ...] = (
    *tr.TRACE_RULES,
    *ANATOMY_RULES,
    idle_between_batches,
    dense_decode_gemms,
    input_bound,
    host_to_device,
    postprocess,
    host_sync,
    gpu_idle_between_phases,
    small_batch,
    optimizer_bound,
    backward_heavy,
    idle_reserved,
    thermal_throttle,
    memory_headroom,
    jr.oversubscribed,
    jr.too_many_workers,
)
