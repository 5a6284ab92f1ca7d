"""Real training scripts written by others, profiled unmodified through ``gpuwise profile``.

The scripts are fetched at pinned commits by ``fetch.py`` (see ``sources.py``); without
them every test here skips and says how to fetch them. Each expected verdict was written
down from ``measure.py``'s separate measurement before gpuwise's verdict was read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.realscripts.sources import SOURCES, Source
from tests.realscripts.table import format_row

pytestmark = pytest.mark.slow

TIMEOUT_S = 300


def profiled(source: Source, work: Path) -> dict[str, Any]:
    if not source.local.exists():
        pytest.skip(f"{source.repo}:{source.path} not fetched: python -m tests.realscripts.fetch")
    for path in (source.path, *(p for p, _ in source.companions)):
        shutil.copy(source.local.parent / Path(path).name, work)
    if source.data is not None:
        source.data(work)
    script = Path(source.path).name
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--shared-machine", "judge", "--"]
    cmd += [sys.executable, script, *source.argv]
    done = subprocess.run(
        cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def measured_here(source: Source) -> dict[str, Any]:
    """``measure.py``'s separate measurement, run now on this machine."""
    cmd = [sys.executable, "-m", "tests.realscripts.measure", source.name]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1])[source.name])


@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_real_script_gets_the_expected_verdict(source: Source, tmp_path: Path) -> None:
    run = profiled(source, tmp_path)
    print(f"\n{format_row(source, run)}")  # the README table's row (pytest -s shows it)
    steps = run["steps"]
    assert steps["count"] >= 10
    assert run["findings"][0]["kind"] == source.expected, run["findings"][0]["summary"]
    split = steps["compute_split"]
    assert split is not None
    assert sum(split.values()) == pytest.approx(steps["fractions"]["compute"], abs=0.02)
    measured = measured_here(source)["optimizer_fraction"]
    # a different instrument (the profiler's spans, CPU time) in the same session on this
    # machine, not the figure recorded in sources.py: the same order, not the same figure
    assert split["optimizer"] == pytest.approx(measured, abs=max(0.1, measured * 0.5))
