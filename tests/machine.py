"""What the machine gives a test now: the share of a core a busy thread obtains.

A test that needs CPU it may not get (processes that import torch, sleeps that must wake on
time) measures what it got instead of assuming a quiet machine: ``core_share()`` spins on
the calling thread for a moment and returns the CPU time it obtained against the wall time
(1.0 on an idle core; about 2/13 beside 12 busy processes on 2 cores). ``need_cpu`` skips
with that measurement when it is under what the test needs, and ``scaled`` stretches a
deadline that waits for another process by what the machine gives.
"""

from __future__ import annotations

import time

import pytest

SAMPLE_S = 0.25
"""Wall time of one measurement: long enough for the scheduler to share it out."""


def core_share(sample_s: float = SAMPLE_S) -> float:
    """CPU time this thread obtained while spinning for ``sample_s`` of wall time, per second."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall0 < sample_s:
        pass
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    return min(1.0, cpu / wall) if wall > 0 else 1.0


def need_cpu(min_share: float, what: str) -> float:
    """Skip unless a busy thread gets at least ``min_share`` of a core now; return the share."""
    share = core_share()
    if share < min_share:
        pytest.skip(
            f"needs CPU it did not get: {what} needs {min_share:.0%} of a core, a busy thread "
            f"got {share:.0%} over {SAMPLE_S:.2f} s"
        )
    return share


def scaled(deadline_s: float, share: float | None = None) -> float:
    """``deadline_s`` on an idle core, stretched by the share of a core the machine gives."""
    got = core_share() if share is None else share
    return deadline_s / max(got, 0.05)
