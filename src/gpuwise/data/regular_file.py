"""Reading a file that may not be one: opened without blocking, refused unless regular.

Note [sources are regular files]: a path from the user (an image to pack, a store's
header) is opened with ``O_NONBLOCK`` and checked on the open descriptor, so that a FIFO
(which would block ``open`` until a writer comes) or a device such as ``/dev/zero``
(endless) is refused before a byte is read, and a regular file is read up to a bound only.
Each caller words the refusal for its own input.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularFileError(OSError):
    """The path is a FIFO, a device, a socket or a folder (``mode`` is its ``st_mode``)."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(f"{path} is {kind_of(mode)}, not a regular file")
        self.mode = mode


class FileTooLargeError(OSError):
    """The file holds more than the ``limit`` bytes its reader takes."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(f"{path} is larger than {limit} bytes")
        self.limit = limit


def read_regular(path: Path, limit: int) -> bytes:
    """Return the bytes of the regular file ``path``, at most ``limit`` of them.

    Args:
        path: The file to read.
        limit: The most bytes the caller takes; a larger file is refused.

    Raises:
        NotRegularFileError: ``path`` is no regular file; nothing was read.
        FileTooLargeError: It holds more than ``limit`` bytes.
        OSError: It cannot be opened or read (``FileNotFoundError`` when it is gone).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode  # before fdopen, which refuses a folder in words of its own
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(path, mode)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(path, limit)
    return data


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words (``a FIFO``, ``a folder``, ...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"
