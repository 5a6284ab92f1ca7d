"""``comm_bound`` lists first the fixes for the collective that dominates exposed time."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding, Run
from tests.trace_events import kernel, write_trace

HTA = Path(__file__).resolve().parents[1] / "realdata" / "hta_traces"
ALL_TO_ALL = "Overlap collectives with compute: issue them asynchronously, fewer and larger"
DDP_FIRST = "Give each rank a bigger batch: more compute per all-reduce of the same bytes"
FSDP_FIRST = "Prefetch the next block's parameters while this one computes"


def _comm(run: Run) -> Finding:
    return next(f for f in run.findings if f.kind == "comm_bound")


def test_recsys_all_to_all_trace_puts_the_all_to_all_fix_first() -> None:
    run = analyze([HTA / "recsys128_rank0.trace.json.gz"])
    assert run.trace is not None
    assert run.trace.facts is not None
    comm = run.trace.facts.communication
    assert comm.dominant_collective() == "all_to_all"  # NCCL SendRecv kernels
    assert comm.exposed_by_collective_s["all_to_all"] == pytest.approx(comm.exposed_s)
    fixes = _comm(run).fixes
    assert fixes[0].action == ALL_TO_ALL
    assert "all_to_all_single" in fixes[0].how
    assert [f.action for f in fixes[1:5]] == [f.action for f in fx.ddp_comm_fixes()]


def test_all_reduce_dominated_trace_keeps_the_ddp_fixes_first() -> None:
    run = analyze([HTA / "cnn_ddp_a100_nccl.trace.json.gz"])
    assert run.trace is not None
    assert run.trace.facts is not None
    by_kind = run.trace.facts.communication.exposed_by_collective_s
    assert by_kind["all_reduce"] > 100 * by_kind.get("broadcast", 0.0) > 0  # a small broadcast
    fixes = _comm(run).fixes
    assert fixes[0].action == DDP_FIRST
    assert [f.action for f in fixes[:4]] == [f.action for f in fx.ddp_comm_fixes()]
    assert fixes[4].action == ALL_TO_ALL


def test_an_all_gather_dominated_trace_gets_the_fsdp_fixes_first(tmp_path: Path) -> None:
    events = [
        kernel("ampere_bf16_gemm_128x64_nn", 0, 100, 7),
        kernel("ncclDevKernel_AllGather_RING_LL", 100, 300, 20),
        kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 400, 50, 20),
    ]
    run = analyze([write_trace(tmp_path, events, "fsdp.json")])
    assert run.trace is not None
    assert run.trace.facts is not None
    by_kind = run.trace.facts.communication.exposed_by_collective_s
    assert by_kind == pytest.approx({"all_gather": 300e-6, "reduce_scatter": 50e-6})
    fixes = _comm(run).fixes
    assert [f.action for f in fixes[:3]] == [f.action for f in fx.fsdp_comm_fixes()]
    assert fixes[0].action == FSDP_FIRST
    assert "set_modules_to_forward_prefetch" in fixes[0].how


def test_an_unknown_collective_keeps_the_catalog_order() -> None:
    plain = fx.comm_fixes()
    assert plain == fx.comm_fixes(collective="all_reduce")
    assert plain == fx.comm_fixes(collective=None)
    assert plain == fx.comm_fixes(collective="other")
    assert plain[0].action == DDP_FIRST
    assert len(fx.comm_fixes(collective="all_to_all")) == len(plain)
    assert {f.action for f in fx.comm_fixes(collective="all_to_all")} == {f.action for f in plain}
