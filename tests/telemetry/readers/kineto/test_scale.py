"""Reading at scale: runs of events decoded in one call, per-step figures from one sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.telemetry.readers import _json_stream
from gpuwise.telemetry.readers.kineto import read_trace
from gpuwise.telemetry.readers.kineto.intervals import member, union_s
from tests.trace_events import event, kernel, write_trace


class _Pieces:
    """A text stream that hands out the text in pieces of the given sizes."""

    def __init__(self, text: str, size: int) -> None:
        self.text, self.size, self.pos = text, size, 0

    def read(self, _n: int = -1) -> str:
        piece = self.text[self.pos : self.pos + self.size]
        self.pos += len(piece)
        return piece


_values = st.recursive(
    st.one_of(
        st.integers(-(10**6), 10**6),
        st.sampled_from(["}, {", "},{", '"}, {"', "a\\b", "]"]),
        st.text(max_size=6),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_objects = st.lists(st.dictionaries(st.text(max_size=4), _values, max_size=4), max_size=30)


@given(events=_objects, size=st.integers(7, 200), indent=st.sampled_from([None, 1]))
@settings(max_examples=80, deadline=None)
def test_runs_of_elements_decode_like_json_loads(
    events: list[dict[str, Any]], size: int, indent: int | None
) -> None:
    # Strings and nested values that hold "}, {" make some cuts fall inside an element:
    # those runs must fall back to one element at a time and still read the same values.
    text = json.dumps({"traceEvents": events}, indent=indent)
    old = _json_stream.BATCH_CHARS
    _json_stream.BATCH_CHARS = 64  # many short runs
    try:
        stream = _json_stream.JsonStream(_Pieces(text, size))
        got = []
        for key in stream.members():
            assert key == "traceEvents"
            for batch in stream.batches():
                got.extend(batch)
    finally:
        _json_stream.BATCH_CHARS = old
    assert got == events


def test_a_corrupt_event_inside_a_run_is_skipped_alone(tmp_path: Path) -> None:
    good = [kernel("volta_sgemm_128x64_nn", 10 * i, 5, 7) for i in range(50)]
    text = json.dumps({"traceEvents": good})
    broken = text.replace('"ts": 250', '"ts": 25x0', 1)  # event #25
    path = tmp_path / "t.json"
    path.write_text(broken)
    tr = read_trace(path, strict=False)
    assert [s.record for s in tr.skipped] == [25]
    assert tr.facts is not None
    assert tr.facts.device_events == 49


def _steps_trace(steps: int, kernels: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    t = 0.0
    for s in range(steps):
        events.append(event("user_annotation", f"ProfilerStep#{s}", t, 100.0 * kernels))
        events.append(event("cpu_op", "enumerate(DataLoader)#_Iter.__next__", t, 30.0 + s))
        events.append(
            event(
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                t + 35,
                20,
                stream=7,
                bytes=1000 + s,
            )
        )
        # a copy on a side stream: beside compute, not a phase of the step
        events.append(
            event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", t + 40, 50, stream=9, bytes=7)
        )
        for k in range(kernels):
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if k % 5 == 4 else "sm80_gemm"
            events.append(kernel(name, t + 60 + 90 * k, 60 + (k % 3) * 10, 7 if k % 5 else 8))
        t += 100.0 * kernels + 5
    return events


def test_per_step_figures_equal_the_union_clipped_to_each_step(tmp_path: Path) -> None:
    events = _steps_trace(steps=12, kernels=10)
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    # Brute force: clip every interval to each step and take the union, step by step.
    comp = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "sm80_gemm"]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("nccl")]
    base = events[0]["ts"]

    def union(iv: list[tuple[float, float]], a: float, b: float) -> float:
        arr = np.array(iv, dtype=np.float64).reshape(-1, 2) - base
        return union_s((arr[:, 0], arr[:, 1]), a - base, b - base)

    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("Profiler")]
    assert len(tr.facts.steps) == 12
    for row, (a, b) in zip(tr.facts.steps, spans, strict=True):
        assert row.compute_s == pytest.approx(union(comp, a, b), abs=1e-12)
        assert row.comm_total_s == pytest.approx(union(comm, a, b), abs=1e-12)
        assert row.communication_s == pytest.approx(
            union(comp + comm, a, b) - union(comp, a, b), abs=1e-12
        )
    for i, step in enumerate(tr.steps):
        assert step.data_wait_s == pytest.approx((30.0 + i) * 1e-6)
        # only the compute stream's copy is the step's copy phase; the side stream's is not
        assert step.h2d_s == pytest.approx(20e-6)
        assert (step.h2d_count, step.h2d_bytes, step.h2d_pageable_bytes) == (1, 1000 + i, 1000 + i)
    # the device facts count the steady state: the last step's work is left out
    assert tr.facts.h2d["side_stream_s"] == pytest.approx(11 * 50e-6)
    assert tr.facts.h2d["on_compute_stream_s"] == pytest.approx(11 * 20e-6)


def test_a_device_behind_the_host_shows_in_its_own_step_time(tmp_path: Path) -> None:
    # The host launches each 1 ms step's ten kernels at once; they take 1.2 ms on the
    # device, so the queue grows by 0.2 ms a step.
    events: list[dict[str, Any]] = []
    corr, device_t = 0, 10.0
    for s in range(5):
        t = 1000.0 * s
        events.append(event("cpu_op", f"ProfilerStep#{s}", t, 1000))
        for _ in range(10):
            corr += 1
            events.append(
                event("cuda_runtime", "cudaLaunchKernel", t + corr % 10, 1, correlation=corr)
            )
            events.append(kernel("sm80_gemm", device_t, 120, 7, corr))
            device_t += 120
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert [s.device_s for s in tr.facts.steps] == pytest.approx([1200e-6] * 5)
    assert [s.duration_s for s in tr.facts.steps] == pytest.approx([1000e-6] * 5)
    from gpuwise.report.text.trace import trace_lines

    per_step = dict(trace_lines(tr.to_section(), tr.facts))["per step"]
    assert "the device takes 1.2 ms for each step's work, the host 1.0 ms" in per_step


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), max_size=40),
    st.lists(st.integers(-(2**40), 2**40), max_size=40),
)
def test_member_is_numpys_isin(values: list[int], of: list[int]) -> None:
    x = np.array(values, dtype=np.int64)
    assert member(x, of).tolist() == np.isin(x, np.array(of, dtype=np.int64)).tolist()
