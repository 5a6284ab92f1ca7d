"""Deploy a ``Pipeline`` as a Ray Serve deployment: one pipeline per replica, many machines.

Ray Serve routes requests to replicas across a cluster; inside each replica gpuwise's
pipeline does what Serve's ``@serve.batch`` does not: pre and post on a worker pool
beside the device, a reused staging buffer, per-stage timing and the diagnosis. The
replica's ``__call__`` submits to its pipeline and awaits the result without blocking
Serve's event loop, so Serve may send a replica many requests at once
(``max_ongoing_requests``) for its batcher to fill batches from.

Needs the optional extra: ``pip install 'gpuwise[ray]'`` (``ray[serve]``).

Example:
    >>> from ray import serve                                        # doctest: +SKIP
    >>> app = ray_app(lambda: Pipeline(pre, model, post, max_batch=16), num_replicas=2)
    >>> handle = serve.run(app)
    >>> handle.remote(x).result()
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.pipeline.core import Pipeline


class PipelineReplica:
    """The body of one replica: builds its pipeline, forwards calls, reports its stats.

    Args:
        build: Makes the replica's pipeline (called once, inside the replica's process).
    """

    def __init__(self, build: Callable[[], Pipeline]) -> None:
        self.pipe = build()

    async def __call__(self, x: Any) -> Any:
        """Run one request through the replica's pipeline."""
        return await asyncio.wrap_future(self.pipe.submit(x))

    def stats(self) -> dict[str, Any]:
        """The replica's serving section so far (``gpuwise.serving/1``, without records)."""
        return self.pipe.result().to_dict(include_records=False)

    def __del__(self) -> None:
        self.pipe.close(timeout_s=5.0)


def ray_app(
    build: Callable[[], Pipeline],
    *,
    name: str = "gpuwise-pipeline",
    num_replicas: int = 1,
    max_ongoing_requests: int = 256,
    ray_actor_options: dict[str, Any] | None = None,
) -> Any:
    """Return a Ray Serve application serving ``build()``'s pipeline in every replica.

    Args:
        build: Makes one pipeline; Ray pickles it (with cloudpickle) to each replica.
        name: Deployment name.
        num_replicas: Replicas (each with its own pipeline and device).
        max_ongoing_requests: Requests Serve sends one replica at once (enough to fill
            batches: at least 2 x max_batch).
        ray_actor_options: Resources per replica, e.g. ``{"num_gpus": 1}``.

    Returns:
        The bound application for ``serve.run``.

    Raises:
        MissingExtraError: Ray Serve is not installed.
    """
    try:
        from ray import serve
    except ImportError as err:
        raise MissingExtraError("ray[serve]", "ray", "Deploying a Pipeline on Ray Serve") from err
    deployment: Any = serve.deployment(
        PipelineReplica,
        name=name,
        num_replicas=num_replicas,
        max_ongoing_requests=max_ongoing_requests,
        ray_actor_options=ray_actor_options or {},
    )
    return deployment.bind(build)
