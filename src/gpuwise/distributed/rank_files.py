"""One file per rank with what the cross-rank view needs beyond the steps.

A profiled rank (``world_size > 1``) appends JSON lines to
``<profile dir>/ranks-<rank>-<pid>.jsonl``, each flushed as written, so a rank that dies keeps
everything it wrote before:

* ``{"type": "rank", "rank", "world_size", "local_rank", "local_world_size", "node_rank",
  "pid", "cores", "torch_threads", "omp_num_threads", "t_s"}`` — once, at start;
* ``{"type": "ddp", ...}`` — the settings of each ``DistributedDataParallel`` built;
* ``{"type": "comm", ...}`` — one per gradient all-reduce iteration (``gpuwise.distributed.comm``);
* ``{"type": "end", "how": "exit" | "exception" | "signal", "detail", "t_s", "exit_code"}`` —
  how the rank ended (``exit_code``, with ``"exit"`` only: the code ``sys.exit`` was given,
  else 0). A rank killed outright (SIGKILL, a crash in native code, the OOM killer) writes no
  end record: its absence is the evidence.

Times (``t_s`` and the ``*_s`` fields of comm records) are seconds on the Run's clock, the same
as the steps' ``start_s``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NoReturn

from gpuwise.distributed.ranks import RankInfo

FILE_GLOB = "ranks-*.jsonl"


class RankRecorder:
    """Append this rank's facts to its rank file (and keep them in ``records``).

    Args:
        directory: Where the runner collects the files; ``None`` keeps records in memory only.
        info: This process's rank facts.
        origin_s: Clock reading that is time 0 of the Run.
        clock: Seconds clock (default ``time.perf_counter``, the steps' clock).

    Attributes:
        records: Every record written, in order.
    """

    def __init__(
        self,
        directory: str | Path | None,
        info: RankInfo,
        *,
        origin_s: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.info = info
        self.pid = os.getpid()
        self.origin_s = origin_s
        self.clock = clock
        self.records: list[dict[str, Any]] = []
        self.exception: str | None = None
        self.exit_status: str | int | None = (
            None  # the argument of sys.exit, when the script called it
        )
        self._lock = threading.Lock()
        self._closed = False
        self._file: IO[str] | None = None
        if directory is not None:
            path = Path(directory) / f"ranks-{info.rank}-{self.pid}.jsonl"
            self._file = path.open("a", encoding="utf-8")

    def now_s(self) -> float:
        """Seconds on the Run's clock."""
        return self.clock() - self.origin_s

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (thread-safe; ignored after ``close`` or in a forked child)."""
        with self._lock:
            if self._closed or os.getpid() != self.pid:
                return
            self.records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()

    def start(self) -> None:
        """Write the rank record: position in the job, cores and thread settings."""
        import torch

        self.write(
            {
                "type": "rank",
                "rank": self.info.rank,
                "world_size": self.info.world_size,
                "local_rank": self.info.local_rank,
                "local_world_size": self.info.local_world_size,
                "node_rank": self.info.node_rank,
                "pid": self.pid,
                "cores": len(os.sched_getaffinity(0)),
                "torch_threads": torch.get_num_threads(),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                "t_s": self.now_s(),
            }
        )

    def close(self, how: str = "exit", detail: str | None = None) -> None:
        """Write the end record once and close the file.

        Args:
            how: ``"exit"``, ``"exception"`` (an uncaught exception was seen) or ``"signal"``.
            detail: The exception or signal, when known.
        """
        if self.exception is not None and how == "exit":
            how, detail = "exception", self.exception
        end = {"type": "end", "how": how, "detail": detail, "t_s": self.now_s()}
        if how == "exit":  # what the script itself ended with (sys.exit's code, else 0)
            status = self.exit_status
            end["exit_code"] = status if isinstance(status, int) else int(status is not None)
        self.write(end)
        with self._lock:
            self._closed = True
            if self._file is not None and os.getpid() == self.pid:
                self._file.close()
            self._file = None


def watch_exit(recorder: RankRecorder, before_close: Callable[[], None]) -> None:
    """Write the end record however the rank ends: exit, uncaught exception or SIGTERM.

    SIGTERM is what torchrun sends the surviving ranks when one fails; the handler writes
    the record, then lets the default action end the process as it would have. It is
    installed only when SIGTERM still has its default action and this is the main thread.

    Args:
        recorder: This rank's recorder.
        before_close: Called first at every ending (flushes pending communication records).
    """

    def finish(how: str, detail: str | None) -> None:
        with contextlib.suppress(Exception):  # a failing hook must not mask the real ending
            before_close()
        recorder.close(how, detail)

    atexit.register(finish, "exit", None)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
        recorder.exception = f"{kind.__name__}: {err}"[:500]
        previous_hook(kind, err, tb)

    sys.excepthook = excepthook
    real_exit = sys.exit

    def exit_(status: str | int | None = None) -> NoReturn:
        recorder.exit_status = status
        real_exit(status)

    sys.exit = exit_
    _on_sigterm(recorder, lambda: finish("signal", "SIGTERM"))


def _on_sigterm(recorder: RankRecorder, finish: Callable[[], None]) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the script (or a library) handles SIGTERM itself: leave it alone

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() == recorder.pid:
            finish()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def read_rank_files(directory: str | Path) -> list[dict[str, Any]]:
    """Read every rank file in ``directory``; unreadable lines are skipped.

    Args:
        directory: The profile directory.

    Returns:
        One dict per file, ordered by rank: ``{"rank", "pid", "header", "ddp": [...],
        "comm": [...], "end": dict | None, "skipped_lines": int}``.
    """
    out = [_read_one(p) for p in Path(directory).glob(FILE_GLOB)]
    return sorted(out, key=lambda r: (r["rank"], r["pid"] or 0))


def _read_one(path: Path) -> dict[str, Any]:
    parts = path.stem.split("-")
    facts: dict[str, Any] = {"rank": _int(parts, 1), "pid": _int(parts, 2), "header": None}
    facts.update({"ddp": [], "comm": [], "end": None, "skipped_lines": 0})
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
            kind = record["type"]
        except (ValueError, TypeError, KeyError):
            facts["skipped_lines"] += 1  # a rank killed mid-write cuts its last line short
            continue
        if kind == "rank":
            facts["header"] = record
        elif kind in ("ddp", "comm"):
            facts[kind].append(record)
        elif kind == "end":
            facts["end"] = record
    return facts


def _int(parts: list[str], index: int) -> int:
    try:
        return int(parts[index])
    except (IndexError, ValueError):
        return -1
