"""What a store writer may replace: only a store gpuwise wrote, and one writer per destination.

Note [store ownership]
    Every store gpuwise writes holds a marker file (``.gpuwise-store``). A destination
    counts as *owned* when it is a directory holding the marker, a gpuwise
    ``header.json`` and nothing else but the shards that header lists: a directory a
    user made, or a store a user dropped a file into, is not owned and is never
    replaced. A writer holds an exclusive ``flock`` on the sibling
    ``.DST.gpuwise-lock`` from its start to its end, so a second writer to the same
    destination fails at once instead of silently replacing the first one's store. At
    commit the destination is looked at again under the lock: it may have appeared
    (made by a user, or by a writer that did not use the lock) while the store was
    written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from pathlib import Path

from gpuwise.data.store.read import HEADER
from gpuwise.errors import UsageError

MARKER = ".gpuwise-store"
"""The marker file inside every store gpuwise writes (Note [store ownership])."""


def marker_text(created_by: str) -> str:
    """The marker file's content: what wrote the store (for a person who finds it)."""
    return json.dumps({"format": "gpuwise-store", "created_by": created_by}) + "\n"


def owned_store(path: Path) -> bool:
    """Whether ``path`` is a store gpuwise wrote, holding nothing a user added."""
    if path.is_symlink() or not (path / MARKER).is_file():
        return False
    try:
        header = json.loads((path / HEADER).read_text(encoding="utf-8"))
        names = {str(s["file"]) for s in header["shards"]}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if header.get("format") != "gpuwise-store":
        return False
    try:
        present = {entry.name for entry in path.iterdir()}
    except OSError:
        return False
    return present <= names | {HEADER, MARKER}


class DestinationTaken(UsageError):
    """A store destination holds something this writer may not replace (exit 2)."""

    exit_status = 2


def refusal(dst: Path, why: str) -> DestinationTaken:
    """The error of a destination the writer will not replace."""
    return DestinationTaken(
        f"{dst} {why}; gpuwise replaces only a store it wrote itself, and only with "
        "--overwrite; pick a new destination, or move what is there away"
    )


def check_destination(dst: Path, overwrite: bool) -> None:
    """Check that a store may be written at ``dst`` (Note [store ownership]).

    Args:
        dst: The destination directory.
        overwrite: Whether an existing store there may be replaced.

    Raises:
        DestinationTaken: ``dst`` exists and ``overwrite`` is false, or it is not an owned
            store.
    """
    if not os.path.lexists(dst):
        return
    if not owned_store(dst):
        raise refusal(
            dst, "exists and is not a gpuwise store (or holds files gpuwise did not write)"
        )
    if not overwrite:
        raise DestinationTaken(
            f"{dst} already exists (a gpuwise store); pick a new destination or pass --overwrite"
        )


class DestinationLock:
    """An exclusive lock on a store destination, held by one writer (Note [store ownership]).

    Args:
        dst: The destination directory.

    Raises:
        DestinationTaken: Another process holds the lock (it is writing the same destination).
    """

    def __init__(self, dst: Path) -> None:
        self.path = dst.with_name(f".{dst.name}.gpuwise-lock")
        self.fd = -1
        while self.fd < 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise DestinationTaken(
                    f"another process (pid {holder}) is writing a store to {dst}; wait for "
                    "it to finish, or pick another destination"
                ) from None
            if self._same_file(fd):  # not unlinked by the last holder meanwhile
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                self.fd = fd
            else:
                os.close(fd)

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file and drop the lock (unlink first: see ``_same_file``)."""
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = -1


def move_into_place(tmp: Path, dst: Path, overwrite: bool) -> None:
    """Rename the finished store ``tmp`` to ``dst``; replace only an owned store.

    Call with the destination's lock held.

    Raises:
        DestinationTaken: ``dst`` appeared while the store was written and is not an owned
            store, or is one and ``overwrite`` is false; ``tmp`` is left for the caller.
    """
    if not os.path.lexists(dst):
        try:
            os.rename(tmp, dst)  # fails when a non-empty directory or a file appeared
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
    check_destination(dst, overwrite)
    old = dst.with_name(f"{dst.name}.old-{os.getpid()}")
    os.rename(dst, old)  # replaced by two renames: never a moment with half a store
    if not owned_store(old):  # something was added in the instant before the rename
        os.rename(old, dst)
        raise refusal(dst, "changed while the store was written")
    os.rename(tmp, dst)
    from gpuwise.atomic import remove_quietly

    remove_quietly(old)
