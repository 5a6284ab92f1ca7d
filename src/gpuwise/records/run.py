"""The Run: what one ``gpuwise profile``, ``analyze`` or ``serve-bench`` produced.

Its JSON form is the ``gpuwise.run/1`` contract that ``--json``, tests and other tools read;
the typed sections (``records.ranks``, ``records.serving``) keep their keys there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuwise.records.anatomy import JobAnatomy
from gpuwise.records.checks import parse_each
from gpuwise.records.core import RUN_SCHEMA, Finding, Sample, Step, step_stats
from gpuwise.records.ranks import RankView
from gpuwise.records.trace_section import TraceSection

if TYPE_CHECKING:
    from gpuwise.records.serving import ServingResult


@dataclass
class Run:
    """What one ``gpuwise profile`` or ``gpuwise analyze`` produced.

    Attributes:
        source: ``"profile"``, ``"api"`` or ``"analyze"``.
        command: The profiled command line, or the analyzed file names.
        exit_code: The profiled command's exit code (``None`` when not a command).
        devices: One dict per device: ``{"id", "name", "memory_total_bytes", ...}``.
        steps: Step records of every rank.
        samples: Telemetry samples, time-ordered.
        utilization: Per-device summary (see ``gpuwise.telemetry.summary.summarize``).
        findings: Diagnosis, best payoff first (the first is the main bottleneck or
            ``healthy``).
        meta: Versions, start time, sampling interval, skipped records, inputs.
        extra: Other sections added by other layers (``"traces"`` for several analyzed
            traces, ``"h2d"``, ``"energy"``, ...), each a JSON-ready dict.
        ranks: The cross-rank view of a distributed run, computed once when the Run was
            built (``None`` for one process); the document's ``ranks`` section.
        serving: The result of a serving run (``gpuwise serve-bench``); the document's
            ``serving`` section.
        trace: What an analyzed trace showed (the lowest rank's, with the cross-rank
            table for several), or ``None``; the document's ``trace`` section.
        anatomy: What the job is (phases, step identity, processes, data kind, what is
            applied), read before the rules judge it; the document's ``anatomy`` section.
    """

    source: str
    command: list[str] | None = None
    exit_code: int | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    utilization: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    ranks: RankView | None = None
    serving: ServingResult | None = None
    trace: TraceSection | None = None
    anatomy: JobAnatomy | None = None

    def step_stats(self) -> dict[str, Any]:
        """Return the ``steps`` summary of the Run contract (see ``step_stats``).

        ``meta["warmup_steps"]`` (set by the profiler) leaves each rank's first steps out.
        Ranks of one job (``self.ranks`` set) step together: the rate is one rank's.
        """
        warmup = int(self.meta.get("warmup_steps", 0))
        return step_stats(self.steps, warmup, synchronous=self.ranks is not None)

    def _repr_html_(self) -> str:
        """The HTML report, inline, when a notebook displays the Run."""
        from gpuwise.records.display import repr_html

        return repr_html("run_html", self)

    def to_dict(self, *, include_samples: bool = True) -> dict[str, Any]:
        """Return the ``gpuwise.run/1`` JSON document.

        Args:
            include_samples: Also list every sample and step record (default). Without
                them the document holds only summaries.
        """
        steps = self.step_stats()
        if include_samples:
            steps["records"] = [s.to_dict() for s in self.steps]
        doc: dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "source": self.source,
            "command": self.command,
            "exit_code": self.exit_code,
            "devices": self.devices,
            "steps": steps,
            "utilization": self.utilization,
            "findings": [f.to_dict() for f in self.findings],
            "meta": self.meta,
        }
        if self.anatomy is not None:
            doc["anatomy"] = self.anatomy.to_dict()
        if self.trace is not None:
            doc["trace"] = self.trace.to_dict()
        doc.update(self.extra)
        if self.ranks is not None:
            doc["ranks"] = self.ranks.to_dict()
        if self.serving is not None:
            doc["serving"] = self.serving.to_dict()
        if include_samples:
            doc["samples"] = [s.to_dict() for s in self.samples]
        return doc

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], skipped: list[dict[str, Any]] | None = None) -> Run:
        """Rebuild a Run from its JSON document (records and samples included).

        Args:
            d: The ``gpuwise.run/1`` document.
            skipped: Receives ``{"record", "reason"}`` for each step or sample left out
                because its values cannot be data (NaN, negative times, ...).
        """
        bad: list[dict[str, Any]] = [] if skipped is None else skipped
        records = (d.get("steps") or {}).get("records") if isinstance(d.get("steps"), dict) else []
        known = {"schema", "source", "command", "exit_code", "devices", "steps"}
        known |= {"utilization", "findings", "meta", "samples"}
        ranks = RankView.from_dict(d["ranks"]) if isinstance(d.get("ranks"), Mapping) else None
        serving = _serving_of(d.get("serving"))
        section = d.get("trace")
        trace = TraceSection.from_dict(section) if isinstance(section, Mapping) else None
        body = d.get("anatomy")
        anatomy = JobAnatomy.from_dict(body) if isinstance(body, Mapping) else None
        # sections that did not parse stay extra
        typed = {"ranks": ranks, "serving": serving, "trace": trace, "anatomy": anatomy}
        return cls(
            source=d.get("source", "analyze"),
            command=d.get("command"),
            exit_code=d.get("exit_code"),
            devices=list(d.get("devices") or []),
            steps=parse_each(records, Step.from_dict, "steps.records", bad),
            samples=parse_each(d.get("samples"), Sample.from_dict, "samples", bad),
            utilization=dict(d.get("utilization") or {}),
            findings=[Finding.from_dict(f) for f in d.get("findings") or []],
            meta=dict(d.get("meta") or {}),
            extra={k: v for k, v in d.items() if k not in known and typed.get(k) is None},
            ranks=ranks,
            serving=serving,
            trace=trace,
            anatomy=anatomy,
        )


def _serving_of(section: Any) -> ServingResult | None:
    """The typed serving result, or ``None`` when the section is absent or incomplete."""
    if not isinstance(section, Mapping) or not {"settings", "duration_s"} <= section.keys():
        return None
    from gpuwise.records.serving import ServingResult

    return ServingResult.from_dict(section)
