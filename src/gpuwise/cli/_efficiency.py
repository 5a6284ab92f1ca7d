"""Flags and wiring shared by ``profile``: energy, MFU and the Prometheus endpoint."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

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


@contextlib.contextmanager
def efficiency_around(args: argparse.Namespace) -> Iterator[Callable[[Run], Run]]:
    """Measure host energy (and serve Prometheus) around the job; yield the Run finisher."""
    from gpuwise.sizing.efficiency import HostEnergy, add_efficiency

    host = HostEnergy()
    exporter = None
    if getattr(args, "prometheus", None):
        from gpuwise.integrations.prometheus import serve_device_metrics

        exporter = serve_device_metrics(args.prometheus, interval_s=args.interval)
    host.start()

    def finish(run: Run) -> Run:
        host.stop()
        add_efficiency(
            run, host=host, flops_per_sample=args.flops_per_sample, precision=args.precision
        )
        if exporter is not None:  # the step gauges (MFU, tokens/s) once the Run is known
            from gpuwise.integrations.prometheus import run_step_metrics

            exporter.server.metrics.update_steps(run_step_metrics(run))
        return run

    try:
        yield finish
    finally:
        if exporter is not None:
            exporter.close()
