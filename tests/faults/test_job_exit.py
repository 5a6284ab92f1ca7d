"""The job's exit code when gloo aborts a rank at interpreter exit.

Promise: when torchrun exits non-zero only because a rank aborted after its script had
ended ("terminate called without an active exception", seen 3 times in 8 plain torchrun
runs on these machines), gpuwise exits with the scripts' own code, 0, and says why in
``meta.exit_note``; any rank that did not end cleanly with 0 keeps the launcher's code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.profiling.runner import _scripts_code


def _rank_file(folder: Path, rank: int, end: dict[str, Any] | None) -> None:
    lines = [{"type": "rank", "rank": rank, "world_size": 2, "pid": 100 + rank, "t_s": 0.0}]
    if end is not None:
        lines.append({"type": "end", "t_s": 1.0, "detail": None, **end})
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (folder / f"ranks-{rank}-{100 + rank}.jsonl").write_text(text)


CLEAN = {"how": "exit", "exit_code": 0}


@pytest.mark.parametrize(
    ("ends", "expected"),
    [
        ([CLEAN, CLEAN], 0),  # both scripts ended with 0: the abort came after
        ([CLEAN, {"how": "exit", "exit_code": 3}], 1),  # a script's own sys.exit(3)
        ([CLEAN, {"how": "exception", "detail": "RuntimeError: x"}], 1),
        ([CLEAN, {"how": "signal", "detail": "SIGTERM"}], 1),
        ([CLEAN, None], 1),  # killed outright: no end record
        ([CLEAN], 1),  # rank 1 never started
    ],
)
def test_teardown_abort_keeps_the_scripts_code(
    tmp_path: Path, ends: list[dict[str, Any] | None], expected: int
) -> None:
    for rank, end in enumerate(ends):
        _rank_file(tmp_path, rank, end)
    meta: dict[str, Any] = {}
    assert _scripts_code(1, str(tmp_path), meta) == expected
    assert ("exit_note" in meta) == (expected == 0)


def test_a_plain_command_keeps_its_code(tmp_path: Path) -> None:
    meta: dict[str, Any] = {}
    assert _scripts_code(7, str(tmp_path), meta) == 7
    assert meta == {}
