"""Flags and wiring shared by ``profile``: energy, MFU and the Prometheus endpoint."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from gpuwise.cli._common import number

if TYPE_CHECKING:
    from gpuwise.records import Run


def add_efficiency_flags(parser: argparse.ArgumentParser) -> None:
    """Declare ``--flops-per-sample``, ``--precision`` and ``--prometheus``."""
    parser.add_argument(
        "--flops-per-sample",
        type=number("FLOPs per sample", 1.0),
        metavar="N",
        help="training FLOPs of one sample (from `gpuwise estimate`): adds achieved TFLOP/s "
        "and MFU to the report",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "tf32", "bf16", "fp16"),
        default="fp32",
        help="the run's precision, for the device's peak FLOP/s in MFU (default fp32)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help="serve live device metrics for Prometheus while the job runs "
        "(e.g. 127.0.0.1:9400; needs gpuwise[prometheus])",
    )


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
        return add_efficiency(
            run, host=host, flops_per_sample=args.flops_per_sample, precision=args.precision
        )

    try:
        yield finish
    finally:
        if exporter is not None:
            exporter.close()
