"""Move batches to the device ahead of the consumer: uint8 across, transforms on the device.

Note [prefetch streams]
    On CUDA, batch ``k + 1 .. k + depth`` are copied on one side stream while batch ``k``
    computes on the consumer's stream. Each copy is ``non_blocking`` from the loader's
    pinned buffer, and a CUDA event is recorded after it (and after the optional
    transform, which runs on the side stream too). Handing batch ``k`` out, the consumer's
    current stream waits on that event (a device-side wait, no host sync) and every tensor
    gets ``record_stream`` so the caching allocator does not reuse its memory while the
    consumer's stream may still read it. Host buffers: the Loader overwrites batch
    ``j - 1``'s buffer when batch ``j + 1`` is requested (Note [batch ring] in
    ``loader.py``), so before pulling batch ``j + 1`` the prefetcher waits on batch
    ``j - 1``'s copy event — a copy issued long before, normally already done.

    On the CPU, one background thread pulls batches, copies them out of the loader's ring
    (or transforms them, which makes new tensors) and keeps up to ``depth`` in a bounded
    queue. Every wait has a timeout and checks a stop event; ``close()`` (also via the
    context manager, the end of iteration, or ``__del__``) stops and joins the thread.
    ``depth=0`` runs synchronously (no thread, no side stream): the reference that tests
    compare the asynchronous results against.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from gpuwise.errors import GpuwiseError
from gpuwise.profiling.hooks import register_loader

Batch = tuple[torch.Tensor, ...]
Transform = Callable[[torch.Tensor], torch.Tensor]
_END = object()
_POLL_S = 0.1


def _to_device(t: torch.Tensor, device: torch.device, non_blocking: bool) -> torch.Tensor:
    """Copy one tensor to the device (on the CPU: a copy out of the loader's buffer)."""
    if device.type == "cpu":
        return t.clone()
    return t.to(device, non_blocking=non_blocking)


class _Batches(Iterator[Batch]):
    """The prefetcher's iterator: a class (not a bare generator) so hooks can wrap __next__."""

    def __init__(self, source: Iterator[Batch]) -> None:
        self._source = source

    def __next__(self) -> Batch:
        return next(self._source)

    def close(self) -> None:
        """Stop early; the prefetcher's thread stops with it."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


@register_loader  # timed like a DataLoader by the step hooks
class DevicePrefetcher:
    """Iterate a loader's batches on ``device``, prepared ``depth`` batches ahead.

    Args:
        loader: Any iterable of tensor tuples (a ``Loader``, a DataLoader).
        device: Target device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        depth: Batches kept ready ahead of the consumer; 0 runs synchronously.
        transform: Applied on the device to the first tensor of each batch (the images),
            e.g. a ``gpuwise.data.transforms.DeviceTransform``.
        timeout_s: Longest wait for one batch before raising.

    Attributes:
        h2d_bytes: Bytes moved to the device so far, per position in the batch tuple.

    Example:
        >>> batches = DevicePrefetcher(Loader("train.store", 256), "cuda")  # doctest: +SKIP
        >>> for images, labels in batches:                                 # doctest: +SKIP
        ...     loss = model(images).sum()
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: str | torch.device,
        depth: int = 2,
        transform: Transform | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.loader, self.device = loader, torch.device(device)
        self.depth, self.transform, self.timeout_s = depth, transform, timeout_s
        self.h2d_bytes: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __enter__(self) -> DevicePrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _move(self, batch: Any, non_blocking: bool = False) -> Batch:
        items = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        moved = []
        for pos, t in enumerate(items):
            if len(self.h2d_bytes) <= pos:
                self.h2d_bytes.append(0)
            self.h2d_bytes[pos] += t.numel() * t.element_size()
            moved.append(_to_device(t, self.device, non_blocking))
        if self.transform is not None:
            moved[0] = self.transform(moved[0])
        return tuple(moved)

    def __iter__(self) -> Iterator[Batch]:
        self.close()
        self._stop.clear()
        if self.depth <= 0:
            return _Batches(self._move(b) for b in self.loader)
        if self.device.type == "cuda":
            return _Batches(self._cuda_iter())
        return _Batches(self._cpu_iter())

    # CUDA path: see Note [prefetch streams].
    def _cuda_iter(self) -> Iterator[Batch]:
        stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        source = iter(self.loader)
        ready: collections.deque[tuple[Batch, torch.cuda.Event]] = collections.deque()
        copies: collections.deque[torch.cuda.Event] = collections.deque(maxlen=2)
        done = False
        while True:
            while not done and len(ready) < self.depth:
                if len(copies) == 2:
                    copies[0].synchronize()  # batch j-1's host buffer is about to be reused
                batch = next(source, None)
                if batch is None:
                    done = True
                    break
                with torch.cuda.stream(stream):
                    moved = self._move(batch, non_blocking=True)
                    event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                    event.record(stream)
                copies.append(event)
                ready.append((moved, event))
            if not ready:
                return
            moved, event = ready.popleft()
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for t in moved:
                t.record_stream(current)
            yield moved

    # CPU path: see Note [prefetch streams].
    def _cpu_iter(self) -> Iterator[Batch]:
        self._queue = queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(
            target=self._work, name="gpuwise-prefetch", args=(self._queue,), daemon=True
        )
        self._thread.start()
        try:
            while True:
                item = self._get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def _get(self) -> Any:
        waited = 0.0
        while waited < self.timeout_s:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                waited += _POLL_S
                if self._thread is None or not self._thread.is_alive():
                    return _END if self._queue.empty() else self._queue.get_nowait()
        raise GpuwiseError(
            f"no batch arrived within {self.timeout_s} s; the loader is stuck; check it "
            "without the prefetcher"
        )

    def _put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _work(self, q: queue.Queue[Any]) -> None:
        source = iter(self.loader)
        try:
            for batch in source:
                if self._stop.is_set() or not self._put(q, self._move(batch)):
                    break
            self._put(q, _END)
        except BaseException as err:  # handed to the consumer, raised there
            self._put(q, err)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """Stop the background thread and wait for it (at most ``timeout_s``)."""
        stop = getattr(self, "_stop", None)
        thread = getattr(self, "_thread", None)
        if stop is None or thread is None:
            return
        stop.set()
        if thread is not threading.current_thread():
            thread.join(timeout=self.timeout_s)
        self._thread = None
