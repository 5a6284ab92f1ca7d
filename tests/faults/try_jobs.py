"""Jobs for ``gpuwise try`` fault tests: an input-bound loop with one misbehaviour each.

Every run appends its label (``baseline``, ``loader_workers#1``, ...) to ``runs.txt`` beside
the script, so a test sees which runs started. ``MODE`` picks the misbehaviour:

- ``plain``: none (a test signals gpuwise while a chosen run is going);
- ``once``: the job refuses to run a second time (it leaves ``done.txt`` and fails when it
  finds one), as a job that reads stdin or refuses an existing output does;
- ``hang``: trial runs (not the unchanged job's) catch the ``SystemExit`` that ends them
  and loop for good.
"""

from __future__ import annotations

from pathlib import Path

JOB = """\
import json, os, sys, time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

HERE = Path(__file__).parent
LABEL = json.loads(os.environ.get("GPUWISE_TRIAL") or "{{}}").get("name", "alone")
with open(HERE / "runs.txt", "a") as fh:
    fh.write(f"{{LABEL}} {{os.getpid()}}\\n")
MODE = {mode!r}
if MODE == "once":
    if (HERE / "done.txt").exists():
        sys.exit("done.txt exists: this job runs once")
    (HERE / "done.txt").write_text("1")


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep({sleep_s})  # a remote read: the loop waits for every batch
        return torch.ones(4), torch.ones(1)


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    try:
        for x, y in DataLoader(Slow(), batch_size=4):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        break
    except SystemExit:
        if MODE != "hang" or LABEL.startswith("baseline"):
            raise
        while True:
            time.sleep(0.1)
"""


def write_job(folder: Path, mode: str = "plain", sleep_s: float = 0.005) -> Path:
    """``folder/job.py`` in ``mode`` (see the module note); return its path."""
    path = folder / "job.py"
    path.write_text(JOB.format(mode=mode, sleep_s=sleep_s))
    return path


def runs(folder: Path) -> list[tuple[str, int]]:
    """``(label, pid)`` of the runs started so far, in order."""
    path = folder / "runs.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(label, int(pid)) for label, pid in (line.split() for line in lines)]
