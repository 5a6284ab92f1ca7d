"""Reading the job anatomy of a Run, before any rule judges it (``records.anatomy``).

``read_anatomy`` is the one entry point ``diagnose`` (and through it ``profile``, ``analyze``
and ``try``) calls: facts common to every Run come from ``common``, a profiled job's from
its setup records (``profiled``), an analyzed trace's from its events (``traced``).
"""

from __future__ import annotations

from gpuwise.diagnose.anatomy.common import base_anatomy
from gpuwise.diagnose.anatomy.machine import add_machine_share
from gpuwise.diagnose.anatomy.profiled import add_profiled_facts
from gpuwise.diagnose.anatomy.traced import add_trace_facts
from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy


def read_anatomy(run: Run) -> JobAnatomy:
    """Read what the job is from everything the Run recorded.

    Args:
        run: A Run as ``profile``, ``analyze`` or the API built it (not modified).

    Returns:
        The job's anatomy; facts the Run does not show stay unknown (``None``).

    Example:
        >>> read_anatomy(Run("analyze")).step_unit
        'iteration'
    """
    anatomy = base_anatomy(run)
    add_profiled_facts(anatomy, run)
    add_trace_facts(anatomy, run)
    add_machine_share(anatomy, run)  # after the threads are known
    return anatomy


__all__ = ["read_anatomy"]
