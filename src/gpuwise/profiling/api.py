"""The explicit profiling API: ``with gpuwise.profile() as prof:`` and ``gpuwise.watch(loader)``.

Both give the same Run as ``gpuwise profile`` (``source="api"``): the steps of the code run
inside, split by the same hooks (DataLoader iteration, optimizer steps, host-to-device
copies) and the telemetry samples taken meanwhile, recorded by ``recording``. This module
does not diagnose: ``gpuwise.profile``/``gpuwise.watch`` (``gpuwise.session``) pass a
``finish`` callback that does.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from gpuwise.profiling import hooks, recording
from gpuwise.records import Run

T = TypeVar("T")


class Profile:
    """The handle ``profile()`` yields.

    Attributes:
        run: The diagnosed Run once the ``with`` block has ended, else None.
    """

    def __init__(self) -> None:
        self.run: Run | None = None

    def _repr_html_(self) -> str:
        """In a notebook: the Run's report once the block has ended, else a line saying so."""
        if self.run is None:
            return (
                "<p>gpuwise: profiling; the report shows when the <code>with</code> block ends</p>"
            )
        return self.run._repr_html_()


Finish = Callable[[Run], None]
"""Called with the Run when a profile ends (``gpuwise.session`` diagnoses it there)."""


@contextlib.contextmanager
def profile(
    *,
    interval_s: float = 0.5,
    sample: bool = True,
    backends: Any = None,
    finish: Finish | None = None,
) -> Iterator[Profile]:
    """Profile the training or inference loop run inside the ``with`` block.

    Args:
        interval_s: Seconds between telemetry samples (default 0.5).
        sample: Run the telemetry sampler (default True).
        backends: Telemetry backends (default: NVML, else the host CPU).
        finish: Called with the Run once it is built (default: nothing).

    Yields:
        A Profile whose ``run`` is set when the block ends, also when it raised.

    Example:
        >>> with profile(sample=False) as prof:  # doctest: +SKIP
        ...     train(model, loader, epochs=1)
        >>> prof.run.step_stats()["fractions"]["data_wait"]  # doctest: +SKIP
    """
    handle = Profile()
    sampler = _start_sampler(interval_s, backends) if sample else None
    devices = sampler.devices() if sampler is not None else []
    t0_wall_s = sampler.started_at_epoch_s if sampler is not None else time.time()
    session = recording.memory_recording(t0_wall_s).start()
    try:
        yield handle
    finally:
        session.stop()
        samples = sampler.stop() if sampler is not None else []
        handle.run = recording.run_from_memory(
            session, samples, devices, t0_wall_s, interval_s if sample else None
        )
        if finish is not None:
            finish(handle.run)


def _start_sampler(interval_s: float, backends: Any) -> Any:
    from gpuwise.telemetry.sampler import MonitorConfig, Sampler

    sampler = Sampler(MonitorConfig(interval_s=interval_s, pids=(os.getpid(),)), backends)
    sampler.start()
    return sampler


class Watch(Generic[T]):
    """Iterate a loader, timing each batch's wait and each step (what ``watch`` returns).

    Inside ``profile()`` the steps go to that profile; otherwise iterating starts a profile
    of its own that ends with the loop, and ``run`` holds its Run.

    Attributes:
        run: The Run of the loop's own profile, once the loop has ended; else None.
    """

    def __init__(
        self,
        loader: Iterable[T],
        options: dict[str, Any],
        profiler: Callable[..., contextlib.AbstractContextManager[Profile]] = profile,
    ) -> None:
        self.loader = loader
        self.options = options
        self.profiler = profiler
        self.run: Run | None = None

    def __iter__(self) -> Iterator[T]:
        tracker = hooks.active_tracker()
        if tracker is not None:
            yield from _timed(self.loader, tracker)
            return
        with self.profiler(**self.options) as prof:
            yield from _timed(self.loader, hooks.active_tracker())
        self.run = prof.run


def watch(loader: Iterable[T], **options: Any) -> Watch[T]:
    """Wrap any batch iterable so that each step's data wait and phases are measured.

    Step boundaries come from the optimizer hook when the loop steps an optimizer, else
    from the loop's iterations. Works for any loader, not only ``torch.utils.data.DataLoader``.

    Args:
        loader: The batches.
        **options: ``profile()`` options for a loop run outside ``profile()``.

    Returns:
        An iterable of the same batches; its ``run`` is set after a loop outside
        ``profile()``.

    Example:
        >>> watched = gpuwise.watch(loader)  # doctest: +SKIP
        >>> for images, labels in watched:  # doctest: +SKIP
        ...     train_step(images, labels)
        >>> watched.run.step_stats()["fractions"]["data_wait"]  # doctest: +SKIP
    """
    return Watch(loader, options)


def _timed(loader: Iterable[T], tracker: Any) -> Iterator[T]:
    from gpuwise.profiling.patches import batch_size_of

    iterator = iter(loader)
    while True:
        tracker.batch_requested()
        try:
            batch = next(iterator)
        except StopIteration:
            tracker.batch_failed()
            return
        except BaseException:
            tracker.batch_failed()
            raise
        tracker.batch_ready(batch_size_of(batch))
        yield batch
