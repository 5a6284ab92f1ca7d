"""A Run recorded from a framework's own step callbacks (Lightning, the Hugging Face Trainer).

The framework says when each step's batch has arrived (``begin``) and when its optimizer
step is done (``end``); the time from one step's end to the next one's begin is the data
wait (the framework fetches the next batch then), the time from begin to end is compute.
Host-to-device copies happen inside the framework's step and count as compute. Devices are
sampled alongside; at the end the Run gets its energy and MFU sections and its diagnosis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.records import Run, Step
from gpuwise.sizing.efficiency import HostEnergy, add_efficiency

WARMUP_MIN_STEPS = 4
"""With at least this many steps, the first (input pipeline start-up) is left out."""


@dataclass(frozen=True)
class RecorderConfig:
    """How a framework callback records.

    Attributes:
        interval_s: Seconds between device samples (default 0.5).
        flops_per_sample: Training FLOPs of one sample, for MFU (``None``: no MFU).
        precision: The run's precision, for the peak FLOP/s (default ``fp32``).
        sample: Sample the devices alongside (default True).
    """

    interval_s: float = 0.5
    flops_per_sample: float | None = None
    precision: str = "fp32"
    sample: bool = True


class StepRecorder:
    """Collects steps from ``begin``/``end`` calls and samples devices; ``finish`` gives the Run.

    Args:
        source: The Run's source (``"lightning"``, ``"transformers"``).
        config: Interval, FLOPs per sample, precision.
        backends: Telemetry backends (default: NVML, else the host CPU).
        clock: Monotonic time source, shared with the sampler.
    """

    def __init__(
        self,
        source: str,
        config: RecorderConfig | None = None,
        *,
        backends: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.config = config or RecorderConfig()
        self._backends = backends
        self._clock = clock
        self._sampler: Any = None
        self._host = HostEnergy()
        self._t0 = 0.0
        self._last_end: float | None = None
        self._begin: float | None = None
        self.steps: list[Step] = []

    def start(self) -> None:
        """Start sampling; the clock's zero is now."""
        if self.config.sample:
            from gpuwise.telemetry.sampler import MonitorConfig, Sampler

            self._sampler = Sampler(
                MonitorConfig(interval_s=self.config.interval_s), self._backends, clock=self._clock
            )
            self._sampler.start()
        self._t0 = self._clock()
        self._last_end = 0.0
        self._host.start()

    def _now(self) -> float:
        return self._clock() - self._t0

    def begin(self) -> None:
        """The step's batch has arrived; its compute starts."""
        self._begin = self._now()

    def end(self, batch_size: int | None = None, rank: int = 0) -> None:
        """The step's optimizer step is done.

        Args:
            batch_size: Samples of this step on this process, when known.
            rank: The process's distributed rank.
        """
        if self._begin is None:
            return
        now = self._now()
        last = self._last_end if self._last_end is not None else self._begin
        wait = max(0.0, self._begin - last)
        self.steps.append(
            Step(
                index=len(self.steps),
                start_s=self._begin - wait,
                data_wait_s=wait,
                h2d_s=0.0,
                compute_s=now - self._begin,
                post_s=0.0,
                rank=rank,
                batch_size=batch_size,
            )
        )
        self._last_end, self._begin = now, None

    def finish(self, devices: list[dict[str, Any]] | None = None) -> Run:
        """Stop sampling and return the diagnosed Run with its energy and MFU sections."""
        from gpuwise.diagnose.rules import diagnose
        from gpuwise.telemetry.summary import summarize

        samples = self._sampler.stop() if self._sampler is not None else []
        self._host.stop()
        run = Run(
            source=self.source,
            devices=devices or (self._sampler.devices() if self._sampler is not None else []),
            steps=list(self.steps),
            samples=samples,
            utilization=summarize(samples, self.config.interval_s) if samples else {},
            meta={
                "interval_s": self.config.interval_s if self.config.sample else None,
                "duration_s": self._now(),
                "warmup_steps": int(len(self.steps) >= WARMUP_MIN_STEPS),
            },
        )
        add_efficiency(
            run,
            host=self._host,
            flops_per_sample=self.config.flops_per_sample,
            precision=self.config.precision,
        )
        run.findings = diagnose(run)
        return run


def run_metrics(run: Run, prefix: str = "gpuwise/") -> dict[str, float]:
    """The numbers a framework logs: phase fractions, step time, MFU, energy per step."""
    stats = run.step_stats()
    out: dict[str, float] = {}
    for phase, value in (stats["fractions"] or {}).items():
        out[f"{prefix}{phase}_fraction"] = float(value)
    if stats["mean_s"] is not None:
        out[f"{prefix}step_s"] = float(stats["mean_s"])
    mfu = run.extra.get("mfu") or {}
    energy = run.extra.get("energy") or {}
    for key, value in (("mfu", mfu.get("mfu")), ("energy_per_step_j", energy.get("per_step_j"))):
        if value is not None:
            out[f"{prefix}{key}"] = float(value)
    return out


def write_reports(run: Run, json_path: str | Path | None, html_path: str | Path | None) -> None:
    """Write the Run as JSON and as an HTML report where asked."""
    if json_path is not None:
        import json

        Path(json_path).write_text(json.dumps(run.to_dict(), default=str), encoding="utf-8")
    if html_path is not None:
        from gpuwise.report.html import write_html

        write_html(run, html_path)
