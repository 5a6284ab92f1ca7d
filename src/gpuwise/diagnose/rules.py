"""Rules over a Run's measurements that name what limits the job (DESIGN.md, "Diagnose").

Each rule reads one signal (a phase fraction from the steps, the device utilization
summary, or a typed section such as ``run.trace``) and returns a Finding or
nothing. ``diagnose`` runs them all and orders the result: most severe first, then by
``max_speedup``; when nothing reaches a warning the first finding is ``healthy``.

Example:
    >>> from gpuwise.records import Run, Step
    >>> run = Run("api", steps=[Step(0, 0.0, 0.6, 0.0, 0.4, 0.0)])
    >>> [(f.kind, round(f.max_speedup, 2)) for f in diagnose(run)][:1]
    [('input_bound', 2.5)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuwise.diagnose import fixes as fx
from gpuwise.diagnose import job_rules as jr
from gpuwise.diagnose import trace_capture as tc
from gpuwise.diagnose import trace_host as th
from gpuwise.diagnose import trace_rules as tr
from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.diagnose.anatomy.trace_findings import ANATOMY_RULES
from gpuwise.diagnose.anatomy.trace_fit import fit_to_trace_anatomy
from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fix_terms import in_user_terms
from gpuwise.diagnose.inference_batching import idle_between_batches
from gpuwise.diagnose.quantized import dense_decode_gemms
from gpuwise.diagnose.step_rules import backward_heavy, optimizer_bound, small_batch
from gpuwise.records import Finding, Fix, Run

GPU_IDLE_WARN_FRACTION = 0.30
"""Eager PyTorch leaves a well-fed GPU idle 10-30 % of a step between kernel launches;
only above 30 % are the gaps the main thing to fix (below, they are a note)."""

PAGEABLE_SHARE = 0.5
"""Copies count as pageable when at least half of the host-to-device bytes were."""

PAGEABLE_NOTE_FRACTION = 0.01
"""Pageable copies taking 1 % of the step are still worth a note: the fix is one flag."""

IDLE_RESERVED_FRACTION = 0.5
"""A GPU under 5 % busy in half its samples while holding memory is held, not used."""

IDLE_RESERVED_CRITICAL = 0.75

STEP_COVERAGE = 0.5
"""Steps covering under half the recorded time leave the rest unexplained by phases."""

THROTTLED_FRACTION = 0.05
"""Thermal throttling in over 5 % of the samples is more than a passing spike."""

SYNC_EVENTS_NOTE = 10
"""Ten or more explicit synchronisations in a trace are worth naming, even when short."""

HEADROOM_FACTOR = 2
"""Suggest a bigger batch only when at least twice the measured peak memory fits."""

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
    found = tr.fit_to_job(found, ctx)
    found = jr.fit_to_anatomy(fit_to_trace_anatomy(found, ctx), ctx)  # nothing for what is applied
    found.sort(key=_payoff_key)
    cpu_job = any(f.kind == "cpu_job" for f in found)  # the CPU is the device: it leads
    if not cpu_job and not any(f.severity in ("critical", "warning") for f in found):
        stepless = not run.steps and run.source == "profile"
        nothing = _nothing_measured(len(run.samples), run.meta) if stepless else None
        found.insert(0, nothing or _healthy(ctx))
    return in_user_terms(found, run.extra.get("setup"))  # the user's optimizer and framework


FAILURE_KINDS = frozenset({"rank_failed"})
"""Findings that explain why the job stopped come before any about its speed."""


def _payoff_key(f: Finding) -> tuple[bool, int, float]:
    return f.kind not in FAILURE_KINDS, SEVERITY_ORDER.get(f.severity, 3), -(f.max_speedup or 1.0)


def _distributed(run: Run) -> list[Finding]:
    alignment = run.trace.alignment if run.trace is not None else None
    out: list[Finding] = []
    if alignment is not None:  # matched collectives name the rank the others waited for
        from gpuwise.diagnose.straggler_trace import aligned_straggler

        found = aligned_straggler(alignment)
        out += [found] if found is not None else []
    if run.ranks is None:
        return out
    from gpuwise.diagnose.distributed import findings

    aligned = alignment is not None
    return out + [f for f in findings(run) if not (aligned and f.kind == "straggler")]


def _stage(
    kind: str, fraction: float, summary: str, evidence: dict[str, Any], fixes: tuple[Fix, ...]
) -> Finding | None:
    speedup = fx.amdahl(fraction)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    return Finding(kind, severity, summary, evidence, round(speedup, 3), fixes)


def input_bound(ctx: Context) -> Finding | None:
    """The step waits for the next batch (DataLoader ``__next__``)."""
    f = ctx.fraction("data_wait")
    if f is None:
        return None
    evidence = {"data_wait_fraction": round(f, 4), **ctx.step_evidence("data_wait")}
    evidence.update(ctx.trace_evidence("dataloader_fraction", "gpu_busy_fraction"))
    workers = fx.loader_workers(ctx.cores, ctx.local_ranks, pin=ctx.has_gpu)
    fixes: tuple[Fix, ...]
    if ctx.has_gpu:
        fixes = _fitting(
            ctx, (workers, fx.gpuwise_store(), fx.uint8_across(), fx.device_prefetch())
        )
    else:
        fixes = (workers, fx.gpuwise_store(), fx.batched_transforms())
    summary = f"Waiting for input data takes {f:.1%} of each step; compute waits meanwhile"
    return _stage("input_bound", f, summary, evidence, fixes)


def host_to_device(ctx: Context) -> Finding | None:
    """Host-to-device copies on the critical path, pageable ones first."""
    f, basis = ctx.h2d_fraction()
    if f is None:
        return None
    pageable = ctx.pageable_share()
    evidence = {basis: round(f, 4), **ctx.copy_evidence()}
    if pageable is not None and pageable >= PAGEABLE_SHARE:
        summary = f"Copies from pageable host memory take {f:.1%} of {_basis_words(basis)}"
        fixes: tuple[Fix, ...] = (fx.pinned_async_copy(), fx.device_prefetch(), fx.uint8_across())
        fixes = _fitting(ctx, fixes, pageable=True)
        found = _stage("pageable_h2d", f, summary, evidence, fixes)
        if found is None and f >= PAGEABLE_NOTE_FRACTION:
            found = Finding(
                "pageable_h2d", "info", summary, evidence, round(fx.amdahl(f), 3), fixes
            )
        return found
    summary = f"Host-to-device copies take {f:.1%} of {_basis_words(basis)}"
    fitting = _fitting(ctx, (fx.uint8_across(), fx.device_prefetch()))
    return _stage("h2d_bound", f, summary, evidence, fitting or tuple(_look_at_copies()))


def _fitting(ctx: Context, fixes: tuple[Fix, ...], *, pageable: bool = False) -> tuple[Fix, ...]:
    """Drop the fixes whose premise a trace shows false (uint8 for non-images, prefetch)."""
    p = tr.premises(ctx)
    if p is None:
        return fixes
    drop = set()
    if not p.images:
        drop.add(fx.uint8_across().action)
    if not (p.h2d_blocks_compute or pageable):
        drop.add(fx.device_prefetch().action)
    return tuple(f for f in fixes if f.action not in drop)


def _look_at_copies() -> list[Fix]:
    return [
        Fix(
            "See which tensors cross and when: the copies already run off the compute stream",
            "open the trace in Perfetto; look at the Memcpy HtoD rows and their sizes",
        )
    ]


def _basis_words(basis: str) -> str:
    return "the GPU's busy time" if "gpu_busy" in basis else "each step"


def postprocess(ctx: Context) -> Finding | None:
    """Work after the optimizer step before the next batch is requested."""
    f = ctx.fraction("post")
    if f is None:
        return None
    evidence = {"post_fraction": round(f, 4), **ctx.step_evidence("post")}
    summary = f"Postprocessing after each step takes {f:.1%} of the step"
    fixes = (fx.defer_host_reads(), fx.background_post())
    return _stage("postprocess_bound", f, summary, evidence, fixes)


def host_sync(ctx: Context) -> Finding | None:
    """Explicit host-GPU synchronisations seen in a trace (without device facts).

    A trace with device facts has its blocking calls read by ``trace_host``.
    """
    if ctx.trace is None or tr.has_facts(ctx):
        return None
    sync, window_s = ctx.trace.sync, ctx.trace.window_s
    if not sync or not window_s:
        return None
    f = float(sync.get("runtime_s") or 0.0) / float(window_s)
    evidence: dict[str, Any] = {
        "sync_runtime_fraction": round(f, 4),
        "sync_runtime_s": sync.get("runtime_s"),
        "sync_runtime_calls": sync.get("runtime_calls"),
        "cuda_sync_events": sync.get("events"),
        **{f"cuda_sync_{k.lower().replace(' ', '_')}": v for k, v in sync["by_name"].items()},
    }
    summary = f"The host blocked on the GPU {sync.get('events') or 0} times (sync events)"
    fixes = (fx.defer_host_reads(), fx.find_syncs())
    found = _stage("host_sync", f, summary, evidence, fixes)
    if found is None and (sync.get("events") or 0) >= SYNC_EVENTS_NOTE:
        found = Finding("host_sync", "info", summary, evidence, round(fx.amdahl(f), 3), fixes)
    return found


def gpu_idle_between_phases(ctx: Context) -> Finding | None:
    """The GPU idles inside steps for reasons the data phase does not explain."""
    if tr.has_facts(ctx):
        return None  # trace_rules.device_idle reads the trace's own idle split
    idle, evidence = ctx.unexplained_gpu_idle()
    if idle is None:
        return None
    speedup = fx.amdahl(idle)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    if idle < GPU_IDLE_WARN_FRACTION:
        severity = "info"
    summary = f"The GPU sits idle {idle:.1%} of each step between its kernels and copies"
    fixes = (fx.fewer_launches(), fx.defer_host_reads(), ctx.bigger_batch_fix())
    return Finding("gpu_idle_between_phases", severity, summary, evidence, round(speedup, 3), fixes)


def idle_reserved(ctx: Context) -> Finding | None:
    """A GPU held (memory in use) but idle most of the recorded time."""
    worst = ctx.idlest_gpu()
    if worst is None or ctx.step_coverage() >= STEP_COVERAGE:
        return None
    device, s = worst
    idle = s["idle_fraction"]
    if idle < IDLE_RESERVED_FRACTION or not s.get("peak_memory_used_bytes"):
        return None
    severity = "critical" if idle >= IDLE_RESERVED_CRITICAL else "warning"
    evidence = ctx.idle_evidence(device, s)
    zero = evidence["zero_utilization_fraction"]
    zero_text = f", {zero:.1%} of samples at 0 %" if zero is not None else ""
    summary = (
        f"{device} was held for {_duration(s['duration_s'])} with memory in use but idle "
        f"(< 5 % busy) {idle:.1%} of the time{zero_text}; mean "
        f"{s['mean_utilization_pct']:.1f} % busy"
    )
    return Finding("idle_reserved", severity, summary, evidence, None, fx.release_idle_gpu())


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def thermal_throttle(ctx: Context) -> Finding | None:
    """Clocks reduced for temperature in a noticeable share of samples."""
    share, hottest = ctx.thermal_share()
    if share is None or share < THROTTLED_FRACTION:
        return None
    evidence = {"thermal_throttle_fraction": round(share, 4), "max_temperature_c": hottest}
    summary = f"The GPU throttled its clocks for heat in {share:.1%} of the samples"
    return Finding("thermal_throttle", "warning", summary, evidence, None, fx.cooling())


def memory_headroom(ctx: Context) -> Finding | None:
    """A training run using under half its device memory could run bigger batches."""
    factor, peak, total = ctx.headroom()
    if factor is None or peak is None or total is None:
        return None
    if factor < HEADROOM_FACTOR or not ctx.steps:
        return None
    evidence = {
        "peak_memory_used_bytes": peak,
        "memory_total_bytes": total,
        "memory_used_fraction": round(peak / total, 4),
    }
    summary = f"Peak memory is {peak / total:.0%} of the device's; a larger batch fits"
    return Finding("memory_headroom", "info", summary, evidence, None, (ctx.bigger_batch_fix(),))


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
    fixes = [f for f in (precision, *fixes) if f is not None]
    summary = "No stage dominates: the device is kept fed; speed now comes from the model"
    if ctx.anatomy.too_small:
        summary = f"Too small to judge per-step costs ({ctx.anatomy.too_small}); nothing to fix"
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
)
