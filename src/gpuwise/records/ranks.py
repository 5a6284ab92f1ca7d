"""The cross-rank view of a data-parallel run as a typed record (``Run.ranks``).

``gpuwise.distributed.aggregate.cross_rank`` computes it once, when a recording becomes a Run
(``gpuwise.profiling.recording``); readers take it from the Run instead of recomputing it from
raw steps, so every view applies the same warm-up trimming. Its JSON form is the
``ranks`` section of the ``gpuwise.run/1`` document (see the README's distributed section).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuwise.records.core import known_fields


@dataclass(frozen=True)
class RankView:
    """What the ranks of one job did, side by side.

    Attributes:
        world_size: Ranks in the job.
        ranks: Rank numbers seen (steps or rank files).
        step_counts: Steps per rank, keyed by the rank as a string.
        uneven_steps: Ranks ran different numbers of steps.
        per_rank: One row per rank: step count, means, phase means, own time.
        step_skew_s: Slowest minus fastest rank's mean step, ``None`` for one rank.
        slowest: The straggler (rank, cause, extra seconds per step), or ``None``.
        comm: Exposed gradient communication (see ``gpuwise.distributed.comm``).
        ddp: DistributedDataParallel settings read from the ranks, or ``None``.
        threads: Threads per rank against the machine's cores, or ``None``.
        accumulation: Gradient-accumulation facts, or ``None``.
        failure: How a failed job ended (which rank, when), or ``None``.
        warmup_steps_skipped: Leading steps of each rank left out of the means.
    """

    world_size: int
    ranks: tuple[int, ...]
    step_counts: Mapping[str, int]
    uneven_steps: bool
    per_rank: tuple[Mapping[str, Any], ...]
    step_skew_s: float | None = None
    slowest: Mapping[str, Any] | None = None
    comm: Mapping[str, Any] | None = None
    ddp: Mapping[str, Any] | None = None
    threads: Mapping[str, Any] | None = None
    accumulation: Mapping[str, Any] | None = None
    failure: Mapping[str, Any] | None = None
    warmup_steps_skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (the Run document's ``ranks`` section)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["ranks"] = list(self.ranks)
        d["per_rank"] = [dict(row) for row in self.per_rank]
        d["step_counts"] = dict(self.step_counts)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankView:
        """Build the record from its JSON form; unknown keys are ignored."""
        kwargs = known_fields(cls, d)
        kwargs["ranks"] = tuple(int(r) for r in d.get("ranks") or ())
        kwargs["per_rank"] = tuple(d.get("per_rank") or ())
        kwargs.setdefault("step_counts", {})
        kwargs.setdefault("uneven_steps", False)
        kwargs.setdefault("world_size", len(kwargs["ranks"]) or 1)
        return cls(**kwargs)

    def rank_row(self, rank: int) -> Mapping[str, Any] | None:
        """The ``per_rank`` row of ``rank``, or ``None``."""
        return next((row for row in self.per_rank if row.get("rank") == rank), None)
