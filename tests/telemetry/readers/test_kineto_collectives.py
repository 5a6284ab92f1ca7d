"""The reader names each communication kernel's collective and times its exposed part."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.records.trace_section import TraceSection
from gpuwise.telemetry.readers._kineto_device import collective_kind
from gpuwise.telemetry.readers.kineto import read_trace
from tests.trace_events import kernel, write_trace


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "all_reduce",
        ),
        ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "all_to_all",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "reduce_scatter",
        ),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "broadcast",
        ),
    ],
)
def test_collective_kind_from_the_kernel_name(name: str, kind: str) -> None:
    assert collective_kind(name) == kind


def test_exposed_time_per_collective_is_what_no_compute_covers(tmp_path: Path) -> None:
    events = [
        kernel("volta_sgemm_128x64_nn", 0, 100, 7),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 50, 100, 20),  # 50 µs under the gemm
        kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 200, 30, 21),
        kernel("ncclDevKernel_AllGather_RING_LL", 300, 10, 20),
        kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 400, 5, 20),
        kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 500, 4, 20),
    ]
    section = read_trace(write_trace(tmp_path, events)).to_section()
    assert isinstance(section, TraceSection)
    assert section.facts is not None
    comm = section.facts.communication
    assert comm.exposed_s == pytest.approx(99e-6)
    assert comm.exposed_by_collective_s == pytest.approx(
        {
            "all_reduce": 50e-6,
            "all_to_all": 30e-6,
            "all_gather": 10e-6,
            "reduce_scatter": 5e-6,
            "broadcast": 4e-6,
        }
    )
    assert comm.dominant_collective() == "all_reduce"
    written = section.to_dict()["communication"]["exposed_by_collective_s"]
    assert written == comm.exposed_by_collective_s


def test_a_trace_without_communication_has_no_collectives(tmp_path: Path) -> None:
    events = [kernel("volta_sgemm_128x64_nn", 0, 100, 7)]
    section = read_trace(write_trace(tmp_path, events)).to_section()
    assert section.facts is not None
    assert section.facts.communication.exposed_by_collective_s == {}
    assert section.facts.communication.dominant_collective() is None
