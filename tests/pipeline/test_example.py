from __future__ import annotations

import json

import pytest
import torch

from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench.example import image_classifier, load_app


@pytest.fixture(scope="module")
def app():
    return image_classifier(size=64, images=12)


def test_pre_sends_uint8_pixels_and_the_device_normalises(app):
    sample = app.pre(app.make_input(0))
    assert sample.shape == (64, 64, 3)
    assert sample.dtype.name == "uint8"
    batch = app.transform(torch.from_numpy(sample)[None])
    assert batch.shape == (1, 3, 64, 64)
    assert batch.dtype == torch.float32
    assert -3.0 < float(batch.min()) < float(batch.max()) < 3.0


def test_pipeline_results_match_a_synchronous_run_of_the_same_inputs(app):
    with torch.inference_mode():
        expected = []
        for i in range(12):
            x = torch.from_numpy(app.pre(app.make_input(i)))[None]
            expected.append(json.loads(app.post(app.model(app.transform(x))[0])))
    with Pipeline(
        app.pre, app.model, app.post, max_batch=4, max_delay_ms=2, transform=app.transform
    ) as pipe:
        got = [json.loads(r) for r in pipe.map(app.make_input(i) for i in range(12))]
        batches = pipe.result().batches
    assert [[c["class"] for c in r["top5"]] for r in got] == [
        [c["class"] for c in r["top5"]] for r in expected
    ]
    for g, e in zip(got, expected, strict=True):
        assert [c["p"] for c in g["top5"]] == pytest.approx([c["p"] for c in e["top5"]], abs=1e-4)
    assert max(b.size for b in batches) > 1
    assert all(b.h2d_bytes == b.padded_size * 64 * 64 * 3 for b in batches)  # 1 byte a value


def test_load_app_without_a_factory_is_the_built_in_example():
    assert load_app(None).name.startswith("built-in: JPEG 128px")
