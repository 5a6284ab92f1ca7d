"""A Run recorded from a framework's own step callbacks (Lightning, the Hugging Face Trainer).

The framework says when each step's batch has arrived (``begin``) and when its optimizer
step is done (``end``); the time from one step's end to the next one's begin is the data
wait (the framework fetches the next batch then), the time from begin to end is compute.
Host-to-device copies happen inside the framework's step and count as compute. Devices are
sampled alongside; the first step's FLOPs are counted as it runs (``profiling.model_flops``)
unless FLOPs per sample are given; at the end the Run gets its energy and MFU sections and
its diagnosis.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.atomic import write_atomic
from gpuwise.efficiency.sections import HostEnergy, add_efficiency
from gpuwise.errors import GpuwiseError
from gpuwise.profiling.recording import build_run, run_meta
from gpuwise.profiling.steps.files import StepFiles
from gpuwise.records import Run, Step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecorderConfig:
    """How a framework callback records.

    Attributes:
        interval_s: Seconds between device samples (default 0.5).
        flops_per_sample: Training FLOPs of one sample, for MFU (``None``: counted).
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
        self._t0_wall_s = 0.0
        self._last_end: float | None = None
        self._begin: float | None = None
        self.steps: list[Step] = []
        self.flops: list[dict[str, Any]] = []

    def start(self) -> None:
        """Start sampling; the clock's zero is now."""
        if self.config.sample:
            from gpuwise.telemetry.sampler import MonitorConfig, Sampler

            self._sampler = Sampler(
                MonitorConfig(interval_s=self.config.interval_s), self._backends, clock=self._clock
            )
            self._sampler.start()
        self._t0 = self._clock()
        self._t0_wall_s = time.time()
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

        samples = self._sampler.stop() if self._sampler is not None else []
        self._host.stop()
        interval_s = self.config.interval_s if self.config.sample else None
        torch_version = getattr(sys.modules.get("torch"), "__version__", None)
        meta = run_meta(self._t0_wall_s, self._now(), interval_s, torch_version)
        if not devices and self._sampler is not None:
            devices = self._sampler.devices()
        files = StepFiles(steps=list(self.steps), flops=list(self.flops))
        run = build_run(None, None, devices or [], files, samples, meta, source=self.source)
        add_efficiency(
            run,
            host=self._host,
            flops_per_sample=self.config.flops_per_sample,
            precision=self.config.precision,
        )
        run.findings = diagnose(run)
        return run


def run_metrics(run: Run, prefix: str = "gpuwise/") -> dict[str, float]:
    """The numbers a framework logs: phase fractions, step time, MFU, HFU, tokens/s, energy."""
    stats = run.step_stats()
    out: dict[str, float] = {}
    for phase, value in (stats["fractions"] or {}).items():
        out[f"{prefix}{phase}_fraction"] = float(value)
    if stats["mean_s"] is not None:
        out[f"{prefix}step_s"] = float(stats["mean_s"])
    mfu = run.extra.get("mfu") or {}
    energy = run.extra.get("energy") or {}
    values = (
        ("mfu", mfu.get("mfu")),
        ("hfu", mfu.get("hfu")),
        ("tokens_per_s", (mfu.get("tokens") or {}).get("tokens_per_s")),
        ("energy_per_step_j", energy.get("per_step_j")),
    )
    for key, value in values:
        if value is not None:
            out[f"{prefix}{key}"] = float(value)
    return out


def write_reports(run: Run, json_path: str | Path | None, html_path: str | Path | None) -> None:
    """Write the Run as JSON and as an HTML report where asked."""
    if json_path is not None:
        write_atomic(json_path, json.dumps(run.to_dict(), default=str), what="run")
    if html_path is not None:
        from gpuwise.report.html.run import write_html

        write_html(run, html_path)


class CallbackCore:
    """What the framework callbacks share: their settings, one StepRecorder, the Run at the end.

    A framework's callback class mixes this with its own base class and maps its hooks to
    ``_start``, ``_begin``, ``_end`` and ``_finish``.

    Args:
        interval_s: Seconds between device samples (default 0.5).
        flops_per_sample: Training FLOPs of one sample, for MFU (default: counted on the
            first step as it runs).
        precision: The run's precision with ``flops_per_sample`` (default ``fp32``); counted
            FLOPs carry their own.
        json_path: Also write the Run as JSON here at the end.
        html_path: Also write the HTML report here at the end.
        backends: Telemetry backends (default: NVML, else the host CPU).
    """

    source = "framework"

    def __init__(
        self,
        *,
        interval_s: float = 0.5,
        flops_per_sample: float | None = None,
        precision: str = "fp32",
        json_path: str | Path | None = None,
        html_path: str | Path | None = None,
        backends: Any = None,
    ) -> None:
        super().__init__()
        self.config = RecorderConfig(interval_s, flops_per_sample, precision)
        self.json_path, self.html_path = json_path, html_path
        self._backends = backends
        self._recorder: StepRecorder | None = None
        self._tally: Any = None
        self._counts_left = 2  # steps to try counting on (a first step may count nothing)
        self.run: Run | None = None

    def _start(self) -> None:
        self._recorder = StepRecorder(self.source, self.config, backends=self._backends)
        self._counts_left = 2
        self._recorder.start()

    def _begin(self) -> None:
        if self._recorder is not None:
            if self.config.flops_per_sample is None and self._counts_left > 0:
                self._counts_left -= 1
                self._tally = _open_count()  # the first step's FLOPs, for MFU
            self._recorder.begin()

    def _end(self, batch_size: int | None, rank: int, model: Any = None) -> None:
        if self._recorder is not None:
            self._recorder.end(batch_size, rank=rank)
            if self._tally is not None:
                counted = _close_count(self._tally, batch_size, rank, model)
                self._recorder.flops += counted
                self._counts_left = 0 if counted else self._counts_left
        self._tally = None

    def _finish(self) -> dict[str, float] | None:
        """Build the Run, write the reports; return the numbers to log (None: never started)."""
        if self._tally is not None:  # a step began and never ended: stop counting
            _close_count(self._tally, None, 0, None)
            self._tally = None
        if self._recorder is None:
            return None
        self.run = self._recorder.finish()
        self._recorder = None
        write_reports(self.run, self.json_path, self.html_path)
        return run_metrics(self.run)

    def _fail(self, err: BaseException) -> None:
        """Training raised: stop sampling and write the partial Run, marked with the error.

        The steps recorded up to the error are kept; the Run's ``extra["interrupted"]``
        names the error. A report that cannot be written is logged, never raised: the
        training's own error is the one the caller must see.
        """
        if self._recorder is None:
            return
        self.run = self._recorder.finish()  # stops the sampler thread
        self._recorder = None
        self.run.extra["interrupted"] = {
            "error": f"{type(err).__name__}: {err}",
            "steps": len(self.run.steps),
        }
        try:
            write_reports(self.run, self.json_path, self.html_path)
        except GpuwiseError as write_err:
            log.warning("the partial gpuwise report was not written: %s", write_err)


def _open_count() -> Any:
    from gpuwise.profiling.model_flops import enter_tally

    return enter_tally()


def _close_count(tally: Any, samples: int | None, rank: int, model: Any) -> list[dict[str, Any]]:
    """The first step's ``flops`` record: forward, backward and optimizer step (one or none)."""
    from gpuwise.profiling.model_flops import exit_tally, flops_record

    exit_tally(tally)
    phase = "train" if tally.backward_flops else "eval"
    models = [] if model is None else [model]
    record = flops_record(tally, rank=rank, phase=phase, samples=samples, models=models)
    return [] if record is None else [record]


def callback_class(module: str, core: type, base: type, doc: str) -> type:
    """Build a framework's ``GpuwiseCallback`` from its core and the framework's base class."""
    cls = type("GpuwiseCallback", (core, base), {})
    cls.__doc__ = doc
    cls.__module__ = module
    return cls
