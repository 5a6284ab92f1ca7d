"""Flags and wiring shared by ``profile``: energy, MFU and the Prometheus endpoint."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import add_precision, add_prometheus, number

if TYPE_CHECKING:
    from gpuwise.integrations.prometheus import MetricsServer
    from gpuwise.records import Run
    from gpuwise.telemetry.sampler import Sampler


def add_efficiency_flags(parser: argparse.ArgumentParser) -> None:
    """Declare ``--flops-per-sample``, ``--precision`` and ``--prometheus``."""
    parser.add_argument(
        "--flops-per-sample",
        type=number("FLOPs per sample", 1.0),
        metavar="N",
        help="training FLOPs of one sample (from `gpuwise estimate`), instead of those counted "
        "on the job's first iteration, for achieved TFLOP/s and MFU",
    )
    add_precision(
        parser,
        "the precision of --flops-per-sample, for the device's peak FLOP/s in MFU (counted "
        "FLOPs carry the precision they ran in: autocast dtype, TF32 setting, model dtype)",
    )
    add_prometheus(parser)


def open_prometheus(address: str | None, sampler: Sampler) -> MetricsServer | None:
    """Serve the readings of ``sampler``'s devices at ``address`` (``None``: no endpoint).

    The caller feeds each sample to ``server.metrics.update``.
    """
    if not address:
        return None
    from gpuwise.integrations.prometheus import DeviceMetrics, MetricsServer

    server = MetricsServer(DeviceMetrics(sampler.devices()), address)
    print(
        f"gpuwise: serving Prometheus metrics at http://{server.host}:{server.port}/metrics",
        file=sys.stderr,
    )
    return server


class Finish:
    """Completes the Run after the job: energy, MFU and the Prometheus step gauges.

    Attributes:
        steps_dir: Where the job's step files must go, so that the live step gauges can
            read them (``--keep-steps``, or a directory of its own under ``--prometheus``);
            ``None``: anywhere.
    """

    def __init__(self, args: argparse.Namespace, host: Any, exporter: Any) -> None:
        self.args, self.host, self.exporter = args, host, exporter
        self.steps_dir: str | None = getattr(args, "keep_steps", None)
        self.own_dir: str | None = None
        self.live: Any = None
        if exporter is not None:
            from gpuwise.integrations.live_steps import LiveSteps
            from gpuwise.profiling.runner import TEMP_PREFIX

            if self.steps_dir is None:  # named like the runner's: removed if gpuwise dies
                self.own_dir = self.steps_dir = tempfile.mkdtemp(
                    prefix=f"{TEMP_PREFIX}{os.getpid()}-"
                )
            devices = exporter.sampler.devices()
            interval_s = max(float(args.interval), LIVE_STEPS_MIN_INTERVAL_S)
            metrics = exporter.server.metrics
            self.live = LiveSteps(self.steps_dir, metrics, devices, interval_s).start()

    def __call__(self, run: Run) -> Run:
        """Add the energy and MFU sections; set the step gauges from the whole Run."""
        from gpuwise.efficiency.sections import add_efficiency

        self.host.stop()
        args = self.args
        add_efficiency(
            run, host=self.host, flops_per_sample=args.flops_per_sample, precision=args.precision
        )
        if self.exporter is not None:
            from gpuwise.integrations.prometheus import run_step_metrics

            self.close()
            self.exporter.server.metrics.update_steps(run_step_metrics(run))
        return run

    def close(self) -> None:
        """Stop the live gauges and remove the directory made for them."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        if self.own_dir is not None:
            shutil.rmtree(self.own_dir, ignore_errors=True)
            self.own_dir = None


LIVE_STEPS_MIN_INTERVAL_S = 0.5
"""The step gauges re-read the step files at most this often (each look sums every step)."""


@contextlib.contextmanager
def efficiency_around(args: argparse.Namespace) -> Iterator[Finish]:
    """Measure host energy (and serve Prometheus) around the job; yield the Run finisher.

    Under ``--prometheus`` the step gauges (step time, phases, MFU on a GPU) follow the
    job as it writes its steps (``integrations.live_steps``); the job's profile must then
    write them into the finisher's ``steps_dir``.
    """
    from gpuwise.efficiency.sections import HostEnergy

    host = HostEnergy()
    exporter = None
    if getattr(args, "prometheus", None):
        from gpuwise.integrations.prometheus import serve_device_metrics

        exporter = serve_device_metrics(args.prometheus, interval_s=args.interval)
    finish = None
    try:
        finish = Finish(args, host, exporter)
        host.start()
        yield finish
    finally:
        if finish is not None:
            finish.close()
        if exporter is not None:
            exporter.close()
