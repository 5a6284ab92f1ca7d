"""Accelerate's ``prepare``: which of the job's loaders and optimizers it was handed.

An Accelerate script builds its own DataLoader and optimizer and hands them to
``accelerator.prepare``, which wraps the optimizer (``AcceleratedOptimizer``) and builds a
new loader (``DataLoaderShard`` or ``DataLoaderDispatcher``) from the first one's
settings. Those rebuilt loaders are not the job's own: a fix goes on the DataLoader the
script built (``rebuilt_by_accelerate``). ``watch_prepare`` wraps ``Accelerator.prepare``
once accelerate is imported, so that each loader and optimizer record handed to it carries
the file:line of the ``prepare`` call (``prepared_at``): a script that builds a second,
plain optimizer beside the prepared one (Accelerate's own ``test_sync.py`` does) gets its
fix on the one Accelerate trains with. ``accelerator_site`` finds the ``Accelerator(...)``
call that built the accelerator ``prepare`` was called on, where mixed precision,
compilation and gradient accumulation are set.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ACCELERATE_LOADERS = f"{os.sep}accelerate{os.sep}data_loader.py"
"""Accelerate's module that rebuilds a script's loader (``prepare_data_loader``,
``skip_first_batches``)."""


def rebuilt_by_accelerate(stack_files: list[str]) -> bool:
    """Whether a DataLoader under construction is Accelerate's copy of the script's loader."""
    return any(f.endswith(ACCELERATE_LOADERS) for f in stack_files)


def watch_prepare(handed: Callable[[Any, tuple[Any, ...]], None]) -> bool:
    """Wrap ``Accelerator.prepare`` (once) to call ``handed(accelerator, args)`` before it runs.

    Args:
        handed: Called with the accelerator and the objects passed to ``prepare``; what it
            raises is ignored (recording never breaks the user's call).

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
            handed(self, args)
        return original(self, *args, **kwargs)

    prepare._gpuwise_watched = True  # type: ignore[attr-defined]
    cls.prepare = prepare
    return True


def _builds_accelerator(node: ast.Assign, names: set[str]) -> bool:
    """Whether ``node`` is ``NAME = Accelerator(...)`` (or ``accelerate.Accelerator``)."""
    if not isinstance(node.value, ast.Call):
        return False
    func = node.value.func
    callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return callee == "Accelerator" and any(
        isinstance(t, ast.Name) and t.id in names for t in node.targets
    )


def construction_line(file: str, names: set[str], first: int, last: int) -> int | None:
    """The last ``NAME = Accelerator(...)`` of ``file`` between lines ``first`` and ``last``."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    lines = [n.lineno for n in assigns if _builds_accelerator(n, names)]
    lines = [line for line in lines if first <= line <= last]
    return max(lines) if lines else None


def accelerator_site(
    accelerator: Any, frame: FrameType | None, is_library: Callable[[str], bool]
) -> dict[str, Any] | None:
    """Where the script built ``accelerator``: the file and line of its ``Accelerator(...)``.

    Walks out from ``frame``: in each frame of the user's code, the names bound to
    ``accelerator`` are looked up as assignment targets of an ``Accelerator(...)`` call
    between the function's first line and the line running now (a function that was handed
    the accelerator has none, and the walk goes on to its caller).

    Returns:
        ``{"file", "line"}``, or ``None`` when no such call is found.
    """
    while frame is not None:
        file = frame.f_code.co_filename
        if not is_library(file):
            names = {n for n, v in frame.f_locals.items() if v is accelerator}
            first, last = frame.f_code.co_firstlineno, frame.f_lineno
            line = construction_line(file, names, first, last) if names else None
            if line is not None:
                return {"file": os.path.abspath(file), "line": line}
        frame = frame.f_back
    return None
