"""Write a gpuwise store record by record, atomically (see ``store.py`` for the layout).

The writer fills ``DST.tmp-<pid>/`` and renames it to ``DST`` in ``commit()``; an
exception or interruption before that removes the temporary directory, so a reader never
sees half a store. Checksums are computed while writing, not by re-reading.
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
from gpuwise.data.store import FORMAT, FORMAT_VERSION, HEADER, INDEX_DTYPE, FieldSpec
from gpuwise.errors import UsageError


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
        overwrite: Replace an existing ``dst`` (only when it is a gpuwise store).

    Raises:
        UsageError: ``dst`` exists and ``overwrite`` is false, or is not a store.

    Example:
        >>> spec = FieldSpec("x", "raw", np.dtype("<f4"), (3,), "x.bin")  # doctest: +SKIP
        >>> with StoreWriter("out.store", [spec]) as w:                 # doctest: +SKIP
        ...     w.append({"x": np.zeros(3, np.float32)})
        ...     w.commit()
    """

    def __init__(self, dst: str | Path, fields: list[FieldSpec], *, overwrite: bool = False):
        self.dst = Path(dst)
        check_destination(self.dst, overwrite)
        self.fields = fields
        self.tmp = tmp_name(self.dst)
        remove_stale(self.dst)  # left by a writer killed before it could clean up
        self.tmp.mkdir(parents=True)
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
        old = self.dst.with_name(f"{self.dst.name}.old-{os.getpid()}")
        if self.dst.exists():  # replaced by two renames: never a moment with half a store
            self.dst.rename(old)
        self.tmp.rename(self.dst)
        remove_quietly(old)
        return header

    def abort(self) -> None:
        """Close the shards and remove the temporary directory; never fails.

        On a full disk closing a shard fails again, and the directory must still go.
        """
        for shard in self._shards.values():
            with contextlib.suppress(OSError):
                shard.file.close()
        remove_quietly(self.tmp)


def check_destination(dst: Path, overwrite: bool) -> None:
    """Check that a store may be written at ``dst``.

    Args:
        dst: The destination directory.
        overwrite: Whether an existing store there may be replaced.

    Raises:
        UsageError: ``dst`` exists and ``overwrite`` is false, or it is not a store.
    """
    if not dst.exists():
        return
    if not overwrite:
        raise UsageError(f"{dst} already exists; pick a new destination or pass --overwrite")
    if not (dst / HEADER).is_file():
        raise UsageError(
            f"{dst} exists and is not a gpuwise store; refusing to overwrite it; "
            "pick a new destination"
        )
