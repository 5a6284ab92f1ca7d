"""The live monitor's process table: columns, order, filter and the tree of children.

One row per process with a context on a GPU (or, on a machine without one, per busy host
process): device, pid, user, GPU memory and SM share from NVML, then CPU %, host resident
memory, time since it started and a short command from ``psutil``
(``telemetry.proc_stats``). In tree view each process is followed by the processes it
started (DataLoader workers, a launcher's ranks), indented under it. Nothing here reads a
process; the rows come in a ``ProcessTable``. Lines are ``(text, style)`` pieces
(``report.monitor.spans``).

Example:
    >>> from gpuwise.report.monitor.spans import plain
    >>> rows = [DeviceProcess("gpu0", 7, 2 << 30, 40.0, "amy", "python train.py")]
    >>> [plain(line) for line in process_lines(ProcessTable(rows), width=80)][1].split()[:4]
    ['gpu0', '7', 'amy', '2.0']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuwise.report.monitor.spans import Line
from gpuwise.report.units import format_bytes
from gpuwise.telemetry.nvml_procs import DeviceProcess
from gpuwise.telemetry.proc_stats import INTERPRETERS

SORT_KEYS = ("memory", "sm", "cpu", "rss", "time", "pid", "user", "device", "command")
"""Process table orders; the keys ``<`` and ``>`` step through them in this order."""

_LARGEST_FIRST: dict[str, Callable[[DeviceProcess], float | None]] = {
    "memory": lambda p: None if p.memory_bytes is None else float(p.memory_bytes),
    "sm": lambda p: p.sm_pct,
    "cpu": lambda p: p.cpu_pct,
    "rss": lambda p: None if p.rss_bytes is None else float(p.rss_bytes),
    "time": lambda p: None if p.started_epoch_s is None else -p.started_epoch_s,
}
"""Numeric orders, largest first (``time``: the longest running first); n/a goes last."""


@dataclass
class ProcessTable:
    """The rows of one frame's process table, and how to show them.

    Attributes:
        processes: The listed processes (GPU processes, or busy host processes).
        children: In tree view, each listed pid's descendants (depth first).
        sort: One of ``SORT_KEYS``.
        filter: Only rows whose pid, user, device or command holds this text (any case).
        tree: Show each process's children under it.
        now_epoch_s: Wall-clock time of the frame, for each process's elapsed time.
        gpu: Whether the rows are GPU processes (GPU memory and SM columns are shown).
    """

    processes: Sequence[DeviceProcess] = ()
    children: dict[int, list[DeviceProcess]] = field(default_factory=dict)
    sort: str = "memory"
    filter: str = ""
    tree: bool = False
    now_epoch_s: float | None = None
    gpu: bool = True


def sort_processes(procs: Sequence[DeviceProcess], key: str) -> list[DeviceProcess]:
    """Processes in ``key`` order: numbers largest first (n/a last), the rest ascending."""
    if key in _LARGEST_FIRST:
        value = _LARGEST_FIRST[key]
        return sorted(procs, key=lambda p: (value(p) is None, -(value(p) or 0.0), p.pid))
    if key in ("user", "command", "device"):
        return sorted(procs, key=lambda p: (str(getattr(p, key) or "~"), p.pid))
    if key == "pid":
        return sorted(procs, key=lambda p: (p.pid, p.device))
    raise ValueError(f"unknown sort key {key!r}; one of {', '.join(SORT_KEYS)}")


def matches(proc: DeviceProcess, text: str) -> bool:
    """Whether the process's pid, user, device or command holds ``text`` (any case)."""
    if not text:
        return True
    fields = (str(proc.pid), proc.user or "", proc.device, proc.command or "")
    return any(text.lower() in f.lower() for f in fields)


def format_elapsed(seconds: float | None) -> str:
    """``0:42``, ``12:03``, ``3:02:01``, ``4d 03:12``; ``n/a`` when unknown."""
    if seconds is None:
        return "n/a"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _cells(p: DeviceProcess, table: ProcessTable, depth: int = 0) -> list[str]:
    started, now = p.started_epoch_s, table.now_epoch_s
    elapsed = None if started is None or now is None else now - started
    command = p.command or "n/a (not visible from here)"
    if depth:
        command = "  " * (depth - 1) + "└ " + command
    gpu = [
        "" if depth else format_bytes(p.memory_bytes),
        "" if depth else ("n/a" if p.sm_pct is None else f"{p.sm_pct:.0f} %"),
    ]
    return [
        "" if depth else p.device,
        str(p.pid),
        (p.user or "n/a")[:12],
        *(gpu if table.gpu else []),
        "n/a" if p.cpu_pct is None else f"{p.cpu_pct:.0f} %",
        format_bytes(p.rss_bytes),
        format_elapsed(elapsed),
        command,
    ]


def _head(table: ProcessTable) -> list[str]:
    names = ["device", "pid", "user", *(["GPU mem", "SM"] if table.gpu else [])]
    names += ["CPU", "host mem", "time", "command"]
    keys = ["device", "pid", "user", *(["memory", "sm"] if table.gpu else [])]
    keys += ["cpu", "rss", "time", "command"]
    return [f"{n}▼" if k == table.sort else n for n, k in zip(names, keys, strict=True)]


def _depth(proc: DeviceProcess, root: int, by_pid: dict[int, DeviceProcess]) -> int:
    depth, ppid = 1, proc.ppid
    while ppid is not None and ppid != root and ppid in by_pid and depth < 16:
        depth, ppid = depth + 1, by_pid[ppid].ppid
    return depth


def table_rows(table: ProcessTable) -> list[tuple[list[str], bool]]:
    """Each shown row's cells, in order, with whether it is a child in tree view."""
    shown = [p for p in table.processes if matches(p, table.filter)]
    rows: list[tuple[list[str], bool]] = []
    for proc in sort_processes(shown, table.sort):
        rows.append((_cells(proc, table), False))
        if table.tree:
            kids = table.children.get(proc.pid, [])
            by_pid = {k.pid: k for k in kids}
            rows += [(_cells(k, table, _depth(k, proc.pid, by_pid)), True) for k in kids]
    return rows


def fit_command(command: str, room: int) -> str:
    """A command cut to ``room`` cells; when it is too long, the script's name comes first.

    ``python3.11 ~/job/train.py --lr 3e-4`` in 16 cells is ``train.py --lr 3…``: the
    script says which job it is, the interpreter's name does not.
    """
    if len(command) > room:
        words = command.split(" ")
        if len(words) > 1 and words[0].startswith(INTERPRETERS) and not words[1].startswith("-"):
            command = " ".join([os.path.basename(words[1]) or words[1], *words[2:]])
    return command if len(command) <= room else command[: room - 1] + "…"


def process_lines(table: ProcessTable, width: int = 120, rows: int | None = None) -> list[Line]:
    """The process table: a header and a line per row (``rows`` at most), cut to ``width``."""
    if not table.processes:
        what = "no compute processes on these GPUs" if table.gpu else "no process visible from here"
        return [[(what, "dim")]]
    shown = table_rows(table)
    head = _head(table)
    if rows is not None and len(shown) > rows:
        more = [*[""] * (len(head) - 1), f"… and {len(shown) - rows + 1} more (a taller terminal)"]
        shown = [*shown[: rows - 1], (more, True)]
    if not shown:
        return [[(" ".join(head), "bold")], [(f"no process matches '{table.filter}'", "dim")]]
    widths = [
        max(len(r[i]) for r in [head, *(cells for cells, _ in shown)]) for i in range(len(head) - 1)
    ]
    room = max(width - sum(widths) - len(widths), 10)
    left = {0, 2, len(head) - 1}

    def line(cells: list[str], style: str = "") -> Line:
        command = fit_command(cells[-1], room)
        parts = [
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return [(" ".join([*parts, command]), style)]

    return [line(head, "bold"), *(line(cells, "dim" if child else "") for cells, child in shown)]
