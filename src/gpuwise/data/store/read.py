"""Read a gpuwise store: a directory of one JSON header and raw binary shards.

Layout of ``DST/`` (format version 1)::

    header.json         {"format": "gpuwise-store", "format_version": 1, "records": N,
                         "mode": "raw" | "jpeg", "classes": [...] | null,
                         "fields": {NAME: FIELD, ...}, "shards": [SHARD, ...],
                         "skipped": [{"item", "reason"}], "pack": {...}}
    <name>.bin          a "raw" field: N records of one dtype and shape, C order
    <name>.jpeg.bin     a "jpeg" field: the encoded images back to back
    <name>.idx.bin      its index: N + 1 little-endian uint64 byte offsets

``FIELD`` is ``{"kind": "raw", "dtype": "|u1", "shape": [224, 224, 3], "file": ...}`` or
``{"kind": "jpeg", "file": ..., "index": ...}``; ``SHARD`` is ``{"file", "bytes",
"sha256"}``. Shards are read with ``np.memmap``; opening a store checks the header and the
shard sizes, and never unpickles or executes anything. ``verify()`` also checks the
checksums.

Example:
    >>> store = open_store("train.store")          # doctest: +SKIP
    >>> images = store.raw("image")                # N x 224 x 224 x 3 uint8 memmap
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuwise.data.store.check import check_header, read_header_bytes, shard_path
from gpuwise.errors import StoreFormatError, StoreHeaderError

FORMAT = "gpuwise-store"
FORMAT_VERSION = 1
HEADER = "header.json"

INDEX_DTYPE = np.dtype("<u8")
_HASH_CHUNK_BYTES = 4 << 20
_NEXT = "run `gpuwise store verify {path}`, or re-pack it with `gpuwise pack`"


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of every record.

    Attributes:
        name: Field name (``"image"``, ``"label"``, ...).
        kind: ``"raw"`` (fixed-shape array) or ``"jpeg"`` (variable-length encoded image).
        dtype: Element type of a raw field (``uint8`` for a jpeg field's bytes).
        shape: Per-record shape of a raw field (``()`` for a scalar, ``None`` for jpeg).
        file: Shard holding the data.
        index: Shard holding a jpeg field's offsets (``None`` for raw).
    """

    name: str
    kind: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...] | None
    file: str
    index: str | None = None

    @property
    def record_bytes(self) -> int | None:
        """Bytes per record of a raw field (``None`` for jpeg)."""
        if self.shape is None:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def to_dict(self) -> dict[str, Any]:
        """Give the header form of the field.

        Returns:
            ``{"kind", "file", "dtype", "shape"}`` (raw) or ``{"kind", "file", "index"}``.
        """
        d: dict[str, Any] = {"kind": self.kind, "file": self.file}
        if self.kind == "raw":
            d.update(dtype=self.dtype.str, shape=list(self.shape or ()))
        else:
            d["index"] = self.index
        return d


def _parse_field(name: str, d: dict[str, Any], where: Path) -> FieldSpec:
    try:
        if d["kind"] == "jpeg":
            return FieldSpec(name, "jpeg", np.dtype(np.uint8), None, d["file"], d["index"])
        dtype = np.dtype(d["dtype"])
        if dtype.kind not in "biuf":
            raise ValueError(f"dtype {dtype} is not a numeric type")
        shape = tuple(int(s) for s in d["shape"])
        if d["kind"] != "raw" or any(s < 0 for s in shape):
            raise ValueError(f"kind {d['kind']!r} shape {shape}")
        return FieldSpec(name, "raw", dtype, shape, d["file"])
    except (KeyError, TypeError, ValueError) as err:
        raise StoreHeaderError(
            f"{where}: field {name!r} is malformed ({err}); expected kind 'raw' with a numeric "
            "dtype and shape, or kind 'jpeg' with file and index; re-pack it with `gpuwise pack`"
        ) from err


def read_header(path: str | Path) -> dict[str, Any]:
    """Read and check a store's ``header.json``.

    Args:
        path: The store directory.

    Returns:
        The header as a dict.

    Raises:
        StoreFormatError: Missing or unreadable header, or a format version this gpuwise
            does not read.
        StoreHeaderError: A mistyped value, no fields, or a shard outside the store.
    """
    root = Path(path)
    file = root / HEADER
    try:
        header = json.loads(read_header_bytes(file))
    except FileNotFoundError as err:
        raise StoreFormatError(
            f"{file} does not exist; {root} is not a gpuwise store; create one with "
            "`gpuwise pack SRC DST`"
        ) from err
    except RecursionError as err:
        raise StoreFormatError(
            f"{file} nests its values too deep to be a gpuwise store header; re-pack the store"
        ) from err
    except (OSError, ValueError) as err:
        raise StoreFormatError(f"{file} is not readable JSON ({err}); re-pack the store") from err
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StoreFormatError(f"{file} is not a gpuwise store header; re-pack the store")
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreFormatError(
            f"store {root} has format {version}; this gpuwise reads {FORMAT_VERSION}; "
            "re-pack it with `gpuwise pack` (or upgrade gpuwise)"
        )
    check_header(header, root, file)
    return header


def file_sha256(path: Path) -> str:
    """Hash a file in 4 MiB chunks.

    Args:
        path: The file.

    Returns:
        The hex sha256.
    """
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class Store:
    """An opened gpuwise store (read-only, memory-mapped).

    Args:
        path: The store directory.

    Raises:
        StoreFormatError: Bad header, newer format, or a shard missing or of the wrong size.

    Example:
        >>> store = Store("train.store")               # doctest: +SKIP
        >>> len(store), store.classes[:2]              # doctest: +SKIP
        (50000, ['airplane', 'automobile'])
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header = read_header(self.path)
        self.records = int(self.header.get("records", -1))
        self.fields = {
            name: _parse_field(name, d, self.path / HEADER)
            for name, d in dict(self.header.get("fields") or {}).items()
        }
        self._shards = {s["file"]: s for s in self.header.get("shards") or []}
        self._raw: dict[str, np.memmap[Any, Any]] = {}
        self._jpeg: dict[str, tuple[np.memmap[Any, Any], np.ndarray]] = {}
        for spec in self.fields.values():
            self._map(spec)

    def __len__(self) -> int:
        return self.records

    @property
    def mode(self) -> str:
        """``"raw"`` or ``"jpeg"``: how the image field is stored."""
        return str(self.header.get("mode", "raw"))

    @property
    def classes(self) -> list[str] | None:
        """Class names by label (ImageFolder sources), else ``None``."""
        classes = self.header.get("classes")
        return None if classes is None else [str(c) for c in classes]

    def raw(self, name: str) -> np.memmap[Any, Any]:
        """Give a raw field's records.

        Args:
            name: The field.

        Returns:
            An ``(N, *shape)`` read-only memmap.

        Raises:
            StoreFormatError: The store has no raw field of that name.
        """
        return self._raw[self._check(name, "raw").name]

    def jpeg(self, name: str, i: int) -> np.ndarray:
        """Give the encoded bytes of one record of a jpeg field.

        Args:
            name: The field.
            i: The record index.

        Returns:
            A uint8 memmap view of the JPEG.

        Raises:
            StoreFormatError: The store has no jpeg field of that name.
        """
        data, offsets = self._jpeg[self._check(name, "jpeg").name]
        return data[int(offsets[i]) : int(offsets[i + 1])]

    def jpeg_offsets(self, name: str) -> np.ndarray:
        """Give a jpeg field's byte offsets.

        Args:
            name: The field.

        Returns:
            N + 1 uint64 offsets into the field's data shard.

        Raises:
            StoreFormatError: The store has no jpeg field of that name.
        """
        return self._jpeg[self._check(name, "jpeg").name][1]

    def info(self) -> dict[str, Any]:
        """Describe the store as ``gpuwise store info`` shows it.

        Returns:
            ``{"path", "format", "format_version", "mode", "records", "fields", "classes",
            "bytes", "shards", "skipped", "pack"}``.
        """
        shards = list(self._shards.values())
        return {
            "path": str(self.path),
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mode": self.mode,
            "records": self.records,
            "fields": {n: s.to_dict() for n, s in self.fields.items()},
            "classes": self.classes,
            "bytes": sum(int(s["bytes"]) for s in shards),
            "shards": [{"file": s["file"], "bytes": s["bytes"]} for s in shards],
            "skipped": len(self.header.get("skipped") or []),
            "pack": self.header.get("pack", {}),
        }

    def verify(self) -> dict[str, Any]:
        """Check every shard's size and sha256 and the record count.

        Returns:
            ``{"path", "records", "ok", "shards": [{"file", "bytes", "ok", "problem"}],
            "problems": [str]}``; each problem names the file and the next step.
        """
        results = []
        for name, shard in self._shards.items():
            file = self.path / name
            actual = file_sha256(file)
            ok = actual == shard.get("sha256")
            problem = None
            if not ok:
                problem = (
                    f"shard {file} has sha256 {actual[:16]}, the header says "
                    f"{str(shard.get('sha256'))[:16]}; the shard is corrupt; re-pack the store"
                )
            results.append({"file": name, "bytes": shard["bytes"], "ok": ok, "problem": problem})
        problems = [r["problem"] for r in results if r["problem"]]
        return {
            "path": str(self.path),
            "records": self.records,
            "ok": not problems,
            "shards": results,
            "problems": problems,
        }

    def _check(self, name: str, kind: str) -> FieldSpec:
        spec = self.fields.get(name)
        if spec is None or spec.kind != kind:
            have = {n: s.kind for n, s in self.fields.items()}
            raise StoreFormatError(
                f"store {self.path} has no {kind} field {name!r} (fields: {have}); "
                "pick one of its fields"
            )
        return spec

    def _shard(self, name: str, expected_bytes: int | None = None) -> Path:
        file = shard_path(self.path, name, self.path / HEADER)
        shard = self._shards.get(name)
        if shard is None:
            raise StoreFormatError(f"{self.path / HEADER} lists no shard {name!r}; re-pack it")
        if not file.is_file():
            raise StoreFormatError(f"shard {file} is missing; {_NEXT.format(path=self.path)}")
        size = file.stat().st_size
        want = int(shard["bytes"]) if expected_bytes is None else expected_bytes
        if size != want or size != int(shard["bytes"]):
            raise StoreFormatError(
                f"shard {file} has {size} bytes, expected {want} for {self.records} records; "
                f"it is truncated or corrupt; {_NEXT.format(path=self.path)}"
            )
        return file

    def check_sizes(self) -> None:
        """Check that every mapped shard still has the size its header gives.

        Reading a memory-mapped page past the end of a file that shrank kills the process
        with SIGBUS, which Python cannot catch; the Loader calls this at each epoch,
        before each batch and on the worker right before each batch's read (a batch
        filled ahead may run long after it was submitted), so a shard truncated or
        rewritten under a running job becomes this error, naming the shard, instead.

        Raises:
            StoreFormatError: A shard is smaller (or larger) than the header says.
        """
        maps = [*self._raw.items(), *((name, m) for name, (m, _) in self._jpeg.items())]
        for name, array in maps:
            spec = self.fields[name]
            shard = self._shards.get(spec.file)
            handle = getattr(array, "_mmap", None)
            if shard is None or handle is None:
                continue  # an empty shard is not mapped
            size, want = handle.size(), int(shard["bytes"])  # fstat of the mapped file
            if size != want:
                raise StoreFormatError(
                    f"shard {self.path / spec.file} now has {size} bytes, its header says "
                    f"{want}: it was truncated or rewritten while the store was open; reading "
                    f"it would crash the process (SIGBUS); {_NEXT.format(path=self.path)}"
                )

    def _map(self, spec: FieldSpec) -> None:
        if spec.kind == "raw":
            assert spec.shape is not None
            assert spec.record_bytes is not None
            file = self._shard(spec.file, self.records * spec.record_bytes)
            self._raw[spec.name] = _memmap(file, spec.dtype, (self.records, *spec.shape))
            return
        assert spec.index is not None
        index = self._shard(spec.index, (self.records + 1) * INDEX_DTYPE.itemsize)
        offsets = np.fromfile(index, dtype=INDEX_DTYPE)
        data_file = self._shard(spec.file)
        end = data_file.stat().st_size
        if offsets[0] != 0 or offsets[-1] != end or np.any(np.diff(offsets.astype(np.int64)) < 0):
            raise StoreFormatError(
                f"index {index} does not match {data_file} ({end} bytes); "
                f"{_NEXT.format(path=self.path)}"
            )
        self._jpeg[spec.name] = (_memmap(data_file, np.dtype(np.uint8), (end,)), offsets)


def _memmap(file: Path, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.memmap[Any, Any]:
    if int(np.prod(shape, dtype=np.int64)) == 0:  # mmap cannot map an empty file
        return np.zeros(shape, dtype=dtype).view(np.memmap)
    return np.memmap(file, dtype=dtype, mode="r", shape=shape)


def open_store(path: str | Path, *, verify: bool = False) -> Store:
    """Open a store for reading, optionally checking every checksum first.

    Args:
        path: The store directory.
        verify: Also hash every shard (slow on big stores; ``Store`` always checks sizes).

    Returns:
        The opened Store.

    Raises:
        StoreFormatError: Anything wrong with the header or a shard, naming the file.

    Example:
        >>> store = open_store("train.store", verify=True)   # doctest: +SKIP
    """
    store = Store(path)
    if verify:
        report = store.verify()
        if not report["ok"]:
            raise StoreFormatError(report["problems"][0])
    return store
