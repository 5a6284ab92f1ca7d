"""Static batches or continuous batching, and the batch over time, of a serving engine.

The engine's forward steps come from ``engine_steps.EngineSteps`` (its markers, or
the ``ProfilerStep#`` spans of traces without them). ``batching`` tells, from the steps in
order, whether batches are static (a prefill, a run of decode steps with a constant batch,
the next prefill only after the run ends) or continuous (prefill and decode in one step,
or the decode batch changing as requests join and leave), and how long the device idled
between batches.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.calls.device import DeviceColumns
from gpuwise.telemetry.readers.kineto.calls.weights import weight_kind
from gpuwise.telemetry.readers.kineto.intervals import US, busy_before, median
from gpuwise.telemetry.readers.kineto.job.engine_steps import (
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    UNKNOWN,
    EngineSteps,
)
from gpuwise.telemetry.readers.kineto.job.kind import DECODE, PREFILL, kernel_marks

MIN_STEPS = 4
"""Fewer forward steps than this tell nothing about how batches are formed."""

HEAVY_GEMM_FACTOR = 3.0
"""A step whose dense GEMM time is three times the median step's ran a prefill: decode
GEMMs over a few tokens read the weights once and take the same time step after step
(memory-bound), while a prompt's GEMMs grow with its tokens."""

BATCH_GAP_FACTOR = 3.0
"""A gap before a prefill step counts as idle between batches beyond three typical gaps
between decode steps (the host's own per-step work)."""


def batching(
    engine: EngineSteps,
    profiler_steps: list[tuple[float, float]],
    cols: DeviceColumns,
    device_span_s: float,
) -> dict[str, Any]:
    """How the engine forms batches, from its forward steps in order (module docstring).

    Args:
        engine: The engine steps gathered while reading.
        profiler_steps: ``(start_us, duration_us)`` of the ProfilerStep spans, used when
            the trace has no engine markers.
        cols: Every device event.
        device_span_s: The device span the shares are of.

    Returns:
        ``{}`` when there are no steps; else ``source``, ``steps``, step counts by phase,
        ``pattern`` (``static``, ``continuous`` or ``unknown``) with its ``reasons``,
        ``tokens_per_step`` (min/median/max, and the decode steps' median, where shapes
        were recorded), ``batches``, ``prefill_by_gemm_time`` (steps told a prompt by
        their GEMM time), ``decode_dense_gemm_s`` (dense GEMM time of the decode steps),
        ``idle_between_batches_s`` and its ``share`` of the device span, and the phase,
        tokens and requests (-1: not recorded) of the ``first_steps`` (eight at most) and,
        where a batch size is recorded, ``over_time``: evenly spaced steps (32 at most).
    """
    s, e, phases, requests, source = _steps(engine, profiler_steps)
    if not s.size:
        return {}
    dev = _device_per_step(cols, s, e)
    tokens, seq = _tokens_per_step(engine, s, e)
    by_kernels = _kernel_phases(dev, seq)
    mixed = (phases == PHASE_PREFILL) & (by_kernels == PHASE_MIXED)
    phases = np.where((phases == UNKNOWN) | mixed, by_kernels, phases).astype(np.int8)
    phases, heavy = _heavy_steps(phases, dev["dense"])
    first = [
        {"phase": PHASES[int(p)], "tokens": int(t), "requests": int(r)}
        for p, t, r in zip(phases[:8], tokens[:8], requests[:8], strict=True)
    ]
    idle, batches = _idle_between_batches(cols, dev, phases)
    pattern, reasons = _pattern(phases, tokens, batches, source)
    known = tokens[tokens >= 0]
    return {
        "source": source,
        "steps": int(s.size),
        **{f"{PHASES[k]}_steps": int((phases == k).sum()) for k in range(4)},
        "pattern": pattern,
        "reasons": reasons,
        "tokens_per_step": (
            {
                "min": int(known.min()),
                "median": median(known),
                "max": int(known.max()),
                "decode_median": _median(tokens[(phases == PHASE_DECODE) & (tokens >= 0)]),
            }
            if known.size
            else None
        ),
        "batches": batches,
        "prefill_by_gemm_time": heavy,
        "decode_dense_gemm_s": float(dev["dense"][phases == PHASE_DECODE].sum()) * US,
        "idle_between_batches_s": idle * US,
        "share": idle * US / device_span_s if device_span_s > 0 else 0.0,
        "first_steps": first,
        "over_time": _over_time(phases, tokens, requests),
    }


SERIES_POINTS = 32
"""At most this many steps, evenly spaced, describe the batch over time."""


def _over_time(phases: Any, tokens: Any, requests: Any) -> list[dict[str, Any]]:
    """The batch over time: ``step``, ``phase``, ``tokens``, ``requests`` of evenly spaced steps.

    Only where the trace records a batch size (embedding shapes or the engine's request
    counts); empty otherwise.
    """
    known = np.flatnonzero((tokens >= 0) | (requests >= 0))
    if not known.size:
        return []
    at = np.linspace(0, known.size - 1, min(SERIES_POINTS, known.size)).round().astype(int)
    pick = known[at]
    return [
        {
            "step": int(i),
            "phase": PHASES[int(phases[i])],
            "tokens": int(tokens[i]),
            "requests": int(requests[i]),
        }
        for i in pick
    ]


def _steps(
    engine: EngineSteps, profiler_steps: list[tuple[float, float]]
) -> tuple[Any, Any, Any, Any, str]:
    """The forward steps: engine markers; else one per embedding call; else ProfilerSteps.

    A decoder's forward embeds its tokens once, so in a ``generate`` loop without engine
    markers each ``aten::embedding`` (recorded with shapes) starts the next forward.
    """
    s, e, phases, requests = engine.spans()
    if s.size:
        return s, e, phases, requests, "engine"
    at = np.sort(np.frombuffer(engine.embed_at, dtype=np.float64))
    if at.size >= MIN_STEPS or (at.size and not profiler_steps):
        # a few embedding calls and no ProfilerStep: still one forward each (too few to
        # tell a batching pattern, which ``_pattern`` says)
        s, e = at, np.append(at[1:], np.inf)
        source = "embedding_calls"
    elif profiler_steps:
        s = np.array([a for a, _ in profiler_steps], dtype=np.float64)
        e = s + np.array([d for _, d in profiler_steps], dtype=np.float64)
        source = "profiler_steps"
    else:
        none = np.zeros(0, dtype=np.float64)
        return none, none, none.astype(np.int8), none.astype(np.int64), ""
    return s, e, np.zeros(s.shape, np.int8), np.full(s.shape, -1, np.int64), source


def _median(x: np.ndarray[Any, Any]) -> float | None:
    return median(x) if x.size else None


def _device_per_step(
    cols: DeviceColumns, s: np.ndarray[Any, Any], e: np.ndarray[Any, Any]
) -> dict[str, np.ndarray[Any, Any]]:
    """Each step's device events (launched inside it): first start, last end, phase time."""
    when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
    step = np.searchsorted(s, when, side="right") - 1
    inside = (step >= 0) & (when <= e[np.clip(step, 0, None)])
    step = np.where(inside, step, -1)
    n = s.size
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    ok = step >= 0
    np.fmin.at(first, step[ok], cols.starts[ok])
    np.fmax.at(last, step[ok], cols.ends[ok])
    marks = np.array([kernel_marks(name) for name in cols.names], dtype=np.int64)
    dense = np.array([weight_kind(name) == "dense" for name in cols.names], dtype=bool)
    m = marks[cols.name_ids] if cols.name_ids.size else np.zeros(0, np.int64)
    g = dense[cols.name_ids] if cols.name_ids.size else np.zeros(0, bool)
    dur = cols.ends - cols.starts

    def per_step(mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = np.bincount(step[ok], weights=(dur * mask)[ok], minlength=n)
        return out

    return {
        "first": first,
        "last": last,
        "prefill": per_step((m & PREFILL) > 0),
        "decode": per_step((m & DECODE) > 0),
        "dense": per_step(g),
    }


def _tokens_per_step(
    engine: EngineSteps, s: np.ndarray[Any, Any], e: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Tokens and sequence length of each step's first embedding call (-1: not recorded)."""
    tokens = np.full(s.shape, -1, dtype=np.int64)
    seq = tokens.copy()
    at = np.frombuffer(engine.embed_at, dtype=np.float64)
    if not at.size or not s.size:
        return tokens, seq
    order = np.argsort(at, kind="stable")
    at = at[order]
    k = np.searchsorted(at, s, side="left")  # first embedding at or after each step start
    ok = k < at.size
    ok[ok] &= at[k[ok]] <= e[ok]
    tokens[ok] = np.frombuffer(engine.embed_tokens, dtype=np.int64)[order][k[ok]]
    seq[ok] = np.frombuffer(engine.embed_seq, dtype=np.int64)[order][k[ok]]
    return tokens, seq


def _kernel_phases(dev: dict[str, np.ndarray[Any, Any]], seq: Any) -> np.ndarray[Any, Any]:
    """A step's phase from its kernels (prefill, decode, both: mixed) or its input shape.

    Kernel names decide where they tell (FlashInfer's batch prefill/decode kernels, paged
    attention); else a ``[batch, 1]`` input is a decode step and ``[batch, n > 1]`` a
    prefill.
    """
    pre, dec = dev["prefill"] > 0, dev["decode"] > 0
    by_kernel = np.where(
        pre & dec,
        PHASE_MIXED,
        np.where(pre, PHASE_PREFILL, np.where(dec, PHASE_DECODE, UNKNOWN)),
    )
    by_shape = np.where(seq == 1, PHASE_DECODE, np.where(seq > 1, PHASE_PREFILL, UNKNOWN))
    out: np.ndarray[Any, Any] = np.where(by_kernel != UNKNOWN, by_kernel, by_shape)
    return out


def _heavy_steps(phases: Any, dense: np.ndarray[Any, Any]) -> tuple[Any, int]:
    """Steps of unknown or decode phase whose dense GEMMs ran a prompt (``HEAVY_GEMM_FACTOR``).

    An unknown step becomes a prefill, a decode step (its kernels decode too) a mixed one.
    Returns the phases and how many steps were so told.
    """
    ran = dense[dense > 0]
    if phases.size < MIN_STEPS or ran.size < MIN_STEPS:
        return phases, 0
    heavy = (dense > HEAVY_GEMM_FACTOR * median(ran)) & (
        (phases == UNKNOWN) | (phases == PHASE_DECODE)
    )
    out = np.where(heavy, np.where(phases == PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL), phases)
    return out.astype(np.int8), int(heavy.sum())


def _idle_between_batches(
    cols: DeviceColumns, dev: dict[str, np.ndarray[Any, Any]], phases: np.ndarray[Any, Any]
) -> tuple[float, int]:
    """Device idle (µs) before each prefill that follows a decode run, beyond typical gaps.

    The gap between one step's last device event and the next step's first counts only
    where no other device work ran (``busy_before``); gaps between decode steps give the
    typical per-step gap that any serving loop has.
    """
    first, last = dev["first"], dev["last"]
    ran = ~np.isnan(first)
    idx = np.flatnonzero(ran)
    if idx.size < 2:
        return 0.0, 0
    busy = busy_before(cols.starts, cols.ends)
    a, b = last[idx[:-1]], first[idx[1:]]
    gap = np.clip((b - a) - np.clip(busy(b) - busy(a), 0, None), 0, None)
    prev, nxt = phases[idx[:-1]], phases[idx[1:]]
    decode_gaps = gap[(prev == PHASE_DECODE) & (nxt == PHASE_DECODE)]
    typical = statistics.median(decode_gaps.tolist()) if decode_gaps.size else 0.0
    starts_batch = (prev == PHASE_DECODE) & (nxt == PHASE_PREFILL)
    extra = np.clip(gap[starts_batch] - BATCH_GAP_FACTOR * typical, 0, None)
    batches = int(starts_batch.sum()) + int(phases[idx[0]] == PHASE_PREFILL)
    return float(extra.sum()), batches


def _pattern(phases: Any, tokens: Any, batches: int, source: str) -> tuple[str, list[str]]:
    """``static``, ``continuous`` or ``unknown``, with the reasons read from the steps."""
    n = int(phases.size)
    known = tokens[tokens >= 0]
    values = len(set(known.tolist()))  # (np.unique would import numpy.ma: start-up time)
    if n >= MIN_STEPS and source == "engine" and values > 2:
        # A flattened engine batch: tokens per forward take many values as requests come
        # and go (a static batch has two: its prompt and its decode batch).
        return "continuous", [f"tokens per forward take {values} values"]
    if n < MIN_STEPS:
        return "unknown", [f"only {n} forward step(s): too few to tell how batches form"]
    if not (phases != UNKNOWN).any():
        return "unknown", [f"{n} forward steps, phases not told by their names or kernels"]
    reasons = []
    mixed = int((phases == PHASE_MIXED).sum())
    if mixed:
        reasons.append(f"{mixed} step(s) ran prefill and decode together (chunked prefill)")
    prev, nxt = phases[:-1], phases[1:]
    same_run = (prev == PHASE_DECODE) & (nxt == PHASE_DECODE) & (tokens[:-1] >= 0)
    changed = same_run & (tokens[1:] >= 0) & (tokens[1:] != tokens[:-1])
    if changed.any():
        reasons.append(
            f"the decode batch changes {int(changed.sum())} times between decode steps "
            "(requests join and leave)"
        )
    if reasons:
        return "continuous", reasons
    if batches >= 2 and (same_run.any() or not (tokens >= 0).any()):
        constant = " at a constant batch" if same_run.any() else ""
        return "static", [
            f"{batches} batches, each a prefill, then decode steps{constant} until the batch "
            "ends; no step mixes prefill with decode"
        ]
    return "unknown", ["the steps show neither static batches nor continuous batching"]
