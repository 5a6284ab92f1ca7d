"""Facts about a Run that every report shows: its command line, wall time, ranks, skips.

Read from the Run's own records (``meta``, the rank view, the trace window), never
recomputed from raw steps where the Run already holds the figure.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from gpuwise.records import Run, Step
from gpuwise.report.units import NA


def command_line(run: Run) -> str:
    """Return the Run's command as one shell-quoted line (``"n/a"`` when it has none)."""
    if not run.command:
        return NA
    return shlex.join(str(part) for part in run.command)


def run_duration_s(run: Run) -> float | None:
    """Return the Run's wall time: ``meta["duration_s"]``, else the longest span seen.

    The spans are those of the samples, of the steps, and of an analyzed trace's window.
    """
    given = run.meta.get("duration_s")
    if isinstance(given, int | float):
        return float(given)
    spans: list[float] = []
    if run.samples:
        times = [s.t_s for s in run.samples]
        spans.append(max(times) - min(times))
    if run.steps:
        spans.append(_steps_span_s(run.steps))
    if run.trace is not None and run.trace.window_s is not None:
        spans.append(run.trace.window_s)
    return max(spans) if spans else None


def _steps_span_s(steps: Sequence[Step]) -> float:
    first = min(s.start_s for s in steps)
    return max(s.start_s + s.total_s for s in steps) - first


def skipped_count(run: Run) -> int:
    """Return how many input records were skipped as unusable (``meta``), 0 when none."""
    count = run.meta.get("skipped_count")
    if isinstance(count, int):
        return count
    listed = run.meta.get("skipped")
    return len(listed) if isinstance(listed, list) else 0


def rank_count(run: Run) -> int:
    """Ranks in the Run's cross-rank view (1 for a one-process run)."""
    return len(run.ranks.ranks) if run.ranks is not None else 1


def phase_share(row: Mapping[str, Any], phase: str) -> float | None:
    """One phase's share of a rank's mean step, from a ``RankView.per_rank`` row."""
    phases, mean_s = row.get("phases_s"), row.get("mean_s")
    if not phases or not mean_s:
        return None
    return float(phases[phase]) / float(mean_s)


def machine_line(run: Run) -> tuple[str, bool] | None:
    """The job's share of the machine (``anatomy.resources.machine``) and whether it was shared.

    ``("SHARED MACHINE: the job got 0.52 of the 2 cores ...", True)``; ``None`` when the
    load was not measured (an analyzed trace, an old Run).
    """
    share = run.anatomy.resources.get("machine") if run.anatomy is not None else None
    if not isinstance(share, dict) or not isinstance(share.get("summary"), str):
        return None
    return share["summary"], bool(share.get("contended"))
