"""A ServingApp for the CLI tests: trivial pre/post, a model taking 2 ms + 0.5 ms per row."""

from __future__ import annotations

from gpuwise.pipeline.bench.example import ServingApp
from tests.pipeline.conftest import FakeModel, post, pre


def app() -> ServingApp:
    return ServingApp("fake: 2 ms + 0.5 ms/row", pre, FakeModel(0.002, 0.0005), post, lambda i: i)


def not_an_app() -> int:
    return 3
