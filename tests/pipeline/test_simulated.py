"""The simulated GPU: holds a batch for its cost without the CPU, and serves like a model.

Properties only (no wall-clock speed): a call lasts at least its cost; while it lasts the
process uses little CPU and another Python thread runs (the GIL is released); every
request through a ``Pipeline`` on it is answered exactly once, in input order.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gpuwise.errors import UsageError
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench.example import ServingApp
from gpuwise.pipeline.device.simulated import DeviceCost, SimulatedGpu, on_simulated_gpu


def test_the_cost_of_a_batch_is_launch_plus_rows():
    cost = DeviceCost(0.0018, 0.000027)
    assert cost.batch_s(16) == pytest.approx(0.0018 + 16 * 0.000027)
    with pytest.raises(UsageError, match="launch_s >= 0"):
        DeviceCost(-1.0, 0.0)


def test_a_call_holds_its_cost_and_returns_a_row_per_input():
    gpu = SimulatedGpu(DeviceCost(0.05, 0.01), classes=10)
    batch = torch.arange(4 * 3, dtype=torch.uint8).reshape(4, 3)
    t0 = time.perf_counter()
    out = gpu(batch)
    held_s = time.perf_counter() - t0
    assert held_s >= 0.05 + 4 * 0.01  # sleep lasts at least its time, on any machine
    assert out.shape == (4, 10)
    assert out.dtype == torch.float32
    # a row's logits follow its input: rows 0..3 start with 0, 3, 6, 9
    assert (out[:, 0] - out[0, 0]).tolist() == pytest.approx(
        [0, 3 / 255, 6 / 255, 9 / 255], abs=1e-6
    )
    assert gpu.batches == [4]


def test_the_device_holds_no_cpu_and_releases_the_gil():
    gpu = SimulatedGpu(DeviceCost(0.3, 0.0))
    spins = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            spins[0] += 1

    cpu0 = time.thread_time()
    other = threading.Thread(target=spin)
    other.start()
    try:
        gpu(torch.zeros(2, 8, dtype=torch.uint8))
    finally:
        stop.set()
        other.join()
    # this thread used almost no CPU while the device held its 0.3 s (a sleeping thread
    # gets no CPU however busy the machine is) and the other thread ran meanwhile
    assert time.thread_time() - cpu0 < 0.1
    assert spins[0] > 0


def _app(cost: DeviceCost) -> ServingApp:
    def pre(i: int) -> torch.Tensor:
        return torch.full((4,), i % 200, dtype=torch.uint8)

    def post(row: torch.Tensor) -> int:
        return round(float(row[0] - row[0].new_tensor(-3.0)) * 255)

    def not_the_model(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the simulated GPU replaces the model")

    return ServingApp("ints", pre, not_the_model, post, lambda i: i, transform=torch.neg)


def test_a_pipeline_on_it_answers_every_request_once_in_order():
    app = on_simulated_gpu(_app(DeviceCost(0.0, 0.0)), DeviceCost(0.002, 0.0001))
    assert app.transform is None  # its time is the device's
    assert "simulated GPU: 2 ms + 100 us a sample" in app.name
    with Pipeline(app.pre, app.model, app.post, max_batch=8, max_delay_ms=1) as pipe:
        results = list(pipe.map(range(300)))
        counts = pipe.counts()
    assert results == [i % 200 for i in range(300)]
    assert counts["ok"] == 300
    assert sum(app.model.batches) == 300  # type: ignore[attr-defined]
    assert max(app.model.batches) <= 8  # type: ignore[attr-defined]
