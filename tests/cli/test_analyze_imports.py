"""``gpuwise analyze --json`` imports only what it uses: start-up is most of a small trace's time.

Measured with ``python -X importtime -m gpuwise analyze TRACE --json``: building every
subcommand's parser imported the live monitor's view (rich, NVML process records, ~0.1 s),
writing no file imported the HTML report (~0.06 s), a one-process trace imported the
recording code for a cross-rank view it does not have (~0.03 s), and ``np.median`` imported
``numpy.ma`` (~0.02 s), as did ``np.isin`` on a trace without device events. Each is checked
absent after a real run in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trace_events import event, kernel, write_trace

NOT_NEEDED = (
    "gpuwise.report.monitor.view",
    "gpuwise.report.html.run",
    "gpuwise.profiling.recording",
    "gpuwise.cli.monitor.command",
    "numpy.ma",
)

CHILD = """
import json, sys
from gpuwise.cli.main import main
code = main(["analyze", sys.argv[1], "--json"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


@pytest.mark.parametrize("device", [True, False], ids=["inference", "cpu-only"])
def test_analyze_json_leaves_unused_modules_unimported(tmp_path: Path, device: bool) -> None:
    # an inference trace with recorded shapes: its forward steps and batches are read too
    events = [
        event("cpu_op", "aten::embedding", 30 * i, 2, **{"Input Dims": [[10, 4], [2, 1 + i % 2]]})
        for i in range(20)
    ]
    if device:
        events += [kernel("ampere_sgemm_128x64_nn", 10 + 30 * i, 20, 7) for i in range(20)]
    path = write_trace(tmp_path, events)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    doc = json.loads(out.stderr.strip().splitlines()[-1])
    assert doc["code"] == 0
    assert json.loads(out.stdout)["schema"] == "gpuwise.run/1"
    loaded = set(doc["modules"])
    assert "gpuwise.telemetry.readers.kineto" in loaded  # it did read the trace
    if device:
        assert "gpuwise.telemetry.readers.kineto.job.serving" in loaded
    assert [m for m in NOT_NEEDED if m in loaded] == []


THREADS = """
import os, sys
from gpuwise.cli.main import main
if sys.argv[1] != "-":
    assert main(["analyze", sys.argv[1], "--json"]) == 0
else:
    import numpy
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"), file=sys.stderr)
"""


def _threads_after(what: str, **env: str) -> tuple[int, str | None]:
    child_env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env
    out = subprocess.run(
        [sys.executable, "-c", THREADS, what],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=child_env,
    )
    count, value = out.stderr.strip().splitlines()[-1].split()
    return int(count), None if value == "None" else value


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_analyze_starts_no_blas_threads_and_leaves_the_environment(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path, [kernel("ampere_sgemm_128x64_nn", 30 * i, 20, 7) for i in range(9)]
    )
    plain, _ = _threads_after("-")
    if plain == 1:
        why = "one usable core, or OMP_NUM_THREADS=1"
        pytest.skip(f"numpy starts no BLAS thread here ({why}): nothing to compare")
    assert _threads_after(str(path)) == (1, None)  # the variable was set for the import only
    assert _threads_after(str(path), OPENBLAS_NUM_THREADS="2") == (2, "2")  # the user's kept
