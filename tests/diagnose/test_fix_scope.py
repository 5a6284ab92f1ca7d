"""Every fix declares where it applies; fixes that do not fit a job are dropped."""

from __future__ import annotations

import inspect
import types

import pytest

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import feed
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.fixes import scope as fix_scope

COMPOSITES = {"comm_fixes"}
"""Constructors that only assemble scoped fixes."""


@pytest.mark.parametrize("module", [fx, feed, fxi])
def test_every_fix_constructor_declares_its_scope(module: types.ModuleType) -> None:
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if fn.__module__ != module.__name__ or name.startswith("_") or name in COMPOSITES:
            continue
        returns = str(inspect.signature(fn).return_annotation)
        if "Fix" in returns:
            assert hasattr(fn, "__scope__"), f"{module.__name__}.{name} declares no scope"


def test_inference_never_gets_training_fixes() -> None:
    training = [
        fx.defer_host_reads(),
        fx.bigger_batch(None, None, None),
        fx.fused_optimizer(),
        *fx.ddp_comm_fixes(),
        *fx.fsdp_comm_fixes(),
        fx.compress_gradients(),
    ]
    assert fix_scope.keep_fitting(tuple(training), "inference", "nvidia") == ()
    assert fix_scope.keep_fitting(tuple(training), "training", "amd") == tuple(training)
    # a job whose kind the trace does not tell keeps them (a profiled training script)
    assert fix_scope.keep_fitting(tuple(training), "unknown") == tuple(training)


def test_engine_fixes_stay_with_inference_and_gpus() -> None:
    graphs = fxi.replay_graphs("vllm", "nvidia")
    assert fix_scope.fits(graphs, "inference", "nvidia")
    assert not fix_scope.fits(graphs, "training", "nvidia")
    assert not fix_scope.fits(graphs, "inference", "cpu")
    assert not fix_scope.fits(graphs, "inference", "nvidia", {"ungraphed": False})


def test_vendor_words_follow_the_vendor() -> None:
    assert "amd-smi" in fx.check_interconnect("amd").how
    assert "nvidia-smi" not in fx.check_interconnect("amd").how
    assert "nvidia-smi topo -m" in fx.check_interconnect("nvidia").how
    assert "amd-smi" in fx.cooling("amd")[0].how
    assert "HIP graphs" in fxi.replay_graphs(None, "amd").action
    assert "hipFree" in fxi.caching_allocator("amd").action


def test_tensor_parallel_fix_keeps_the_jobs_gpus() -> None:
    # A TP4 job is told TP2 x PP2 (four GPUs), never a layout needing eight.
    assert (
        "--tensor-parallel-size 2 --pipeline-parallel-size 2" in fxi.fewer_tp_ranks("vllm", 4).how
    )
    assert "--tp-size 4 --dp-size 2" in fxi.fewer_tp_ranks("sglang", 8).how
    # world size not recorded (or odd): the engine's flag with no invented number
    for world in (None, 3, 2):
        assert "--tensor-parallel-size TP/2" in fxi.fewer_tp_ranks("vllm", world).how
    assert "half the tensor-parallel ranks" in fxi.fewer_tp_ranks(None, 8).how


def test_batch_fix_names_the_clients_concurrency_when_the_batch_is_known() -> None:
    known = fxi.serve_bigger_batches("vllm", 32).action
    assert "32 sequences" in known
    assert "send more requests concurrently" in known
    assert "raise the batch" in fxi.serve_bigger_batches("vllm").action
