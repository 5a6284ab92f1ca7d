"""Anatomy facts of a profiled job, from the setup its processes recorded.

``profiling.setup_capture`` writes each process's loaders and optimizers (class, ``foreach``
and ``fused`` flags, loader workers and pinned memory) into the Run's ``setup`` section.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy


def add_profiled_facts(anatomy: JobAnatomy, run: Run) -> None:
    """Fill what is applied from the Run's ``setup`` section, when it has one."""
    setup = run.extra.get("setup")
    if not isinstance(setup, Mapping):
        return
    optimizers = [o for o in setup.get("optimizers") or [] if isinstance(o, Mapping)]
    if optimizers:
        first = optimizers[0]
        anatomy.applied["optimizer"] = first.get("class")
        anatomy.applied["optimizer_impl"] = optimizer_impl(first)
        anatomy.evidence["optimizer"] = "setup: the optimizer the script built"
        anatomy.step_unit = "optimizer_step"
    loaders = [ld for ld in setup.get("loaders") or [] if isinstance(ld, Mapping)]
    if loaders:
        anatomy.applied["loader_workers"] = loaders[0].get("num_workers")
        anatomy.applied["pinned_memory"] = loaders[0].get("pin_memory")
        anatomy.evidence["loader"] = "setup: the DataLoader the script built"


def optimizer_impl(record: Mapping[str, Any]) -> str | None:
    """``"fused"``, ``"foreach"`` or ``"for-loop"`` from an optimizer's recorded flags.

    ``None`` when neither flag was recorded: PyTorch then picks foreach by device, which
    the record alone cannot tell.
    """
    if record.get("fused") is True:
        return "fused"
    if record.get("foreach") is True:
        return "foreach"
    if record.get("foreach") is False:
        return "for-loop"
    return None
