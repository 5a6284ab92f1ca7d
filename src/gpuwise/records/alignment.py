"""Collective instances matched across the ranks of one job: ``JobAlignment``.

A *collective instance* (DESIGN.md) is the n-th collective of one process group, matched
across ranks by group, sequence, kind and size; the last rank to arrive is the one the
others waited for. ``diagnose.collective_align`` builds this record from the ranks'
summaries; it is the evidence of the ``straggler`` finding and the source of the report's
ranks x steps lateness map. Its JSON form is the ``alignment`` key of the Run document's
``trace`` section, with every rank's row whatever the job's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobAlignment:
    """Who arrived last at each collective, who held each step back, and why.

    Attributes:
        source: ``"kernel"`` (collective kernels' start times) or ``"host"`` (only the
            host calls were recorded: the time each rank issued the call).
        matching: ``"sequence"`` (the groups' ``Seq`` numbers) or ``"order"`` (the n-th
            call of one group, kind and size within the same profiler step).
        instances: Collective instances seen on two ranks or more.
        unmatched: Calls seen on one rank only (the other ranks' traces miss them).
        by_kind: Matched instances per collective kind.
        per_rank: One row per rank, lowest first: ``rank``, ``node``, ``instances``,
            ``last`` (instances it arrived last at), ``last_share``, ``wait_caused_s``
            (seconds the others waited for it, summed over instances, median over the
            others), ``own_wait_caused_s`` (the same without lateness carried from its
            previous collective, where it waited for another rank), ``waited_s`` (seconds
            it waited for others) and ``lateness_mean_s``
            (mean time after the first rank it arrived).
        step_numbers: Profiler step numbers (``ProfilerStep#N``), the map's columns.
        lateness_s: Per rank (rows as ``per_rank``) and step, seconds it arrived after the
            first rank, summed over the step's instances.
        step_holders: Per step: ``step``, ``rank`` that held it back (the most wait
            caused), ``wait_s`` it caused, ``step_s`` (median rank's step time).
        node_groups: Per node named by the traces: ``node``, ``ranks``, ``last_share``
            (share of instances one of its ranks arrived last at), ``wait_caused_s``.
        straggler: The rank that held the job back, or None: ``rank``, ``node``,
            ``kind``, ``last_share`` (at that kind), ``cost_fraction`` (of each step),
            ``cause``, ``cause_s`` and ``others_s`` (per step), ``cause_ratio``,
            ``sentence``.
        clock_offsets: Hosts whose clock is off the lowest rank's by 50 µs or more, as
            read from the collectives' common end: ``node`` (or ``rank``), ``ranks``,
            ``offset_s``. Arrival was judged with them taken off; each rank's own is
            ``per_rank[i]["clock_offset_s"]``.
    """

    source: str
    matching: str
    instances: int
    unmatched: int
    by_kind: Mapping[str, int]
    per_rank: tuple[Mapping[str, Any], ...]
    step_numbers: tuple[int, ...] = ()
    lateness_s: tuple[tuple[float, ...], ...] = ()
    step_holders: tuple[Mapping[str, Any], ...] = ()
    node_groups: tuple[Mapping[str, Any], ...] = ()
    straggler: Mapping[str, Any] | None = None
    clock_offsets: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (the trace section's ``alignment``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["by_kind"] = dict(self.by_kind)
        d["per_rank"] = [dict(r) for r in self.per_rank]
        d["step_numbers"] = list(self.step_numbers)
        d["lateness_s"] = [list(row) for row in self.lateness_s]
        d["step_holders"] = [dict(h) for h in self.step_holders]
        d["node_groups"] = [dict(g) for g in self.node_groups]
        d["straggler"] = None if self.straggler is None else dict(self.straggler)
        d["clock_offsets"] = [dict(c) for c in self.clock_offsets]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobAlignment:
        """Build the record from its JSON form; unknown keys are ignored."""
        return cls(
            source=str(d.get("source", "kernel")),
            matching=str(d.get("matching", "order")),
            instances=int(d.get("instances", 0)),
            unmatched=int(d.get("unmatched", 0)),
            by_kind=dict(d.get("by_kind") or {}),
            per_rank=tuple(dict(r) for r in d.get("per_rank") or ()),
            step_numbers=tuple(int(s) for s in d.get("step_numbers") or ()),
            lateness_s=tuple(tuple(float(x) for x in row) for row in d.get("lateness_s") or ()),
            step_holders=tuple(dict(h) for h in d.get("step_holders") or ()),
            node_groups=tuple(dict(g) for g in d.get("node_groups") or ()),
            straggler=None if d.get("straggler") is None else dict(d["straggler"]),
            clock_offsets=tuple(dict(c) for c in d.get("clock_offsets") or ()),
        )
