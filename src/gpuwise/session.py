"""``gpuwise.profile()`` and ``gpuwise.watch()`` as users call them: recorded, then diagnosed.

The recording itself is ``gpuwise.profiling.api`` (which never diagnoses); this module sits
on top of it and of ``gpuwise.diagnose``, like the CLI, and decides when to diagnose: when
the profile ends, unless ``diagnose=False``.

Example:
    >>> import gpuwise
    >>> with gpuwise.profile(sample=False, diagnose=False) as prof:
    ...     pass
    >>> prof.run.source
    'api'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from gpuwise.profiling import api
from gpuwise.records import Run

T = TypeVar("T")


def _diagnosed(run: Run) -> None:
    from gpuwise.diagnose.rules import diagnose

    if "mfu" not in run.extra and run.extra.get("model_flops"):
        from gpuwise.efficiency.model_mfu import counted_mfu_section

        section = counted_mfu_section(run)  # from the FLOPs counted on the first iteration
        if section is not None:
            run.extra["mfu"] = section
    run.findings = diagnose(run)


@contextlib.contextmanager
def profile(*, diagnose: bool = True, **options: Any) -> Iterator[api.Profile]:
    """Profile the loop run inside the ``with`` block, then diagnose it.

    Args:
        diagnose: Fill ``run.findings`` with the diagnosis when the block ends (default),
            and ``run.extra["mfu"]`` from the model's FLOPs counted on its first iteration.
        **options: ``interval_s``, ``sample``, ``backends`` (see ``gpuwise.profiling.api``).

    Yields:
        A Profile whose ``run`` is set when the block ends, also when it raised.

    Example:
        >>> with gpuwise.profile() as prof:  # doctest: +SKIP
        ...     train(model, loader, epochs=1)
        >>> prof.run.findings[0].kind  # doctest: +SKIP
        'input_bound'
    """
    with api.profile(finish=_diagnosed if diagnose else None, **options) as handle:
        yield handle


def watch(loader: Iterable[T], **options: Any) -> api.Watch[T]:
    """Wrap any batch iterable so each step is measured (see ``gpuwise.profiling.api.watch``).

    Args:
        loader: The batches.
        **options: ``profile()`` options (``diagnose`` included) for a loop run outside one.

    Returns:
        An iterable of the same batches; its ``run`` is set after a loop outside
        ``profile()``.
    """
    return api.Watch(loader, options, profile)
