"""The benchmark's plain servers (``benchmarks/_plain_servers.py``): static batching ends.

A closed loop's clients stop as the measured window closes, so the last batch a static
server sees is partial; the server must still answer it (it waited for a full batch
forever, and the load then waited 120 s and failed the benchmark as "stuck").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _plain_servers import OneThreadServer

from gpuwise.pipeline import ServingApp


def _app() -> ServingApp:
    return ServingApp(
        "doubles",
        pre=lambda i: np.full((2,), i, dtype=np.int64),
        model=lambda x: x * 2,
        post=lambda row: int(row[0]),
        make_input=lambda i: i,
    )


def test_a_static_server_answers_the_partial_batch_left_when_the_load_ends():
    server = OneThreadServer(_app(), batch=4, threads=torch.get_num_threads())
    try:
        full = [server.submit(i) for i in range(4)]
        partial = [server.submit(i) for i in (10, 11, 12)]  # then no more requests come
        assert [f.result(timeout=30) for f in full] == [0, 2, 4, 6]
        assert [f.result(timeout=30) for f in partial] == [20, 22, 24]
    finally:
        server.close()
    assert server.served == 7


def test_the_pipeline_is_tuned_to_static_batchings_p99_where_that_is_lower():
    import serving

    def row(label: str, *runs: tuple[float, float]) -> list:
        return [label, None, 8, [{"throughput_per_s": t, "p99_s": p} for t, p in runs]]

    scored = {
        "static batching": [
            row("B=8", (300.0, 0.040), (320.0, 0.050), (310.0, 0.045)),  # median p99 45 ms
            row("B=16", (400.0, 0.150)),  # over the 100 ms target
        ],
        "gpuwise Pipeline": [row("fast", (500.0, 0.080)), row("tight", (350.0, 0.030))],
    }
    targets = serving._targets(scored, 0.100)
    assert targets == {"static batching": 0.100, "gpuwise Pipeline": 0.045}
    best = [r[0] for r in serving._ranked(scored["gpuwise Pipeline"], targets["gpuwise Pipeline"])]
    assert best == ["tight", "fast"]  # 500 req/s at 80 ms would not be at static's p99
    assert serving._targets({"gpuwise Pipeline": []}, 0.1) == {"gpuwise Pipeline": 0.1}
