"""A public multi-rank trace set read across its ranks: clocks and the straggler.

Runs only when ``GPUWISE_PUBLIC_TRACES`` points at the folder that
``tests/distributed/fetch_rank_sets.sh`` fills (third-party files, never committed).

The DLRM set (facebookresearch/param, ``et_replay/tests/inputs/dlrm_kineto.tar.gz``): one
profiler step (#10) of 8 ranks, each with 8 NCCL kernels (5 ``SendRecv``, the embedding
all-to-alls; 3 ``AllReduce``) and no ``Seq``. Read from the events: at each of the 8
instances the ranks' kernel ends agree within 5 µs of rank 0's (one host, one clock), while
the starts spread over up to 7.6 ms (rank 7 starts the first all-to-all 2.1 ms after rank
0, rank 1 5.5 ms before it). Rank 7's step #10 begins at 1694128201428718 µs, the median
of the other ranks' starts is 1694128201424195 µs: 4.523 ms later.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwise.diagnose.ranks.align import align
from gpuwise.telemetry.readers.kineto.rank import read_rank_summary

ROOT = os.environ.get("GPUWISE_PUBLIC_TRACES")
DLRM = Path(ROOT or ".") / "param" / "dlrm_kineto"
SAME_CLOCK_S = 5e-6
"""The largest spread of one instance's kernel ends against rank 0's, read from the events."""


@pytest.fixture(scope="module")
def dlrm():
    if not ROOT:
        pytest.skip("GPUWISE_PUBLIC_TRACES is not set: run tests/distributed/fetch_rank_sets.sh")
    files = sorted(DLRM.glob("*.pt.trace.json"))
    if len(files) != 8:
        pytest.skip(f"{DLRM} holds {len(files)} rank traces, not 8: run the fetch script again")
    a = align([read_rank_summary(p) for p in files])
    assert a is not None
    return a


def test_dlrm_ranks_share_one_clock(dlrm):
    assert (dlrm.matching, dlrm.instances, dlrm.unmatched) == ("end time", 8, 0)
    assert dlrm.by_kind == {"all_to_all": 5, "all_reduce": 3}
    assert [r["rank"] for r in dlrm.per_rank] == list(range(8))
    for r in dlrm.per_rank:
        assert abs(r["clock_offset_s"]) <= SAME_CLOCK_S
    assert dlrm.clock_offsets == ()  # none of 50 µs or more: no clock is reported off


def test_dlrm_rank_7_is_late_from_before_the_trace(dlrm):
    s = dlrm.straggler
    assert s is not None
    assert (s["rank"], s["cause"], s["first_step"]) == (7, "before_trace", 10)
    assert s["cause_s"] == pytest.approx(4.523e-3, abs=SAME_CLOCK_S)
