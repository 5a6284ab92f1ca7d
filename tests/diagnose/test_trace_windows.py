"""Every share of a trace is taken over one window (issue 44 #2).

The trace is written here event by event: 21 pageable copies of 30 ms during start-up,
then 20 training iterations (a 1 ms pageable copy, 20 ms forward, 40 ms backward, a 2 ms
SGD step) with no ProfilerStep marks. Start-up's 630 ms of copies are one-time costs; the
steady steps copy 1 ms in each 63 ms step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from tests.trace_events import event, kernel, write_trace

MS = 1000.0


def _startup_copies_trace(folder: Path) -> Path:
    events: list[dict[str, Any]] = []
    t, corr = 1_000_000.0, 1

    def copy(t: float, ms: float, nbytes: int) -> float:
        nonlocal corr
        events.append(event("cuda_runtime", "cudaMemcpyAsync", t, 20, correlation=corr))
        name = "Memcpy HtoD (Pageable -> Device)"
        events.append(
            event("gpu_memcpy", name, t + 30, ms * MS, stream=7, correlation=corr, bytes=nbytes)
        )
        corr += 1
        return t + 30 + ms * MS

    for _ in range(21):
        t = copy(t, 30.0, 300_000_000)
    for _ in range(20):
        t = copy(t, 1.0, 10_000_000)
        events.append(event("cpu_op", "aten::linear", t, 20 * MS))
        events.append(kernel("ampere_sgemm_128x64_nn", t + 10, 20 * MS - 20, 7))
        t += 20 * MS
        loss = "autograd::engine::evaluate_function: MseLossBackward0"
        events.append(event("cpu_op", loss, t, 40 * MS))
        events.append(kernel("ampere_sgemm_128x64_tn", t + 10, 40 * MS - 20, 7))
        t += 40 * MS
        events.append(event("cpu_op", "Optimizer.step#SGD.step", t, 2 * MS))
        events.append(kernel("multi_tensor_apply_kernel", t + 10, 2 * MS - 20, 7))
        t += 2 * MS
    return write_trace(folder, events)


def test_startup_copies_are_not_divided_by_the_steady_busy_time(tmp_path: Path) -> None:
    run = analyze([_startup_copies_trace(tmp_path)])
    # 20 optimizer steps end 19 whole steps between them (the first is start-up)
    assert len(run.steps) == 19
    found = {f.kind: f for f in run.findings}
    copies = found["pageable_h2d"]
    # each steady step: a 1 ms copy (30 µs after the previous step) in 1 + 62 ms + 30 µs
    assert copies.evidence["h2d_fraction"] == pytest.approx(1.0 / 63.03, abs=2e-4)
    assert copies.severity == "info"
