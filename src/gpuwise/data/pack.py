"""Pack images into a gpuwise store: from an ImageFolder tree, numpy arrays, or a Dataset.

Two modes (``PackConfig.mode``):

- ``"raw"``: every image is decoded once and resized to ``size x size x 3`` uint8
  (``resize="center"``: shorter side to ``size``, then a centre crop; ``"stretch"``: straight
  to ``size x size``, aspect not kept). Loading is then a memory gather: fastest, biggest.
  Arrays that already share one shape are stored as they are when ``size`` is None.
- ``"jpeg"``: JPEG files keep their encoded bytes when the loader's decoder reads them
  strictly; PNG and other formats, JPEGs it cannot read (CMYK, say) and arrays are encoded
  once as RGB JPEG at ``quality`` (95), so the loader has a single decode path. Small on
  disk; decoded on load.

Images that cannot be decoded (corrupt, truncated, unknown format) are skipped and listed
in the result and the header with the reason; ``strict=True`` raises instead. Records are
processed on a thread pool (decoders release the GIL) and written in source order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuwise import interrupts
from gpuwise.data.pack_sources import (
    MAX_SIDE_PX,
    NOTE_KEY,
    PackConfig,
    SkipRecord,
    Source,
    array_source,
    dataset_source,
    imagefolder_source,
)
from gpuwise.data.store.read import FieldSpec
from gpuwise.data.store.write import StoreWriter, check_destination
from gpuwise.errors import GpuwiseError, InputKindError, UsageError

__all__ = ["PackConfig", "PackResult", "Progress", "pack", "write_source"]

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each chunk of records."""


@dataclass(slots=True)
class PackResult:
    """What a pack produced.

    Attributes:
        path: The store directory.
        records: Records written.
        skipped: ``{"item", "reason"}`` for every record left out.
        bytes: Total shard bytes.
        elapsed_s: Wall time of the pack.
        header: The store header written.
        notes: ``{"item", "note"}`` for records packed with a change worth knowing (a
            16-bit image scaled to 8 bits).
    """

    path: str
    records: int
    skipped: list[dict[str, str]] = field(default_factory=list)
    bytes: int = 0
    elapsed_s: float = 0.0
    header: dict[str, Any] = field(default_factory=dict)
    notes: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Give the ``gpuwise pack --json`` object.

        Returns:
            ``{"path", "records", "skipped", "bytes", "elapsed_s", "mode", "fields",
            "classes", "notes"}``.
        """
        return {
            "path": self.path,
            "records": self.records,
            "skipped": self.skipped,
            "bytes": self.bytes,
            "elapsed_s": round(self.elapsed_s, 3),
            "mode": self.header.get("mode"),
            "fields": self.header.get("fields"),
            "classes": self.header.get("classes"),
            "notes": self.notes,
        }


def _check_config(config: PackConfig) -> None:
    if config.mode not in ("raw", "jpeg"):
        raise UsageError(f"pack mode {config.mode!r} is not known; use 'auto', 'raw' or 'jpeg'")
    if config.resize not in ("center", "stretch"):
        raise UsageError(f"resize {config.resize!r} is not known; use 'center' or 'stretch'")
    if config.size is not None and not 1 <= config.size <= MAX_SIDE_PX:
        raise UsageError(
            f"size {config.size} is not a side pack can hold in memory; give 1 to {MAX_SIDE_PX} "
            "pixels (a raw record is size x size x 3 bytes)"
        )


def _spec(name: str, value: Any) -> FieldSpec:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return FieldSpec(
            name, "jpeg", np.dtype(np.uint8), None, f"{name}.jpeg.bin", f"{name}.idx.bin"
        )
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise UsageError(f"field {name!r} has dtype {arr.dtype}; only numeric arrays are stored")
    return FieldSpec(name, "raw", arr.dtype.newbyteorder("<"), arr.shape, f"{name}.bin")


def _safe(source: Source, strict: bool) -> Callable[[int], dict[str, Any] | str]:
    def run(i: int) -> dict[str, Any] | str:
        try:
            return source.load(i)
        except SkipRecord as err:
            if strict:
                raise GpuwiseError(
                    f"{source.name(i)}: {err}; --strict stops at the first bad image; "
                    "fix or remove it, or pack without --strict to skip it"
                ) from err
            return str(err)

    return run


def write_source(
    source: Source, dst: str | Path, config: PackConfig, progress: Progress | None = None
) -> PackResult:
    """Process every record of a source on a thread pool and write the store.

    The store is built in ``DST.tmp-<pid>`` and renamed into place at the end; any error
    (a full disk included) removes the temporary store before it is raised.

    Args:
        source: The records to pack.
        dst: The store directory to create.
        config: Mode, size, threads and chunking.
        progress: Called as ``progress(done, total)`` after each chunk.

    Returns:
        The PackResult.

    Raises:
        GpuwiseError: Every record was skipped, a bad record under ``strict``, or the
            store could not be written (the message names the path and the cause).
    """
    start = time.perf_counter()
    found = _Found(notes=list(source.notes))
    writer: StoreWriter | None = None
    try:
        with interrupts.deferred():  # Note [the stop rule]: checked between records
            writer = _write_records(source, dst, config, progress, found)
            interrupts.raise_if_stopped()
            header = _commit(writer, source, config, found)
    except OSError as err:
        raise GpuwiseError(
            f"cannot write the store {dst}: {err.strerror or err}; the partial store was "
            "removed; free space on that disk or pack to another place"
        ) from err
    finally:
        if writer is not None:
            writer.__exit__(None, None, None)
    return PackResult(
        str(dst),
        int(header["records"]),
        found.skipped,
        sum(int(s["bytes"]) for s in header["shards"]),
        time.perf_counter() - start,
        header,
        found.notes,
    )


def _commit(
    writer: StoreWriter, source: Source, config: PackConfig, found: _Found
) -> dict[str, Any]:
    pack_meta = {"mode": config.mode, "size": config.size, "resize": config.resize}
    return writer.commit(
        mode=config.mode,
        classes=source.classes,
        source=source.kind,
        skipped=found.skipped,
        notes=found.notes,
        pack={**pack_meta, "quality": config.quality},
    )


@dataclass(slots=True)
class _Found:
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[dict[str, str]] = field(default_factory=list)
    writer: StoreWriter | None = None


def _write_records(
    source: Source, dst: str | Path, config: PackConfig, progress: Progress | None, found: _Found
) -> StoreWriter:
    run = _safe(source, config.strict)
    workers = config.workers or os.cpu_count() or 1
    pool = ThreadPoolExecutor(workers, thread_name_prefix="gpuwise-pack")
    try:
        for lo in range(0, source.count, config.chunk):
            interrupts.raise_if_stopped()
            ids = range(lo, min(lo + config.chunk, source.count))
            futures = [pool.submit(run, i) for i in ids]
            for i, future in zip(ids, futures, strict=True):
                _write_one(source, i, _result(future), dst, config, found)
            if progress is not None:
                progress(ids.stop, source.count)
    except BaseException:
        # A thread still decoding ends after its record; none starts another.
        pool.shutdown(wait=False, cancel_futures=True)
        if found.writer is not None:
            found.writer.abort()
        raise
    pool.shutdown()
    if found.writer is None:
        raise GpuwiseError(
            f"all {source.count} records were skipped (first: {found.skipped[0]}); "
            "nothing to pack; check the source images"
        )
    return found.writer


RESULT_POLL_S = 0.1
"""How often the main thread, waiting for a record, looks for a stop signal."""


def _result(future: Future[dict[str, Any] | str]) -> dict[str, Any] | str:
    """The record's result, waited for in short slices (Note [the stop rule])."""
    while True:
        try:
            return future.result(timeout=RESULT_POLL_S)
        except TimeoutError:
            if future.done():  # the record itself raised TimeoutError
                raise
            interrupts.raise_if_stopped()


def _write_one(
    source: Source,
    i: int,
    rec: dict[str, Any] | str,
    dst: str | Path,
    config: PackConfig,
    found: _Found,
) -> None:
    if isinstance(rec, str):
        found.skipped.append({"item": source.name(i), "reason": rec})
        logger.info("skipped %s: %s", source.name(i), rec)
        return
    note = rec.pop(NOTE_KEY, None)
    if note is not None:
        found.notes.append({"item": source.name(i), "note": str(note)})
    if found.writer is None:
        specs = [_spec(k, v) for k, v in rec.items()]
        found.writer = StoreWriter(dst, specs, overwrite=config.overwrite)
    found.writer.append(rec)


def pack(
    src: str | Path | Any,
    dst: str | Path,
    config: PackConfig | None = None,
    *,
    labels: np.ndarray | None = None,
    progress: Progress | None = None,
) -> PackResult:
    """Pack a source into a new store at ``dst``.

    Args:
        src: An ImageFolder directory, a ``.npy`` file of N x H x W x C uint8 images, a
            ``.npz`` with ``images`` (plus ``labels`` and any per-record extras), an
            in-memory uint8 image array, or a map-style dataset of ``(image, label, ...)``.
        dst: The store directory to create (written to ``DST.tmp-<pid>`` first).
        config: Mode, size and threads (default: ``mode="auto"``: JPEG bytes for an image
            folder without a size, raw otherwise).
        labels: Labels for a ``.npy`` or in-memory image array.
        progress: Called as ``progress(done, total)`` while packing.

    Returns:
        The PackResult (records, skipped items with reasons, bytes, elapsed_s).

    Raises:
        UsageError: A source or setting that cannot be packed as asked.
        GpuwiseError: Nothing could be packed, or a bad image under ``strict``.

    Example:
        >>> result = pack("images/", "train.store", PackConfig(size=224))  # doctest: +SKIP
        >>> result.records, len(result.skipped)                            # doctest: +SKIP
        (4000, 0)
    """
    config = _resolved(config or PackConfig(), src)
    _check_config(config)
    check_destination(Path(dst), config.overwrite)
    return write_source(_source_of(src, config, labels), dst, config, progress)


def _resolved(config: PackConfig, src: Any) -> PackConfig:
    """Settle ``mode="auto"``: jpeg for an image folder without a size, else raw."""
    if config.mode != "auto":
        return config
    folder = isinstance(src, (str, Path)) and Path(src).is_dir()
    return dataclasses.replace(config, mode="jpeg" if folder and config.size is None else "raw")


def _source_of(src: Any, config: PackConfig, labels: np.ndarray | None) -> Source:
    if isinstance(src, np.ndarray):
        return array_source(src, labels, config)
    if not isinstance(src, (str, Path)):
        return dataset_source(src, config)
    path = Path(src)
    if path.is_dir():
        return imagefolder_source(path, config)
    if path.suffix in (".npy", ".npz") and path.is_file():
        return _numpy_source(path, config, labels)
    raise UsageError(
        f"{path} is not an image directory, .npy or .npz file; give an ImageFolder tree "
        "(ROOT/CLASS/IMAGE) or N x H x W x C uint8 arrays"
    )


def _numpy_source(path: Path, config: PackConfig, labels: np.ndarray | None) -> Source:
    """Arrays from a ``.npy`` or ``.npz`` file; pickled (object) arrays are refused."""
    try:
        if path.suffix == ".npy":
            return array_source(np.load(path, mmap_mode="r", allow_pickle=False), labels, config)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as err:
        raise InputKindError(
            f"{path} cannot be read as plain numpy arrays ({err}); gpuwise never unpickles; "
            "save uint8 image arrays with np.save / np.savez"
        ) from err
    if "images" not in arrays:
        raise UsageError(f"{path} has no 'images' array (has {sorted(arrays)}); add one")
    images, found = arrays.pop("images"), arrays.pop("labels", None)
    return array_source(images, found if labels is None else labels, config, arrays)
