"""The reader names each communication kernel's collective and times its exposed part."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.records.trace_section import TraceSection
from gpuwise.telemetry.readers.kineto import read_trace
from gpuwise.telemetry.readers.kineto.calls.device import collective_kind
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


# Kernel names as their sources spell them: PyTorch symmetric memory
# (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu: multimem_all_reduce_kernel,
# multimem_one_shot_reduce_kernel, multimem_all_gather_kernel; its Triton
# one_shot_all_reduce_kernel/two_shot_all_reduce_kernel), vLLM/SGLang custom all-reduce
# (csrc/custom_all_reduce.cuh: cross_device_reduce_1stage/2stage, as profiled runs list them),
# TensorRT-LLM's oneShotAllReduceKernel, DeepEP's intranode dispatch/combine, NVSHMEM puts,
# and NCCL/RCCL device kernels.
@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16>(...)", "all_reduce"),
        ("multimem_one_shot_reduce_kernel", "all_reduce"),
        ("one_shot_all_reduce_kernel", "all_reduce"),
        ("two_shot_all_reduce_kernel", "all_reduce"),
        ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(...)", "all_gather"),
        (
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
            "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
            "all_reduce",
        ),
        (
            "void sglang::cross_device_reduce_2stage<__half, 8>(sglang::RankData*, "
            "sglang::RankSignals, sglang::Signal*, __half*, int, int)",
            "all_reduce",
        ),
        ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(...)", "all_reduce"),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(...)", "all_to_all"),
        ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(...)", "all_to_all"),
        # issue 44 #4: DeepEP's notify kernels exchange token counts between the ranks
        ("void deep_ep::internode::cached_notify(int, int*, void*, int)", "all_to_all"),
        ("void internode::cached_notify<8>(int, int*, void**)", "all_to_all"),
        ("cached_notify", "all_to_all"),
        ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", "all_to_all"),
        ("nvshmemi_transfer_put_signal_kernel", "send_recv"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "all_to_all"),
        ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
    ],
)
def test_collectives_by_what_they_do_across_libraries(name: str, kind: str) -> None:
    from gpuwise.telemetry.readers.kineto.calls.collectives import is_communication

    assert is_communication(name, {})
    assert collective_kind(name) == kind
    # the name is searched lower-cased: its case changes nothing
    assert is_communication(name.upper(), {})
    assert is_communication(name.swapcase(), {})


@pytest.mark.parametrize(
    "name",
    [
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(...)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        "void vllm::rms_norm_kernel<c10::BFloat16, 8, 1>(...)",
        "triton_per_fused_add_mean_mul_pow_rsqrt_0",
    ],
)
def test_compute_kernels_are_not_communication(name: str) -> None:
    from gpuwise.telemetry.readers.kineto.calls.collectives import is_communication

    assert not is_communication(name, {})
    assert not is_communication(name.upper(), {})


def test_the_profilers_collective_tag_wins_over_the_kernel_name() -> None:
    # NCCL runs both all-to-all and pipeline send/recv as SendRecv kernels; the tag tells.
    name = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    assert collective_kind(name, "send") == "send_recv"
    assert collective_kind(name, "all_to_allv") == "all_to_all"
    assert collective_kind("ncclDevKernel_Generic_4", "_allgather_base") == "all_gather"


def test_symmetric_memory_all_reduce_is_communication_in_the_figures(tmp_path: Path) -> None:
    # A TP step on B200: 82 µs of GEMMs, then 18 µs of multimem all-reduce nothing overlaps.
    events = []
    for i in range(10):
        events.append(kernel("sm100_xmma_gemm_bf16bf16_bf16f32", 100 * i, 82, 7))
        events.append(kernel("multimem_all_reduce_kernel", 100 * i + 82, 18, 7))
    section = read_trace(write_trace(tmp_path, events)).to_section()
    assert section.facts is not None
    assert section.facts.comm_kernel_share == pytest.approx(0.18)
    assert section.facts.communication.exposed_by_collective_s == pytest.approx(
        {"all_reduce": 180e-6}
    )


@pytest.mark.parametrize(
    ("group", "label"),
    [
        ("default_pg", "data_parallel"),
        ("mesh_dp", "data_parallel"),
        ("mesh_tp", "tensor_parallel"),
        ("tp:0", "tensor_parallel"),
        ("pp", "pipeline_parallel"),
        ("ep_group", "expert_parallel"),
        ("undefined", "unknown"),
    ],
)
def test_parallelism_of_a_process_group(group: str, label: str) -> None:
    from gpuwise.telemetry.readers.kineto.calls.collectives import parallelism

    assert parallelism(group) == label


def test_communication_per_parallelism_from_the_real_ddp_trace() -> None:
    # Every NCCL kernel of this trace carries "Process Group Description": "default_pg".
    from tests.conftest import realdata

    tr = read_trace(realdata("hta_traces/cnn_ddp_a100_nccl.trace.json.gz"))
    assert tr.facts is not None
    comm = tr.facts.communication
    assert comm.by_parallelism_s == pytest.approx({"data_parallel": comm.total_s})


def test_tensor_and_data_parallel_groups_are_told_apart(tmp_path: Path) -> None:
    def nccl(ts: float, dur: float, desc: str) -> dict[str, object]:
        k = kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", ts, dur, 20)
        k["args"].update({"Process Group Description": desc, "Collective name": "allreduce"})
        return k

    events = [nccl(0, 10, "mesh_tp"), nccl(20, 10, "mesh_tp"), nccl(40, 30, "mesh_dp")]
    section = read_trace(write_trace(tmp_path, events)).to_section()
    assert section.facts is not None
    assert section.facts.communication.by_parallelism_s == pytest.approx(
        {"tensor_parallel": 20e-6, "data_parallel": 30e-6}
    )
    again = type(section).from_dict(section.to_dict())
    assert again.facts is not None
    assert (
        again.facts.communication.by_parallelism_s == section.facts.communication.by_parallelism_s
    )
