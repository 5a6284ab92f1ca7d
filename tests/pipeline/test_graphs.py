"""CUDA graphs per bucket, above the hardware boundary: which graph a batch replays, and
what happens without CUDA (the model runs eagerly, and the pipeline says why)."""

from __future__ import annotations

import pytest
import torch

from gpuwise.errors import UsageError
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.device.graphs import GraphedModel, graph_note
from gpuwise.pipeline.device.staging import bucket_for
from tests.pipeline.conftest import post, pre


class FakeCapture:
    """Stands in for ``torch.cuda.graph``: records each capture; a replay calls the model."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.replays = 0

    def __call__(self, model, example):
        self.shapes.append(tuple(example.shape))

        def replay(x):
            self.replays += 1
            return model(x)

        return replay


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_each_bucket_is_captured_once_and_replayed_after():
    capture = FakeCapture()
    graphed = GraphedModel(double, (1, 4, 8), capture)
    for rows in (4, 4, 1, 8, 4, 1):
        assert graphed(torch.ones(rows, 3)).shape == (rows, 3)
    assert capture.shapes == [(4, 3), (1, 3), (8, 3)]
    assert graphed.captured == [(4, 3), (1, 3), (8, 3)]
    assert capture.replays == 6
    assert graphed.eager_batches == 0


def test_a_size_that_is_no_bucket_runs_eagerly():
    capture = FakeCapture()
    graphed = GraphedModel(double, (4, 8), capture)
    out = graphed(torch.ones(3, 2))
    assert out.tolist() == [[2.0, 2.0]] * 3
    assert capture.shapes == []
    assert graphed.eager_batches == 1


@pytest.mark.parametrize(("size", "bucket"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 9)])
def test_a_batch_is_padded_to_the_smallest_bucket_holding_it(size, bucket):
    assert bucket_for(size, (1, 2, 4, 8)) == bucket  # 9: above every bucket, itself


def test_without_cuda_the_model_runs_eagerly_and_the_pipeline_says_why():
    note = graph_note(torch.device("cpu"), (1, 4))
    assert note == "CUDA graphs need a CUDA device; the model runs eagerly on cpu"
    with Pipeline(pre, double, post, max_batch=4, buckets=(1, 4), cuda_graphs=True) as pipe:
        assert pipe.graph_note == note
        assert list(pipe.map(range(10))) == [2.0 * i for i in range(10)]
    with Pipeline(pre, double, post, max_batch=4) as pipe:
        assert pipe.graph_note is None  # not asked for


def test_graphs_without_buckets_are_refused():
    with pytest.raises(UsageError, match="cuda_graphs needs buckets"):
        Pipeline(pre, double, post, cuda_graphs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_graphed_batches_match_eager_ones():
    net = torch.nn.Linear(3, 5).cuda().eval()
    with Pipeline(pre, net, lambda row: row.tolist(), "cuda", 4, buckets=(2, 4)) as eager:
        want = list(eager.map(range(11)))
    with Pipeline(
        pre, net, lambda row: row.tolist(), "cuda", 4, buckets=(2, 4), cuda_graphs=True
    ) as graphed:
        assert graphed.graph_note is None
        got = list(graphed.map(range(11)))
    assert got == pytest.approx(want, rel=1e-5)  # type: ignore[arg-type]
