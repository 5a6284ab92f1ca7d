"""Measure a real script without gpuwise: PyTorch's own profiler over a window of steps.

Usage::

    python -m tests.realscripts.measure NAME      # a name from sources.py

The script runs unmodified (``runpy``) in a fresh directory with its generated data. The
profiler (``torch.profiler``, CPU activity) records steps ``WINDOW`` (by optimizer steps;
a script without an optimizer is recorded whole), and the input pipeline's share is read
from the DataLoader's own ``enumerate(DataLoader)#...`` spans and the optimizer's from the
``Optimizer.step#...`` spans PyTorch records. Prints one JSON object: the shares, the mean
step, and the verdict an expert would write from them (the same Amdahl thresholds as the
diagnosis: a stage worth 1.2x, a sixth of the step, is named).
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile

from tests.realscripts.sources import SOURCES, Source

WINDOW = (20, 60)
STAGE_SHARE = 1 / 6


class Window:
    """Start the profiler after the first optimizer steps and stop it after the window."""

    def __init__(self) -> None:
        self.prof = profile(activities=[ProfilerActivity.CPU])
        self.steps = 0
        self.started_s = self.stopped_s = 0.0
        self.active = False

    def stepped(self, *_: Any) -> None:
        self.steps += 1
        if self.steps == WINDOW[0]:
            self.start()
        elif self.steps == WINDOW[1]:
            self.stop()

    def start(self) -> None:
        self.prof.__enter__()
        self.started_s, self.active = time.perf_counter(), True

    def stop(self) -> None:
        if self.active:
            self.stopped_s, self.active = time.perf_counter(), False
            self.prof.__exit__(None, None, None)


def measure(source: Source) -> dict[str, Any]:
    """Run ``source`` once under the window profiler; return its figures and verdict."""
    work = Path(tempfile.mkdtemp(prefix="realscript-"))
    for path in (source.path, *(p for p, _ in source.companions)):
        shutil.copy(source.local.parent / Path(path).name, work)
    if source.data is not None:
        source.data(work)
    window = Window()
    handle = register_optimizer_step_post_hook(window.stepped)
    whole = False
    old = os.getcwd(), list(sys.argv), list(sys.path)
    try:
        os.chdir(work)
        sys.argv = [Path(source.path).name, *source.argv]
        sys.path.insert(0, str(work))
        script = str(work / Path(source.path).name)
        if not source.optimizer:  # no optimizer: record the whole run
            whole = True
            window.start()
        runpy.run_path(script, run_name="__main__")
        window.stop()
    finally:
        os.chdir(old[0])
        sys.argv, sys.path[:] = old[1], old[2]
        handle.remove()
        shutil.rmtree(work, ignore_errors=True)
    return figures(window, whole)


def figures(window: Window, whole: bool) -> dict[str, Any]:
    wall_s = window.stopped_s - window.started_s
    spans = {"data": 0.0, "optimizer": 0.0}
    for event in window.prof.events():
        if event.name.startswith("enumerate(DataLoader)"):
            spans["data"] += event.cpu_time_total / 1e6
        elif event.name.startswith("Optimizer.step#"):
            spans["optimizer"] += event.cpu_time_total / 1e6
    steps = WINDOW[1] - WINDOW[0] if not whole else None
    out: dict[str, Any] = {
        "window_s": round(wall_s, 4),
        "steps": steps,
        "step_mean_s": round(wall_s / steps, 6) if steps else None,
        "data_fraction": round(spans["data"] / wall_s, 4),
        "optimizer_fraction": round(spans["optimizer"] / wall_s, 4),
    }
    out["verdict"] = verdict(out)
    return out


def verdict(f: dict[str, Any]) -> str:
    if f["data_fraction"] >= STAGE_SHARE:
        return "input_bound"
    if f["optimizer_fraction"] >= STAGE_SHARE:
        return "optimizer_bound"
    return "healthy"


def main(argv: list[str]) -> int:
    chosen = [s for s in SOURCES if not argv or s.name in argv]
    missing = [s.name for s in chosen if not s.local.exists()]
    if missing:
        print(f"measure: not fetched: {missing}; run python -m tests.realscripts.fetch")
        return 1
    results = {}
    for source in chosen:
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                results[source.name] = measure(source)
            finally:
                sys.stdout = stdout
        print(json.dumps({source.name: results[source.name]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
