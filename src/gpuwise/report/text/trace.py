"""Terminal sections for an analyzed trace: kernel classes, overlap, idle split, kernels, ranks.

Shown by ``text.run.render_run`` when the Run's trace (``records.trace_section``) carries
device facts (``records.trace.TraceFacts``); Runs without a trace render as before.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuwise.records.trace import (
    Communication,
    LaunchStats,
    RankFacts,
    StepFacts,
    TopKernel,
    TraceFacts,
)
from gpuwise.records.trace_section import TraceSection
from gpuwise.report.ranks.text import MANY_RANKS, alignment_lines, rank_figure_lines
from gpuwise.report.text.inference import batching_line, weights_line
from gpuwise.report.units import format_fraction, format_seconds

KERNEL_NAME_CHARS = 60
DEVICE_PACE = 1.1
"""The device sets the pace when each step's work takes it 10 % longer than the host's step."""
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "cpu": "the CPU"}


def render_trace(t: TraceSection, console: Console) -> None:
    """Render the device facts of a trace section (nothing when it has none)."""
    f = t.facts
    if f is None:
        return
    console.print()
    if not f.device_events:
        cpu = not f.launch_calls and not f.profiler_ranges
        said = (
            "the CPU: no device work was launched (a CPU job)"
            if cpu
            else ("no device activity recorded")
        )
        console.print(Text(f"device      {said}", style="bold"))
        _line(console, "job", _job_line(f))
        _unplaced(f, console)
        return
    for label, text in trace_lines(t, f):
        _line(console, label, text)
    _unplaced(f, console)
    _top_kernels(f.top_kernels, console)
    if len(t.ranks or ()) > MANY_RANKS:
        _many_ranks(t.ranks or (), console)
    elif len(t.ranks or ()) > 1:
        _ranks(t.ranks or (), console)
    gone = missing_line(t.distributed or {})
    if gone:
        _line(console, "missing", gone)
    for c in (t.distributed or {}).get("cut_files") or []:
        _line(console, "cut", cut_line(c, t))
    if t.alignment is not None:
        for label, text in alignment_lines(t.alignment):
            _line(console, label, text)


def missing_line(dist: Mapping[str, Any]) -> str | None:
    """The ranks of the job no file was given for, or None when every rank is here."""
    gone = dist.get("missing_ranks") or []
    if not gone:
        return None
    world, read = int(dist["world_size"]), int(dist.get("ranks_read") or 0)
    count = world - read
    shown = ", ".join(str(r) for r in gone[:16]) + (" …" if count > 16 else "")
    return (
        f"{count} of the job's {world} ranks {'have' if count > 1 else 'has'} no trace here "
        f"(rank{'s' * (count > 1)} "
        f"{shown}): who waited for {'them' if count > 1 else 'it'} is unknown; pass every "
        "rank's file"
    )


def cut_line(cut: Mapping[str, Any], t: TraceSection) -> str:
    """A rank file that ends before its JSON document: what was kept of it."""
    full = t.profiler_steps if not t.truncated else None
    of = f" of rank {t.job.get('rank')}'s {full}" if full else ""
    return (
        f"rank {cut['rank']}'s file {cut['file']} ends mid-document (cut short): read up to "
        f"the cut, {cut['steps'] or 0} profiler steps{of}; later collectives missing"
    )


def trace_lines(t: TraceSection, f: TraceFacts) -> list[tuple[str, str]]:
    """The trace facts as ``(label, sentence)`` rows (shared with the HTML report)."""
    rows = [("job", _job_line(f)), ("device", _device_line(t, f))]
    outside = _outside_line(t, f)
    if outside:
        rows.append(("outside", outside))
    rows.append(("kernels", _classes_line(f)))
    for label, line in (("batching", batching_line(f.job)), ("weights", weights_line(f.job))):
        if line:
            rows.append((label, line))
    if f.communication.total_s:
        rows.append(("comm", _comm_line(f.communication, t.job)))
    if f.steps:
        rows.append(("per step", _steps_line(f.steps)))
    rows.append(("idle split", _idle_line(f)))
    rows.append(("launches", _launch_line(f.launch)))
    return rows


def _line(console: Console, label: str, text: str) -> None:
    console.print(Text(f"{label:<12}{text}"), soft_wrap=True)


def _device_line(t: TraceSection, f: TraceFacts) -> str:
    tp = f.temporal()
    return (
        f"busy {format_fraction(t.busy_fraction)} of the {t.window_source} window "
        f"({format_seconds(t.window_s)}); over {_span_label(t)} "
        f"{format_seconds(f.device_span_s)}: idle {format_fraction(tp['idle'])}, "
        f"compute {format_fraction(tp['compute'])}, other work "
        f"{format_fraction(tp['non_compute'])}"
    )


def _span_label(t: TraceSection) -> str:
    """What the device span printed covers: all work, or the steady steps' work."""
    if t.window_source == "steady_state":
        return "the steady state's device span"
    if t.window_source == "profiler_steps" and t.profiler_steps >= 2:
        n = t.profiler_steps
        cut = (t.facts.timeline if t.facts is not None else {}).get("last_step_cut")
        why = "the last left out, as HTA does" if cut is False else "the last is cut"
        return f"the device span of steps 1-{n - 1} of {n} ({why})"
    return "the device span"


def _passes(passes: int, updates: int) -> str:
    """``N backward passes and M optimizer steps``: each counted once, not per op span."""
    return (
        f"{passes:,} backward pass{'es' * (passes != 1)} and "
        f"{updates:,} optimizer step{'s' * (updates != 1)}"
    )


def _job_line(f: TraceFacts) -> str:
    """The job kind and what it rests on (``TraceFacts.job``)."""
    job = f.job
    if not job:
        return "not read (a document written before job kinds)"
    ev = job.get("evidence") or {}
    kind = str(job.get("kind"))
    if kind == "training" and not (ev.get("backward_spans") or ev.get("optimizer_spans")):
        why = (
            f"backward kernels {format_seconds(float(ev.get('backward_kernel_s') or 0.0))}; "
            "the trace records no host ops to confirm it"
        )
    elif kind == "training" and "backward_passes" in ev:
        why = _passes(int(ev["backward_passes"]), int(ev.get("optimizer_steps") or 0))
    elif kind == "training":
        why = (
            f"{ev.get('backward_spans', 0)} backward and {ev.get('optimizer_spans', 0)} "
            "optimizer spans"
        )
    elif kind == "evaluation":
        why = f"{ev.get('evaluation_spans', 0)} evaluation spans, no backward"
    elif kind == "unknown":
        why = "device events only: no host op tells a forward pass from training"
    elif job.get("engine"):
        why = f"engine {job['engine']}, no backward or optimizer"
    else:
        why = "forward only: no backward or optimizer events"
    phases = ""
    pre, dec = float(job.get("prefill_s") or 0.0), float(job.get("decode_s") or 0.0)
    if pre or dec:
        # Only what the names show: a phase whose kernels are not named (a Triton prefill
        # attention kernel) is not "0 s".
        named = [f"{k} {format_seconds(v)}" for k, v in (("prefill", pre), ("decode", dec)) if v]
        phases = "; kernels that name a phase: " + ", ".join(named)
    vendor = f" on {VENDOR_NAMES.get(f.vendor, f.vendor)}" if f.vendor else ""
    return f"{kind}{vendor} ({why}){phases}"


def _outside_line(t: TraceSection, f: TraceFacts) -> str:
    """What lies outside the window of an excerpt: never counted as the job's idle."""
    ex = f.excerpt
    if t.window_source != "device_span" or not ex:
        return ""
    pro, epi = float(ex.get("prologue_s") or 0.0), float(ex.get("epilogue_s") or 0.0)
    wait = float(ex.get("outside_wait_s") or 0.0)
    if pro <= 0 and epi <= 0 and wait <= 0:
        return ""
    text = (
        f"not counted as idle: host prologue {format_seconds(pro)} before the first device "
        f"event, epilogue {format_seconds(epi)} after the last (the trace is an excerpt)"
    )
    if wait > 0:
        text += (
            f"; a blocking call had waited {format_seconds(wait)} for work queued before the "
            "trace began"
        )
    loads = float(ex.get("first_launches_s") or 0.0)
    if loads > 0:
        text += (
            f"; start-up {format_seconds(float(ex.get('startup_s') or 0.0))}: "
            f"{ex.get('first_launches')} first launches loading code held the host "
            f"{format_seconds(loads)}"
        )
    return text


def _classes_line(f: TraceFacts) -> str:
    classes = f.kernel_classes_s
    total = sum(classes.values()) or 1.0
    parts = [f"{k} {format_fraction(v / total)}" for k, v in classes.items() if v > 0]
    counted = ""
    if f.steady_events != f.device_events:
        edge = float((f.excerpt or {}).get("outside_wait_s") or 0.0) > 0
        steady = (f.timeline or {}).get("step_unit") not in (None, "profiler_step")
        loads = float((f.excerpt or {}).get("first_launches_s") or 0.0) > 0
        where = (
            "after the first launches"
            if loads
            else "after the outside wait"
            if edge
            else "in the steady state"
            if steady and (f.timeline or {}).get("steady_s")
            else "before the last step"
        )
        counted = f" ({f.steady_events} {where})"
    return f"{f.device_events} device events{counted}: " + ", ".join(parts)


def _comm_line(comm: Communication, dist: Mapping[str, Any]) -> str:
    who = ""
    if dist.get("world_size"):
        who = f" ({dist.get('backend') or '?'}, world size {dist['world_size']})"
    kinds = sorted(comm.exposed_by_collective_s.items(), key=lambda kv: -kv[1])
    groups = (
        "; exposed by kind "
        + ", ".join(f"{k.replace('_', '-')} {format_seconds(v)}" for k, v in kinds if v > 0)
        if any(v > 0 for _, v in kinds)
        else ""
    )
    named = {k: v for k, v in comm.by_parallelism_s.items() if k != "unknown"}
    if named:  # process groups the trace names; an unnamed group tells nothing
        groups += "; by group " + ", ".join(
            f"{k.replace('_', ' ')} {format_seconds(v)}" for k, v in named.items()
        )
    return (
        f"{format_seconds(comm.total_s)} of communication{who}: "
        f"{format_fraction(comm.overlap_fraction)} overlapped with compute, "
        f"{format_seconds(comm.exposed_s)} exposed{groups}"
    )


def _steps_line(steps: Sequence[StepFacts]) -> str:
    typical = [s for s in steps if not s.atypical] or list(steps)

    def med(key: str) -> str:
        return format_seconds(statistics.median(float(getattr(s, key)) for s in typical))

    odd = [str(s.index) for s in steps if s.atypical]
    odd_text = f"; atypical (left out): step {', '.join(odd)}" if odd else ""
    device = [float(s.device_s) for s in typical if s.device_s is not None]
    host = statistics.median(float(s.duration_s) for s in typical)
    if device and statistics.median(device) > DEVICE_PACE * host:
        odd_text += (
            f"; the device takes {format_seconds(statistics.median(device))} for each step's "
            f"work, the host {format_seconds(host)}: the device sets the pace and its queue "
            "grows"
        )
    return (
        f"median of {len(typical)}: {med('duration_s')} = compute {med('compute_s')} + exposed "
        f"comm {med('communication_s')} + memory {med('memory_s')} + idle {med('idle_s')}"
        f"{odd_text}"
    )


def _idle_line(f: TraceFacts) -> str:
    main = f.compute_stream()
    split = {} if main is None else main.split()
    if main is None or split["host_wait"] is None:
        return "no gaps on the compute stream"
    return (
        f"stream {main.stream}: host wait "
        f"{format_fraction(split['host_wait'])}, kernel wait "
        f"{format_fraction(split['kernel_wait'])}, other streams "
        f"{format_fraction(split['cross_stream_wait'])}, other "
        f"{format_fraction(split['other'])}"
    )


def _launch_line(launch: LaunchStats) -> str:
    per = launch.per_step
    per_text = f"{per:.0f} per step, " if per else ""
    depth = launch.median_queue_depth
    return (
        f"{launch.kernels} linked to a host launch, {per_text}median kernel "
        f"{format_seconds(launch.median_kernel_s)}, "
        f"{format_fraction(launch.short_kernel_fraction)} under 10 µs, launch-to-start "
        f"{format_seconds(launch.median_launch_delay_s)}, queue depth "
        f"{'n/a' if depth is None else f'{depth:.0f}'}"
    )


def _unplaced(f: TraceFacts, console: Console) -> None:
    unplaced = f.unplaced_categories
    skipped = f.nonfinite_events
    if unplaced:
        names = ", ".join(f"{k} ({n})" for k, n in unplaced.items())
        _line(console, "unplaced", f"event categories this reader does not know: {names}")
    if skipped:
        _line(console, "skipped", f"{skipped} events with non-finite or negative ts/dur")


KERNEL_COLUMNS = ("kernel", "class", "time", "count", "share")
RANK_COLUMNS = ("rank", "busy", "comm share", "overlapped", "median step", "file")


def kernel_cells(k: TopKernel) -> list[str]:
    """One top kernel's row, in ``KERNEL_COLUMNS`` order (text and HTML reports)."""
    cells = [k.name, k.kernel_class, format_seconds(k.total_s), str(k.count)]
    return [str(c) for c in cells] + [format_fraction(k.share)]


def rank_cells(r: RankFacts) -> list[str]:
    """One rank's row, in ``RANK_COLUMNS`` order (text and HTML reports)."""
    return [
        str(r.rank),
        format_fraction(r.busy_fraction),
        format_fraction(r.communication_fraction),
        format_fraction(r.comm_overlap_fraction),
        format_seconds(r.step_median_s),
        str(r.file),
    ]


def _top_kernels(top: Sequence[TopKernel], console: Console) -> None:
    if not top:
        return
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for name in KERNEL_COLUMNS:
        table.add_column(name, justify="left" if name in ("kernel", "class") else "right")
    for k in top[:5]:
        name, *rest = kernel_cells(k)
        if len(name) > KERNEL_NAME_CHARS:
            name = name[: KERNEL_NAME_CHARS - 1] + "…"
        table.add_row(name, *rest)
    console.print(Padding(table, (0, 0, 0, 12), expand=False))


def many_rank_lines(ranks: Sequence[RankFacts]) -> list[str]:
    """Past ``MANY_RANKS`` rank traces: each column's distribution, ends and outliers."""
    rows = [dataclasses.asdict(r) for r in ranks]
    lines = rank_figure_lines(rows, "busy_fraction", "busy", format_fraction)
    lines += rank_figure_lines(rows, "communication_fraction", "comm share", format_fraction)
    lines += rank_figure_lines(rows, "step_median_s", "median step", format_seconds)
    return lines


def _many_ranks(ranks: Sequence[RankFacts], console: Console) -> None:
    for line in many_rank_lines(ranks):
        _line(console, "ranks", line)


def _ranks(ranks: Sequence[RankFacts], console: Console) -> None:
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for name in RANK_COLUMNS:
        table.add_column(name, justify="left" if name == "file" else "right")
    for r in ranks:
        table.add_row(*rank_cells(r))
    console.print(Padding(table, (0, 0, 0, 12), expand=False))
