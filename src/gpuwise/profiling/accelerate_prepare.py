"""Accelerate's ``prepare``: which of the job's loaders and optimizers it was handed.

An Accelerate script builds its own DataLoader and optimizer and hands them to
``accelerator.prepare``, which wraps the optimizer (``AcceleratedOptimizer``) and builds a
new loader (``DataLoaderShard`` or ``DataLoaderDispatcher``) from the first one's
settings. Those rebuilt loaders are not the job's own: a fix goes on the DataLoader the
script built (``rebuilt_by_accelerate``). ``watch_prepare`` wraps ``Accelerator.prepare``
once accelerate is imported, so that each loader and optimizer record handed to it carries
the file:line of the ``prepare`` call (``prepared_at``): a script that builds a second,
plain optimizer beside the prepared one (Accelerate's own ``test_sync.py`` does) gets its
fix on the one Accelerate trains with.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

ACCELERATE_LOADERS = f"{os.sep}accelerate{os.sep}data_loader.py"
"""Accelerate's module that rebuilds a script's loader (``prepare_data_loader``,
``skip_first_batches``)."""


def rebuilt_by_accelerate(stack_files: list[str]) -> bool:
    """Whether a DataLoader under construction is Accelerate's copy of the script's loader."""
    return any(f.endswith(ACCELERATE_LOADERS) for f in stack_files)


def watch_prepare(handed: Callable[[tuple[Any, ...]], None]) -> bool:
    """Wrap ``Accelerator.prepare`` (once) to call ``handed(args)`` before it runs.

    Args:
        handed: Called with the objects passed to ``prepare``; what it raises is ignored
            (recording never breaks the user's call).

    Returns:
        Whether ``prepare`` is wrapped (``False`` while accelerate is not imported).
    """
    module = sys.modules.get("accelerate.accelerator")
    cls = getattr(module, "Accelerator", None)
    if cls is None:
        return False
    original = cls.prepare
    if getattr(original, "_gpuwise_watched", False):
        return True

    @functools.wraps(original)
    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            handed(args)
        return original(self, *args, **kwargs)

    prepare._gpuwise_watched = True  # type: ignore[attr-defined]
    cls.prepare = prepare
    return True
