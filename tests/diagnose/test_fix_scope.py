"""Every fix declares where it applies; fixes that do not fit a job are dropped."""

from __future__ import annotations

import inspect
import types

import pytest

from gpuwise.diagnose import fix_scope
from gpuwise.diagnose import fixes as fx
from gpuwise.diagnose import fixes_inference as fxi

COMPOSITES = {"comm_fixes"}
"""Constructors that only assemble scoped fixes."""


@pytest.mark.parametrize("module", [fx, fxi])
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
