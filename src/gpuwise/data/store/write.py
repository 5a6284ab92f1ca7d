"""Write a gpuwise store record by record, atomically (see ``read.py`` for the layout).

The writer fills ``DST.tmp-<pid>/`` and renames it to ``DST`` in ``commit()``; an
exception or interruption before that removes the temporary directory, so a reader never
sees half a store. It holds the destination's lock from start to end and replaces only a
store gpuwise wrote (Note [store ownership] in ``owner.py``). Checksums are
computed while writing, not by re-reading.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

import numpy as np

from gpuwise._version import __version__
from gpuwise.atomic import remove_quietly, remove_stale, tmp_name, write_atomic
from gpuwise.data.store.owner import (
    MARKER,
    DestinationLock,
    check_destination,
    marker_text,
    move_into_place,
)
from gpuwise.data.store.read import FORMAT, FORMAT_VERSION, HEADER, INDEX_DTYPE, FieldSpec
from gpuwise.errors import UsageError

__all__ = ["StoreWriter", "check_destination"]


class _Shard:
    """An output file with a running sha256 and byte count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: IO[bytes] = path.open("wb")
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes | memoryview) -> None:
        self.file.write(data)
        self.sha256.update(data)
        self.bytes += len(data)

    def entry(self) -> dict[str, Any]:
        return {"file": self.path.name, "bytes": self.bytes, "sha256": self.sha256.hexdigest()}


class StoreWriter:
    """Append records to a new store; ``commit()`` renames it into place.

    Args:
        dst: The store directory to create.
        fields: The record layout (raw fields with dtype and shape, jpeg fields).
        overwrite: Replace an existing ``dst`` (only when it is a store gpuwise wrote).

    Raises:
        DestinationTaken: ``dst`` exists and ``overwrite`` is false, or is not a store
            gpuwise wrote, or another process is writing it.

    Example:
        >>> spec = FieldSpec("x", "raw", np.dtype("<f4"), (3,), "x.bin")  # doctest: +SKIP
        >>> with StoreWriter("out.store", [spec]) as w:                 # doctest: +SKIP
        ...     w.append({"x": np.zeros(3, np.float32)})
        ...     w.commit()
    """

    def __init__(self, dst: str | Path, fields: list[FieldSpec], *, overwrite: bool = False):
        self.dst = Path(dst)
        self.overwrite = overwrite
        check_destination(self.dst, overwrite)
        self.fields = fields
        self.tmp = tmp_name(self.dst)
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        self._lock = DestinationLock(self.dst)
        try:
            check_destination(self.dst, overwrite)  # again, now that no writer can change it
            remove_stale(self.dst)  # left by a writer killed before it could clean up
            self.tmp.mkdir()
        except BaseException:
            self._lock.release()
            raise
        self.records = 0
        self._shards: dict[str, _Shard] = {}
        self._offsets: dict[str, int] = {}
        for spec in fields:
            self._shards[spec.file] = _Shard(self.tmp / spec.file)
            if spec.index is not None:
                self._shards[spec.index] = _Shard(self.tmp / spec.index)
                self._shards[spec.index].write(np.zeros(1, INDEX_DTYPE).tobytes())
                self._offsets[spec.name] = 0

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tmp.exists():
            self.abort()
        self._lock.release()

    def append(self, record: dict[str, Any]) -> None:
        """Write one record: an array per raw field, encoded bytes per jpeg field.

        Args:
            record: One value per field, by field name.

        Raises:
            UsageError: A raw value has the wrong shape for its field.
        """
        for spec in self.fields:
            value = record[spec.name]
            if spec.kind == "jpeg":
                self._shards[spec.file].write(memoryview(value).cast("B"))
                self._offsets[spec.name] += memoryview(value).nbytes
                end = np.array([self._offsets[spec.name]], INDEX_DTYPE)
                assert spec.index is not None
                self._shards[spec.index].write(end.tobytes())
                continue
            arr = np.asarray(value, dtype=spec.dtype)
            if arr.shape != spec.shape:
                raise UsageError(
                    f"record {self.records}: field {spec.name!r} has shape {arr.shape}, "
                    f"expected {spec.shape} like the first record; give every record one "
                    "shape (pack with --size to resize images)"
                )
            self._shards[spec.file].write(arr.tobytes())
        self.records += 1

    def commit(self, **header_extra: Any) -> dict[str, Any]:
        """Write the header and rename the store into place.

        Args:
            **header_extra: More header keys (``mode``, ``classes``, ``skipped``, ``pack``).

        Returns:
            The header written.
        """
        for shard in self._shards.values():
            shard.file.flush()
            os.fsync(shard.file.fileno())
            shard.file.close()
        header = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created_by": f"gpuwise {__version__}",
            "records": self.records,
            "fields": {s.name: s.to_dict() for s in self.fields},
            "shards": [s.entry() for s in self._shards.values()],
            **header_extra,
        }
        write_atomic(self.tmp / HEADER, json.dumps(header, indent=1) + "\n", what="store header")
        write_atomic(self.tmp / MARKER, marker_text(header["created_by"]), what="store marker")
        try:
            move_into_place(self.tmp, self.dst, self.overwrite)
        except BaseException:
            self.abort()
            raise
        self._lock.release()
        return header

    def abort(self) -> None:
        """Close the shards and remove the temporary directory; never fails.

        On a full disk closing a shard fails again, and the directory must still go.
        """
        for shard in self._shards.values():
            with contextlib.suppress(OSError):
                shard.file.close()
        remove_quietly(self.tmp)
        self._lock.release()
