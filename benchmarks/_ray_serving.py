"""(c) of ``benchmarks/serving.py``: Ray Serve's ``@serve.batch`` with the same stages.

One replica (Serve's default), whose batched handler runs pre for each request, the
model on the batch and post for each, as Serve's batching guide shows. Clients call
the deployment handle from a thread pool (one thread per closed-loop client), so the
load generator measures it like the other systems. Each measurement deploys its setting
(not timed) and deletes it after; ``shutdown()`` stops Serve and Ray.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray
import torch
from ray import serve

from gpuwise.pipeline.bench.example import ServingApp

WAIT_S = 0.005


@serve.deployment(max_ongoing_requests=512)
class BatchedClassifier:
    """The built-in example behind ``@serve.batch``."""

    def __init__(self, max_batch: int, simulated: tuple[float, float] | None) -> None:
        from gpuwise.pipeline.bench.example import image_classifier

        self.app = image_classifier()
        if simulated is not None:  # the same simulated GPU as the other systems
            from gpuwise.pipeline.device.simulated import DeviceCost, on_simulated_gpu

            self.app = on_simulated_gpu(self.app, DeviceCost(*simulated))
        self.infer.set_max_batch_size(max_batch)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=WAIT_S)
    async def infer(self, items: list[bytes]) -> list[str]:
        app = self.app
        with torch.inference_mode():
            x = torch.stack([torch.from_numpy(app.pre(data)) for data in items])
            out = app.model(app.transform(x) if app.transform else x)
        return [app.post(row) for row in out]

    async def __call__(self, data: bytes) -> str:
        return await self.infer(data)


class RayServer:
    """Closed-loop clients' view of one deployed setting."""

    def __init__(self, max_batch: int, clients: int, simulated: tuple[float, float] | None) -> None:
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        # one replica takes one of Ray's CPUs: deploy per measurement, delete after
        self.name = f"b{max_batch}"
        self.handle = serve.run(
            BatchedClassifier.bind(max_batch, simulated), name=self.name, route_prefix=None
        )
        self.pool = ThreadPoolExecutor(max_workers=clients, thread_name_prefix="ray-client")

    def submit(self, x: Any, deadline_ms: float | None = None) -> Future[Any]:
        return self.pool.submit(lambda: self.handle.remote(x).result())

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        serve.delete(self.name)


def ray_candidates(
    app: ServingApp, batches: tuple[int, ...], simulated: tuple[float, float] | None = None
) -> list[tuple[str, Any, int]]:
    """Settings to tune over: ``max_batch_size`` with a 5 ms wait, B or 2B clients."""
    return [
        (
            f"max_batch_size={b} wait={WAIT_S * 1e3:.0f}ms",
            lambda b=b, c=c: RayServer(b, c, simulated),
            c,
        )
        for b in batches
        for c in (b, 2 * b)
    ]


def shutdown() -> None:
    """Stop Serve and Ray (the benchmark's end)."""
    if ray.is_initialized():
        serve.shutdown()
        ray.shutdown()
