from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from gpuwise.pipeline import Pipeline
from tests.pipeline.conftest import FakeModel
from tests.pipeline.gil_pre import python_pre


def first(row):
    return int(row[0])


@pytest.mark.slow
def test_pre_in_processes_matches_threads_and_leaves_no_process():
    inputs = [i for i in range(40) if i != 7]
    expected = [2 * i for i in inputs]
    with Pipeline(
        python_pre, FakeModel(0.001, 0.0), first, max_batch=8, max_delay_ms=2, pre_processes=2
    ) as pipe:
        assert (
            "1 intra-op thread for the model, 2 pre processes, 1 post worker"
            in pipe.plan.explanation
        )
        got = list(pipe.map(inputs))
        failing = pipe.submit(7)
        with pytest.raises(ValueError, match="cannot preprocess input 7"):
            failing.result(timeout=30)
        again = pipe.submit(8).result(timeout=30)
        counts = pipe.result().counts()
    assert got == expected
    assert again == 16
    assert counts["ok"] == 40
    assert counts["error"] == 1
    assert multiprocessing.active_children() == []
    assert pipe.alive_threads() == []


@pytest.mark.slow
def test_a_first_sample_that_fails_does_not_stall_the_process_pool():
    with Pipeline(python_pre, FakeModel(0, 0), first, max_batch=4, pre_processes=1) as pipe:
        failing = pipe.submit(7)  # the first sample would size the shared-memory slots
        later = [pipe.submit(i) for i in (1, 2, 3)]
        with pytest.raises(ValueError, match="input 7"):
            failing.result(timeout=30)
        assert [f.result(timeout=30) for f in later] == [2, 4, 6]
    assert multiprocessing.active_children() == []


def test_python_pre_is_deterministic():
    assert np.array_equal(python_pre(3), python_pre(3))
