"""The job anatomy at the top of the text and HTML reports: a few lines on what the job is.

Phases with their durations (start-up's one-time costs named), what one step is, the
processes, the data kind and what is already applied (``records.anatomy.JobAnatomy``).
A fact the Run does not show is left out, never printed as a guess.

Example:
    >>> anatomy_rows(Run("analyze"))
    []
"""

from __future__ import annotations

from html import escape
from typing import Any

from rich.console import Console
from rich.text import Text

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy, Phase
from gpuwise.report.units import format_seconds

PHASE_WORDS = {
    "startup": "start-up",
    "warmup": "warm-up",
    "steady": "steady",
    "evaluation": "evaluation",
    "teardown": "teardown",
}
UNIT_WORDS = {
    "optimizer_step": "an optimizer step",
    "backward": "one backward() (weights updated by hand)",
    "profiler_step": "a profiler step",
    "iteration": "a loader iteration",
    "recurrence": "one recurrence of the step's kernels",
    "forward": "one forward pass",
}


def anatomy_rows(run: Run) -> list[tuple[str, str]]:
    """``(label, text)`` rows of the Run's anatomy ([] when it has none to show)."""
    a = run.anatomy
    if a is None:
        return []
    rows = []
    if a.phases:
        rows.append(("phases", " · ".join(_phases(a.phases))))
    step = _step(a)
    if step:
        rows.append(("step", step))
    procs = _processes(a)
    if procs:
        rows.append(("processes", procs))
    if a.data_kind != "unknown":
        rows.append(("data", a.data_kind))
    applied = _applied(a.applied)
    if applied:
        rows.append(("applied", applied))
    if a.too_small:
        rows.append(("too small", a.too_small))
    return rows


MAX_SPANS = 3
"""Evaluation passes shown one by one; more are summed into one entry per kind."""


def _phases(phases: list[Phase]) -> list[str]:
    """Each phase, or with many evaluation passes, the steady and evaluation spans summed."""
    if sum(p.name == "evaluation" for p in phases) <= MAX_SPANS:
        return [_phase(p) for p in phases]
    out: list[str] = []
    for name in ("startup", "warmup", "steady", "evaluation", "teardown"):
        group = [p for p in phases if p.name == name]
        if len(group) == 1:
            out.append(_phase(group[0]))
        elif group:
            seconds = sum(p.duration_s or 0.0 for p in group)
            steps = sum(p.steps for p in group)
            kind = "passes" if name == "evaluation" else "spans"
            out.append(
                f"{PHASE_WORDS[name]} {format_seconds(seconds)}, {steps} steps "
                f"in {len(group)} {kind}"
            )
    return out


def _phase(p: Phase) -> str:
    words = f"{PHASE_WORDS.get(p.name, p.name)} {format_seconds(p.duration_s)}"
    if p.steps:
        words += f", {p.steps} step{'s' if p.steps != 1 else ''}"
    return f"{words} ({p.note})" if p.note else words


def _step(a: JobAnatomy) -> str:
    if a.step_unit not in UNIT_WORDS or (a.step_s is None and not a.phases):
        return ""
    text = f"{a.job_kind}; one step is {UNIT_WORDS[a.step_unit]}"
    opt = a.applied.get("optimizer")
    if a.step_unit == "optimizer_step" and opt:
        text = f"{a.job_kind}; one step is one {opt}.step"
        updates = a.evidence.get("updates_per_step")
        if isinstance(updates, (int, float)) and updates > 1:
            names = a.evidence.get("optimizer_classes") or [opt]
            text = f"{a.job_kind}; one step is {updates:g} updates ({' + '.join(map(str, names))})"
    if a.step_s is not None:
        text += f", median {format_seconds(a.step_s)} in the steady state"
    if a.evaluations_per_step and a.evaluations_per_step > 1:
        n = f"{a.evaluations_per_step:g}"
        closure = "closure" in str(a.evidence.get("evaluations_per_step", ""))
        text += f"; {n} {'closure evaluations' if closure else 'backward passes'} each"
    return text


def _processes(a: JobAnatomy) -> str:
    if not a.processes:
        return ""
    roles: dict[str, int] = {}
    for p in a.processes:
        roles[p.role] = roles.get(p.role, 0) + 1
    text = ", ".join(
        f"{n} {role.replace('_', ' ')}{'s' if n != 1 else ''}" for role, n in roles.items()
    )
    if a.cores is not None:
        text += f" on {a.cores} cores"
    return text


def _applied(applied: dict[str, Any]) -> str:
    parts = []
    opt, impl = applied.get("optimizer"), applied.get("optimizer_impl")
    if opt or impl:
        parts.append(" ".join(str(x) for x in (opt, impl) if x))
    for key, word in (("compile", "torch.compile"), ("cuda_graphs", "graphs")):
        if key in applied and applied[key] is not None:
            parts.append(f"{word} {'yes' if applied[key] else 'no'}")
    amp = applied.get("amp_dtype")
    if amp:
        parts.append(f"autocast {amp}")
    if applied.get("tf32") is not None:
        parts.append(f"TF32 {'yes' if applied['tf32'] else 'no'}")
    for key, word in (("pinned_memory", "pinned memory"), ("loader_workers", "loader workers")):
        if applied.get(key) is not None:
            parts.append(f"{word} {applied[key]}")
    return " · ".join(parts)


def render_anatomy(run: Run, console: Console) -> None:
    """Print the anatomy's rows under a ``Job anatomy`` heading (nothing without rows)."""
    rows = anatomy_rows(run)
    if not rows:
        return
    console.print(Text("Job anatomy", style="bold"))
    for label, text in rows:
        console.print(Text(f"  {label:<11}{text}"), soft_wrap=True)


def anatomy_section(run: Run) -> str:
    """The anatomy as an HTML section (empty without rows); every string is escaped."""
    rows = anatomy_rows(run)
    if not rows:
        return ""
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    return f'<section id="anatomy"><h2>Job anatomy</h2><dl>{items}</dl></section>'
