"""``gpuwise doctor``: the devices, the PyTorch build, and whether one can use the other."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import add_fake, add_json
from gpuwise.cli._common import guard, make_console, print_json

if TYPE_CHECKING:
    from rich.console import Console

HELP = "check the GPUs, driver and PyTorch build: can this job use the GPU, and if not why"
EXAMPLES = """\
  gpuwise doctor              devices, driver, PyTorch build, findings with fixes
  gpuwise doctor --json       the same as one JSON object
  gpuwise doctor --fake 2     see the GPU checks with 2 simulated GPUs (no GPU needed)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise doctor``."""
    add_json(parser, "gpuwise.doctor/1")
    add_fake(parser)


@guard
def run(args: argparse.Namespace) -> int:
    """Gather the facts, diagnose them, print the report; exit 0 (doctor only informs)."""
    from gpuwise.doctor.environment import doctor_report, gather

    nvml: Any = None
    if args.fake:
        from gpuwise.telemetry.fake import FakeNvml

        nvml = FakeNvml(args.fake)
    doc = doctor_report(gather(nvml=nvml))
    if args.json:
        print_json(doc)
        return 0
    render(doc, make_console())
    return 0


def render(doc: dict[str, Any], console: Console) -> None:
    """Print the doctor report (the ``--json`` object) as text."""
    from gpuwise.records import Finding
    from gpuwise.report.text.run import render_findings

    _render_devices(doc, console)
    _render_torch(doc["torch"], console)
    render_findings([Finding.from_dict(f) for f in doc["findings"]], console)
    _render_container(doc["container"], console)


def _render_devices(doc: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    from gpuwise.report.units import format_bytes

    cpu = doc["cpu"]
    console.print(
        f"[bold]cpu[/]         {cpu['name']} · {cpu['cores']} cores · "
        f"{format_bytes(cpu['memory_total_bytes'])}",
        highlight=False,
    )
    if not doc["devices"]:
        console.print(f"[bold]gpus[/]        none found ({doc['nvml_error']})", highlight=False)
        return
    driver = doc["driver"]
    console.print(
        f"[bold]driver[/]      {driver['version'] or 'n/a'} · runs CUDA <= "
        f"{driver['cuda_version'] or 'n/a'} · found by {doc['gpu_source']}",
        highlight=False,
    )
    table = Table("gpu", "name", "memory", "compute capability", box=None, pad_edge=False)
    for dev in doc["devices"]:
        table.add_row(
            dev["id"],
            dev.get("name") or "n/a",
            format_bytes(dev.get("memory_total_bytes")),
            dev.get("compute_capability") or "n/a",
        )
    console.print(table)


def _render_torch(torch: dict[str, Any], console: Console) -> None:
    if torch["version"] is None:
        console.print(f"[bold]torch[/]       not importable ({torch['error']})", highlight=False)
        return
    build = f"CUDA {torch['cuda']}" if torch["cuda"] else "CPU-only build"
    parts = [torch["version"], build]
    if torch["cuda"]:
        parts += [f"cuDNN {torch['cudnn'] or 'n/a'}", f"NCCL {torch['nccl'] or 'n/a'}"]
        parts.append(f"cuda available: {'yes' if torch['cuda_available'] else 'no'}")
    console.print("[bold]torch[/]       " + " · ".join(parts), highlight=False)
    if torch["arch_list"]:
        console.print("[bold]gpu archs[/]   " + " ".join(torch["arch_list"]), highlight=False)


def _render_container(container: dict[str, Any], console: Console) -> None:
    console.print(f"[bold]container[/]   {container['reason']}", highlight=False)
    if container["ngc_image"]:
        console.print(
            f"   image      {container['ngc_image']}  (CUDA {container['ngc_cuda']}, "
            f"PyTorch {container['ngc_torch']})",
            highlight=False,
        )
    if container["pip_command"]:
        console.print(f"   wheel      {container['pip_command']}", highlight=False)
