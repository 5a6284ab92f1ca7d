"""First launches that load code are start-up, not launch overhead (issue 44 #3).

The trace has the shape of a held-out micro-test on an AMD card: five single launch calls
of 100 to 330 ms (each a kernel's first launch: the runtime loads its code object while the
device has nothing to run), then the test itself, 150 launches 12 µs apart of 6 µs
kernels, then a 50 ms synchronisation; no step, no optimizer, no host op but the runtime
calls. Read whole, the device idles 99.9 % of a 1.06 s window "waiting for the host" and
the job reads as launch-bound, up to 100x, with an optimizer fix; the loads are one-time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.telemetry.readers.kineto import read_trace
from tests.trace_events import event, kernel, write_trace

MS = 1000.0
LOADS_MS = (330, 250, 180, 150, 100)
T0 = 1_000_000.0


def _micro_test(folder: Path) -> Path:
    events: list[dict[str, Any]] = []
    t, corr = T0, 0
    for load in LOADS_MS:
        corr += 1
        events.append(event("cuda_runtime", "hipLaunchKernel", t, load * MS, correlation=corr))
        events.append(kernel("Cijk_Ailk_Bljk_SB_MT64x64x8", t + load * MS + 10, 25, 0, corr))
        t += load * MS + 40
    for _ in range(150):
        corr += 1
        events.append(event("cuda_runtime", "hipLaunchKernel", t, 10, correlation=corr))
        events.append(kernel("elementwise_kernel", t + 11, 6, 0, corr))
        t += 12
    events.append(event("cuda_runtime", "hipDeviceSynchronize", t, 50 * MS))
    props = [{"id": 0, "name": "AMD Instinct MI250X", "gcnArchName": "gfx90a"}]
    return write_trace(folder, events, deviceProperties=props)


# Facts of the events above, computed by hand:
# the last load returns at T0 + (330+250+180+150) ms + 4 * 40 µs + 100 ms.
LAST_LOAD_END = T0 + sum(LOADS_MS) * MS + 4 * 40
FIRST_AFTER = LAST_LOAD_END + 10  # its kernel: the first device work after the loads
LAST_END = LAST_LOAD_END + 40 + 149 * 12 + 11 + 6  # the 150th small kernel's end


def test_the_window_starts_after_the_loading_launches(tmp_path: Path) -> None:
    tr = read_trace(_micro_test(tmp_path))
    assert tr.window_source == "device_span"
    assert tr.window_s == pytest.approx((LAST_END - FIRST_AFTER) * 1e-6, abs=1e-9)
    assert tr.facts is not None
    ex = tr.facts.excerpt
    assert ex["first_launches"] == 5
    assert ex["first_launches_s"] == pytest.approx(sum(LOADS_MS) * 1e-3)
    assert ex["startup_s"] == pytest.approx((LAST_LOAD_END - T0) * 1e-6)
    # the window holds the loads' last kernel and the test's 150
    assert tr.facts.steady_events == 151


def test_a_micro_test_is_not_launch_bound_by_its_first_launches(tmp_path: Path) -> None:
    run = analyze([_micro_test(tmp_path)])
    kinds = {f.kind: f for f in run.findings}
    startup = kinds["startup_costs"]
    assert startup.evidence["first_launches"] == 5
    assert startup.evidence["longest_launch_s"] == pytest.approx(0.330)
    # the 150 launches keep the device half busy (6 µs of every 12): a bound of about 2x,
    # not the 100x of a window that is mostly code loading
    bounds = [f.max_speedup for f in run.findings if f.max_speedup is not None]
    assert bounds
    assert max(bounds) < 2.5
    hows = " ".join(x.action + " " + x.how for f in run.findings for x in f.fixes)
    assert "optimizer" not in hows.lower()  # nothing in the trace steps an optimizer
