"""Each rank of a DDP job counts its own FLOPs; MFU per rank and for the whole job."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.efficiency.model_mfu import counted_mfu_section
from tests.distributed.test_torchrun import _one_thread_per_rank, profile_job  # noqa: F401

pytestmark = [pytest.mark.dist, pytest.mark.kernels]


def test_every_rank_counts_its_step_and_gets_its_own_mfu(tmp_path: Path) -> None:
    run, _ = profile_job(tmp_path, "straggler", "0")
    assert run.exit_code == 0
    counted = run.extra["model_flops"]["counted"]
    assert sorted(c["rank"] for c in counted) == [0, 1]
    # ddp_job's wide_mlp(2): two 1024x1024 layers, 32 samples a rank; the first layer's
    # input needs no gradient (weight gradient only), the second's does
    mm = 2 * 32 * 1024 * 1024
    assert {c["model_flops"] for c in counted} == {2 * mm + 3 * mm}
    assert {c["samples"] for c in counted} == {32}
    peak = 1e12  # injected: the arithmetic is checked, not this CPU's rate
    section = counted_mfu_section(run, peak_flops_s=peak, peak_source="test")
    assert section is not None
    assert section["devices"] == 2
    ranks = section["ranks"]
    for r in ranks:
        assert r["mfu"] == pytest.approx(5 * mm / (r["step_s"] * peak))
    whole = sum(5 * mm / r["step_s"] for r in ranks) / (2 * peak)
    assert section["mfu"] == pytest.approx(whole)
