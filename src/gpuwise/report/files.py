"""The files a Run is written to: the Run as JSON, the HTML report, the Perfetto trace.

One place decides how each file is made, for every command that writes them
(``profile``, ``analyze``, ``serve-bench``). Each file is written atomically; NaN and
infinity, which JSON cannot hold, become ``null``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuwise.errors import GpuwiseError

if TYPE_CHECKING:
    from gpuwise.records import Run

RUN_FILES = ("run", "HTML report", "trace")
"""What each of ``write_run_files``'s files is, in the order they are written."""


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, infinity) in it replaced by ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(doc: Any, indent: int | None = None) -> str:
    """``doc`` as strict JSON text (non-finite numbers as ``null``; others by ``str``)."""
    return json.dumps(finite(doc), indent=indent, default=str, allow_nan=False)


def write_run_json(run: Run, path: str) -> None:
    """Write the whole Run, samples included, as one JSON document.

    Raises:
        WriteError: The file could not be written (no partial file is left).

    Example:
        >>> write_run_json(run, "run.json")  # doctest: +SKIP
    """
    from gpuwise.atomic import write_atomic

    write_atomic(path, json_text(run.to_dict()), what="run")


def write_run_files(
    run: Run,
    *,
    out: str | None = None,
    html: str | None = None,
    trace: str | None = None,
    full_paths: bool = False,
) -> list[str]:
    """Write each file asked for; one that fails does not stop the others.

    Args:
        run: The Run to write.
        out: Path of the Run as JSON (``None``: not written).
        html: Path of the self-contained HTML report.
        trace: Path of the Chrome/Perfetto trace (``.gz``: compressed).
        full_paths: Keep absolute paths in the HTML report as recorded (default: shortened
            to the working folder, a file people share).

    Returns:
        The paths written, in the order of ``RUN_FILES``.

    Raises:
        GpuwiseError: A file could not be written (the first such failure is named).

    Example:
        >>> write_run_files(run, out="run.json", html="report.html")  # doctest: +SKIP
        ['run.json', 'report.html']
    """
    if not (out or html or trace):
        return []  # nothing asked: the HTML and trace writers stay unimported
    from gpuwise.report.html.run import write_html
    from gpuwise.report.trace import write_trace

    files: list[tuple[str | None, str, Callable[[Run, str], None]]] = [
        (out, "run", write_run_json),
        (html, "HTML report", functools.partial(write_html, full_paths=full_paths)),
        (trace, "trace", write_trace),
    ]
    asked = [(path, what, write) for path, what, write in files if path]
    errors: list[GpuwiseError] = []
    for path, what, write in asked:
        try:
            write(run, path)
        except OSError as err:
            message = f"cannot write the {what} to '{path}': {err.strerror}; choose another path"
            errors.append(GpuwiseError(message))
        except GpuwiseError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    return [path for path, _, _ in asked]
