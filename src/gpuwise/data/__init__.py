"""Feeding the device: store, batch loader, device prefetcher, device transforms.

Re-exported lazily so that ``import gpuwise.data`` stays cheap.

Example:
    >>> from gpuwise.data import Loader, open_store  # doctest: +SKIP
    >>> for images, labels in Loader(open_store("train.store"), batch_size=256): ...
"""

from __future__ import annotations

from gpuwise._lazy import lazy_exports

_EXPORTS = {
    "DevicePrefetcher": "gpuwise.data.prefetch",
    "DeviceTransform": "gpuwise.data.transforms",
    "Loader": "gpuwise.data.loader",
    "PackConfig": "gpuwise.data.pack",
    "Store": "gpuwise.data.store.read",
    "open_store": "gpuwise.data.store.read",
    "pack": "gpuwise.data.pack",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
