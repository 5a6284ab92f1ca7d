"""Write a file all at once or not at all: a temporary sibling, fsync, then rename.

Every report file (``--out``, ``--html``, ``--trace``) and every store header goes
through :func:`write_atomic`, so a full disk, a signal or an exception leaves either the
old file or none, never a truncated one, and never a temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from gpuwise.errors import GpuwiseError

TMP_MARK = ".tmp-"
"""Temporary names are ``NAME.tmp-<pid>``: a stale one names the process that left it."""


class WriteError(GpuwiseError):
    """A file could not be written (disk full, no permission); nothing was left behind."""


def tmp_name(path: Path) -> Path:
    """The temporary sibling of ``path`` for this process (``NAME.tmp-<pid>``)."""
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


def write_atomic(path: str | Path, data: bytes | str, *, what: str = "file") -> None:
    """Write ``data`` to ``path`` atomically; on any error remove the partial file.

    Args:
        path: The file to create or replace; its folder must exist.
        data: The content (``str`` is written as UTF-8).
        what: What the file is, for the error message (``"run"``, ``"HTML report"``).

    Raises:
        WriteError: The file could not be written; the message names the path and cause.

    Example:
        >>> write_atomic("run.json", "{}", what="run")  # doctest: +SKIP
    """
    target = Path(path)
    tmp = tmp_name(target)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        remove_quietly(tmp)
        if isinstance(err, OSError):
            raise WriteError(
                f"cannot write the {what} to '{path}': {err.strerror or err}; "
                "free space or choose another path"
            ) from err
        raise


def remove_quietly(path: Path) -> None:
    """Remove a file or a folder tree, ignoring every error (a cleanup must not fail)."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(path: Path) -> list[Path]:
    """Remove ``NAME.tmp-<pid>`` siblings of ``path`` whose process has ended.

    A killed writer (SIGKILL, power loss) cannot clean up after itself; the next writer
    of the same name does it.

    Args:
        path: The final name (file or folder).

    Returns:
        The temporary paths removed.
    """
    removed = []
    folder = path.parent if str(path.parent) else Path(".")
    prefix = f"{path.name}{TMP_MARK}"
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            pid_text = entry.name[len(prefix) :]
            if not entry.name.startswith(prefix) or not pid_text.isdigit():
                continue
            if int(pid_text) == os.getpid() or not pid_alive(int(pid_text)):
                remove_quietly(entry)
                removed.append(entry)
    return removed
