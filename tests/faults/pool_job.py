"""A parent that reads files on gpuwise's worker pool, each read noting its pid, then hanging.

``python -m tests.faults.pool_job DIR`` starts two workers; each writes ``DIR/<pid>.pid`` and
sleeps. The test kills this parent and checks that the workers die with it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gpuwise.distributed.file_pool import map_files


def note_and_hang(path: str) -> int:
    """Write this worker's pid beside ``path``, then sleep far longer than the test waits."""
    Path(path).with_name(f"{os.getpid()}.pid").write_text("", encoding="utf-8")
    time.sleep(120)
    return 0


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    inputs = [str(folder / f"in{i}") for i in range(2)]
    map_files(note_and_hang, inputs, jobs=2)
