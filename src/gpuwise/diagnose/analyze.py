"""``gpuwise analyze``: the diagnosis of files a user already has.

Each input is read by content (``inputs.read_piece``); the pieces are merged into one Run
(source ``"analyze"``, command = the paths): steps from traces and gpuwise files, samples
from logs, their utilization summary, devices, what was skipped, and the trace section.
Then ``rules.diagnose`` names the bottleneck.

Scaling hook: given two gpuwise Run JSONs (``analyze base.json scaled.json``), the last one
is the Run analysed and ``run.extra["baseline"]`` holds the first one's step statistics
(``file``, ``ranks`` and the ``records.step_stats`` keys), for the distributed rules to
compute scaling efficiency from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

from gpuwise.diagnose.ranks.trace import merge_traces
from gpuwise.diagnose.rules import diagnose
from gpuwise.errors import UsageError
from gpuwise.records import Run, Step, step_stats
from gpuwise.telemetry.readers.inputs import Piece, describe, read_piece
from gpuwise.telemetry.summary import summarize

log = logging.getLogger(__name__)

MAX_SKIPPED_LISTED = 200
"""Skipped records listed one by one in ``meta.skipped``; the count covers the rest."""


def analyze(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    strict: bool = False,
    jobs: int | None = None,
    ray_address: str | None = None,
) -> Run:
    """Read traces and logs, build one Run from them and diagnose it.

    Args:
        paths: Kineto traces, nvidia-smi logs, gpuwise Run JSON or monitor JSON/JSONL
            files, in any mix, or one such path; gzip accepted. Two Run JSONs compare a
            baseline (first) with a scaled run (last).
        strict: Fail on the first corrupt record instead of skipping and counting it.
        jobs: Worker processes reading several files at once (default: the usable
            cores; 1 reads them one after another here). Rank traces of one job are
            reduced in the workers and their collectives matched (``job_ranks``).
        ray_address: Read on this Ray cluster instead (the ``ray`` extra).

    Returns:
        The diagnosed Run; ``run.findings[0]`` is the main bottleneck or ``healthy``.

    Raises:
        UsageError: No paths were given, or one file was given twice (by two names,
            a link or a hard link: the same device and inode).
        LogFormatError: A file is missing, of an unknown format, or (strict) corrupt.

    Example:
        >>> run = analyze(["worker0.pt.trace.json.gz"])  # doctest: +SKIP
        >>> run.findings[0].kind  # doctest: +SKIP
        'input_bound'
    """
    if isinstance(paths, (str, os.PathLike)):  # one path, not a sequence of its letters
        paths = [paths]
    names = [os.fspath(p) for p in paths]
    if not names:
        raise UsageError("no input files; pass a trace or log, e.g. gpuwise analyze trace.json")
    _refuse_repeats(names)
    if len(names) == 1 and ray_address is None:
        run = build_run(names, [read_piece(names[0], strict=strict)])
    else:
        run = _build_many(names, strict=strict, jobs=jobs, ray_address=ray_address)
    if run.serving is not None and not run.steps:  # a serve-bench run: requests, not steps
        from gpuwise.diagnose.inference.serving import diagnose_serving

        run.findings = diagnose_serving(run.serving)
    else:
        run.findings = diagnose(run)
    return run


def _refuse_repeats(names: list[str]) -> None:
    """One file named twice would be read as two processes of a job: refuse it.

    Raises:
        UsageError: Two of ``names`` are one file (the same device and inode).
    """
    seen: dict[tuple[int, int] | str, int] = {}
    for i, name in enumerate(names):
        try:
            st = os.stat(name)
            key: tuple[int, int] | str = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            key = os.path.realpath(name)  # missing: reported as skipped, or an error, later
        first = names[seen.setdefault(key, i)]
        if seen[key] != i:
            how = "is given twice" if first == name else f"is the same file as '{first}'"
            raise UsageError(
                f"the input '{name}' {how}: read twice it would count as two ranks of one "
                "job; give each file once"
            )


def _build_many(
    names: list[str], *, strict: bool, jobs: int | None, ray_address: str | None
) -> Run:
    from gpuwise.diagnose.ranks.job import add_alignment, read_inputs

    inputs = read_inputs(names, strict=strict, jobs=jobs, ray_address=ray_address)
    run = build_run(names, inputs.pieces)
    run.meta["reading"] = inputs.reading
    if inputs.skipped_files:
        run.meta["skipped_files"] = inputs.skipped_files
    add_alignment(run, inputs.summaries)
    return run


def build_run(names: list[str], pieces: list[Piece]) -> Run:
    """Merge the pieces read from ``names`` into one undiagnosed Run."""
    runs = [p for p in pieces if p.run is not None]
    base = runs[-1].run if runs else None
    run = Run(source="analyze", command=names)
    if base is not None:
        run.extra.update(base.extra)
        run.ranks, run.serving = base.ranks, base.serving
        run.meta.update({k: v for k, v in base.meta.items() if k != "skipped"})
        run.meta["analyzed_source"] = base.source
        run.exit_code = base.exit_code
    others = [p for p in pieces if p is not runs[-1]] if runs else pieces
    run.steps = _steps(runs[-1].steps if runs else [], [p for p in others if p.run is None])
    run.samples = sorted(
        [s for p in pieces if p.run is None or p is runs[-1] for s in p.samples],
        key=lambda s: s.t_s,
    )
    run.devices = _devices(pieces)
    interval = _interval(pieces)
    run.utilization = summarize(run.samples, interval) if run.samples else {}
    run.meta.update(_meta(pieces, interval))
    _add_trace(run, pieces)
    _note_warmup(run)
    if len(runs) >= 2:
        run.extra["baseline"] = _baseline(runs[0])
    _add_ranks(run)
    return run


def _steps(own: list[Step], pieces: list[Piece]) -> list[Step]:
    """Steps of the main Run plus those of traces/JSONL; clashing ranks get the file's index."""
    groups = [own] + [p.steps for p in pieces if p.steps]
    groups = [g for g in groups if g]
    rank_sets = [{s.rank for s in g} for g in groups]
    clash = len(groups) > 1 and len(set().union(*rank_sets)) < sum(len(r) for r in rank_sets)
    if not clash:
        return [s for g in groups for s in g]
    log.info("inputs repeat the same ranks; numbering their steps' ranks by file instead")
    return [_with_rank(s, i) for i, g in enumerate(groups) for s in g]


def _with_rank(step: Step, rank: int) -> Step:
    return Step.from_dict({**step.to_dict(), "rank": rank})


def _devices(pieces: list[Piece]) -> list[dict[str, Any]]:
    seen: dict[Any, dict[str, Any]] = {}
    for p in pieces:
        for d in p.devices:
            seen.setdefault(d.get("id", len(seen)), d)
    return list(seen.values())


def _interval(pieces: list[Piece]) -> float | None:
    intervals = {p.interval_s for p in pieces if p.samples and p.interval_s}
    return intervals.pop() if len(intervals) == 1 else None


def _meta(pieces: list[Piece], interval: float | None) -> dict[str, Any]:
    skipped = [s for p in pieces for s in p.skipped]
    if skipped:
        log.warning("skipped %d unusable records (see meta.skipped)", len(skipped))
    return {
        "inputs": [describe(p) for p in pieces],
        "interval_s": interval,
        "skipped": skipped[:MAX_SKIPPED_LISTED],
        "skipped_count": len(skipped),
    }


def _add_trace(run: Run, pieces: list[Piece]) -> None:
    traces = [p.trace for p in pieces if p.trace is not None]
    if traces:
        run.trace = merge_traces(traces)
    if len(traces) > 1:
        run.extra["traces"] = [t.to_dict() for t in traces]  # each file's, for the document


def _note_warmup(run: Run) -> None:
    """Leave a trace's warm-up profiler steps out of the step figures (``warmup_steps``).

    The reader labels leading profiler steps twice the median as warm-up (first compile,
    autotuning); per-step rules judge the steady state.
    """
    facts = run.trace.facts if run.trace is not None else None
    timeline = facts.timeline if facts is not None else {}
    if timeline.get("step_unit") != "profiler_step" or "warmup_steps" in run.meta:
        return
    phases = [p for p in timeline.get("phases") or [] if p.get("name") != "startup"]
    if phases and phases[0].get("name") == "warmup":
        run.meta["warmup_steps"] = int(phases[0].get("steps") or 0)


def _baseline(piece: Piece) -> dict[str, Any]:
    assert piece.run is not None
    stats = step_stats(piece.run.steps)
    return {
        "file": os.path.basename(piece.path),
        "ranks": len({s.rank for s in piece.run.steps}),
        **stats,
    }


def _add_ranks(run: Run) -> None:
    """Add the cross-rank section when steps come from several ranks."""
    if run.ranks is not None or len({s.rank for s in run.steps}) <= 1:
        return  # one process: no cross-rank view (and no import of the recording code)
    from gpuwise.profiling.recording import rank_view

    view = rank_view(run.steps)
    if view is None:
        return
    dist = (run.trace.distributed if run.trace is not None else None) or {}
    if isinstance(dist.get("world_size"), int):
        view = dataclasses.replace(view, world_size=dist["world_size"])  # the job's
    run.ranks = view
