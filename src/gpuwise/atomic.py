"""Write a file all at once or not at all: a temporary sibling, fsync, then rename.

Every report file (``--out``, ``--html``, ``--trace``, ``--json FILE``) and every store
header goes through :func:`write_atomic` (:func:`open_output` when written piece by piece),
so a full disk, a signal or an exception leaves either the old file or none, never a
truncated one, and never a temporary file behind.

Note [output kinds]
    Only a regular file is replaced by a rename. A symlink is written through: its final
    target (created when missing) is the file replaced atomically, and the link stays a
    link. A character or block device, a FIFO or a socket is written as a stream, opened
    for writing as it is (``--out /dev/stdout``, ``--out /dev/null`` or a named pipe a
    reader waits on); renaming over it would replace the device node itself. A folder is
    refused. ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` are written to the open
    descriptor itself, after what the command already printed there: reopening them by
    name fails for a pipe (``/proc/self/fd/1 -> pipe:[...]``) and, for a redirected file,
    would replace or truncate the very file the text report goes to.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from gpuwise.errors import GpuwiseError

TMP_MARK = ".tmp-"
"""Temporary names are ``NAME.tmp-<pid>``: a stale one names the process that left it."""


class WriteError(GpuwiseError):
    """A file could not be written (disk full, no permission); nothing was left behind."""


def tmp_name(path: Path) -> Path:
    """The temporary sibling of ``path`` for this process (``NAME.tmp-<pid>``)."""
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


STD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/stdin": 0}
_FD_FOLDERS = ("/dev/fd/", "/proc/self/fd/")


def open_fd_of(path: str | Path) -> int | None:
    """The descriptor ``path`` names (``/dev/stdout`` -> 1, ``/dev/fd/3`` -> 3), or ``None``."""
    name = os.path.normpath(str(path))
    if name in STD_STREAMS:
        return STD_STREAMS[name]
    for folder in _FD_FOLDERS:
        if name.startswith(folder) and name[len(folder) :].isdigit():
            return int(name[len(folder) :])
    return None


@contextlib.contextmanager
def _write_fd(fd: int, what: str, path: str | Path) -> Iterator[BinaryIO]:
    """Write to an open descriptor after flushing Python's own buffers of it."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        with os.fdopen(os.dup(fd), "wb") as fh:  # closing the copy leaves ``fd`` open
            yield fh
    except OSError as err:
        raise _write_error(what, path, err) from err


def output_target(path: str | Path) -> tuple[Path, bool]:
    """Where a write to ``path`` lands, and whether it is a stream (Note [output kinds]).

    Returns:
        The final target (a symlink's target, followed to its end) and ``True`` for a
        device, FIFO or socket (written in place), ``False`` for a regular file (new or
        existing: replaced atomically).

    Raises:
        WriteError: ``path`` is a folder, or a symlink loop.
    """
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new file: its folder is checked later
        return target, False
    except OSError as err:
        raise WriteError(f"cannot write to '{path}': {err.strerror or err}") from err
    if stat.S_ISDIR(mode):
        raise WriteError(f"cannot write to '{path}': it is a folder; give a file name")
    return target, not stat.S_ISREG(mode)


def write_atomic(path: str | Path, data: bytes | str, *, what: str = "file") -> None:
    """Write ``data`` to ``path``: atomically for a file, as a stream for a device.

    See Note [output kinds]: a symlink's target is replaced (the link stays), a device
    or FIFO is written in place, a regular file is replaced by a fsynced sibling.

    Args:
        path: The file to create or replace; its folder must exist.
        data: The content (``str`` is written as UTF-8).
        what: What the file is, for the error message (``"run"``, ``"HTML report"``).

    Raises:
        WriteError: The file could not be written; the message names the path and cause.

    Example:
        >>> write_atomic("run.json", "{}", what="run")  # doctest: +SKIP
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with open_output(path, what=what) as fh:
        fh.write(payload)


@contextlib.contextmanager
def open_output(path: str | Path, *, what: str = "file") -> Iterator[BinaryIO]:
    """Open ``path`` for writing in binary, committed only when the block ends cleanly.

    The streaming form of :func:`write_atomic`, for outputs written piece by piece (a
    copied trace): the same Note [output kinds] applies. A regular file's new content
    goes to a fsynced sibling renamed over it at the end; an exception in the block
    removes the sibling and leaves the old file. A device or FIFO is written in place.

    Raises:
        WriteError: The file could not be opened or written; nothing partial is left.

    Example:
        >>> with open_output("out.json", what="trace") as fh:  # doctest: +SKIP
        ...     fh.write(b"{}")
    """
    fd = open_fd_of(path)
    if fd is not None:
        with _write_fd(fd, what, path) as fh:
            yield fh
        return
    try:
        target, stream = output_target(path)
    except WriteError as err:
        raise WriteError(str(err).replace("write to", f"write the {what} to", 1)) from err
    if stream:
        try:
            with open(target, "wb") as fh:
                yield fh
        except OSError as err:
            raise _write_error(what, path, err) from err
        return
    tmp = tmp_name(target)
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):  # keep the permissions of the file replaced
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException as err:
        remove_quietly(tmp)
        if isinstance(err, OSError):
            raise _write_error(what, path, err) from err
        raise


def _write_error(what: str, path: str | Path, err: OSError) -> WriteError:
    return WriteError(
        f"cannot write the {what} to '{path}': {err.strerror or err}; "
        "free space or choose another path"
    )


def check_output(path: str | Path, what: str) -> str | None:
    """Why ``path`` cannot be written as an output file, or ``None`` when it can.

    Checked before long work, so that a run does not end in a failed write.
    """
    fd = open_fd_of(path)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            return f"descriptor {fd} is not open"
        return None
    try:
        target, stream = output_target(path)
    except WriteError as err:
        return str(err).split(": ", 1)[-1]
    if stream:
        return None if os.access(target, os.W_OK) else f"{target} is not writable"
    folder = target.parent if str(target.parent) else Path(".")
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not folder.is_dir():
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder} is not writable"
    return None


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


class SameFileError(GpuwiseError):
    """An output path names an input of the same command, or another output (exit 2)."""

    exit_status = 2


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when ``a`` and ``b`` name one file: by name (links resolved) or by inode.

    A hard link or a bind mount has another name but the same device and inode.
    """
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _stream(path: str | Path) -> bool:
    """True for a device, FIFO, socket or open descriptor: written in place, never replaced."""
    if open_fd_of(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_outputs(
    outputs: Sequence[tuple[str | Path | None, str]], inputs: Sequence[tuple[str | Path, str]]
) -> None:
    """Refuse, before any work, an output that would replace an input or another output.

    Note [outputs never replace inputs]: every command that writes files passes its
    output paths (``--out``, ``--html``, ``--trace``, ``--patch``, ...) and its inputs (the
    files it reads, the command's own script) here first. A device or FIFO output
    (``/dev/stdout``, ``/dev/null``) is written in place and replaces nothing.

    Args:
        outputs: ``(path, what)`` of each output asked for (``None``: not asked).
        inputs: ``(path, what)`` of each input.

    Raises:
        SameFileError: An output is an input, or two outputs are one file.

    Example:
        >>> check_outputs([("r.json", "run")], [("trace.json", "trace")])
    """
    named = [(p, what) for p, what in outputs if p]
    for i, (path, what) in enumerate(named):
        if _stream(path):
            continue
        for other, kind in [*inputs, *named[:i]]:
            if same_file(path, other):
                raise SameFileError(
                    f"the {what} '{path}' is the {kind} '{other}' of this command: writing it "
                    "would replace it; choose another path"
                )
