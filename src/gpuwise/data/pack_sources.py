"""Where ``pack`` reads records from: an ImageFolder tree, arrays, or a map-style Dataset.

Each source is a count, a name per record (for the skipped list) and a ``load(i)`` that
returns the record's fields, ready to write: decoded and resized uint8 in raw mode,
encoded bytes in jpeg mode (see ``pack.py`` for the modes). A record that cannot be
decoded raises ``SkipRecord`` with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuwise.data import codec
from gpuwise.data.decode_budget import DEFAULT_DECODE_BUDGET_BYTES, DecodeBudget
from gpuwise.data.regular_file import (
    FileTooLargeError,
    NotRegularFileError,
    kind_of,
    read_regular,
)
from gpuwise.errors import GpuwiseError, InputKindError, UsageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")

MAX_SIDE_PX = 4096
"""The largest ``size`` packed raw: a record of 4096 x 4096 x 3 bytes is 48 MiB, and a
chunk of records is held in memory at once."""

MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest image file read (a 100-megapixel photo is ~40 MB as JPEG, ~300 MB as BMP
only beyond this): a larger one is skipped with its size, never read whole."""


@dataclass(frozen=True, slots=True)
class PackConfig:
    """How to pack.

    Attributes:
        mode: ``"raw"`` (decoded fixed-size uint8), ``"jpeg"`` (encoded bytes) or
            ``"auto"`` (default): raw for arrays and whenever ``size`` is given, jpeg for an
            image folder without a size, so that mixed-size photos pack with no flags.
        size: Output side in pixels for raw mode (required for image files).
        resize: ``"center"`` (shorter side + centre crop) or ``"stretch"``.
        quality: JPEG quality when an image must be (re-)encoded.
        workers: Threads (default: all cores).
        strict: Raise on the first bad image instead of skipping it.
        overwrite: Replace an existing store at the destination.
        chunk: Records per unit of work between progress reports.
        decode_budget_bytes: Decoded bytes all threads may hold at once (default
            ``DEFAULT_DECODE_BUDGET_BYTES``, ~537 MB): huge images decode one after
            another instead of all together (``decode_budget.py``).

    Example:
        >>> config = PackConfig(mode="jpeg", quality=90)  # keep JPEGs, re-encode others at q90
        >>> pack("images/", "train.store", config)       # doctest: +SKIP
    """

    mode: str = "auto"
    size: int | None = None
    resize: str = "center"
    quality: int = 95
    workers: int | None = None
    strict: bool = False
    overwrite: bool = False
    chunk: int = 64
    decode_budget_bytes: int = DEFAULT_DECODE_BUDGET_BYTES


NOTE_KEY = "_note"
"""A record may carry a note under this key (kept out of the store, listed in the result)."""


class SkipRecord(Exception):
    """A record that cannot be packed (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class Source:
    """Records to pack: how many, a name for each, and how to load one."""

    count: int
    name: Callable[[int], str]
    load: Callable[[int], dict[str, Any]]
    classes: list[str] | None = None
    kind: str = "arrays"
    notes: list[dict[str, str]] = field(default_factory=list)


def _image_value(img: np.ndarray, config: PackConfig) -> np.ndarray | bytes:
    if config.mode == "jpeg":
        return codec.encode_jpeg(img, config.quality)
    if config.size is None:
        return img
    return codec.fit(img, config.size, config.resize)


def _fast_jpeg_resize(data: bytes, config: PackConfig) -> np.ndarray | None:
    """Raw mode, JPEG file, centre resize: the reduced-DCT decoder does it in one go."""
    if config.mode != "raw" or config.resize != "center" or config.size is None:
        return None
    if not codec.is_jpeg(data):
        return None
    from gpuwise.data.jpeg import decode_resize

    try:
        return np.asarray(decode_resize(data, config.size))
    except GpuwiseError:
        return None  # corrupt, or a JPEG flavour it does not read: the strict path decides


def _loader_reads(data: bytes) -> bool:
    """True when the loader's JPEG decoder reads ``data`` strictly (bytes can be kept)."""
    if not codec.is_jpeg(data):
        return False
    from gpuwise.data.jpeg import decode

    try:
        decode(data)
    except GpuwiseError:
        return False  # truncated, or CMYK and the like: Pillow decides below
    return True


def _read(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes; one that vanished, dangles or is unreadable is skipped, not fatal.

    Note [sources are regular files] (``regular_file``): a FIFO or a device named
    ``*.jpg`` is skipped with a note, and a regular file is read up to ``limit`` bytes
    (default ``MAX_FILE_BYTES``) only.
    """
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        return read_regular(path, limit)
    except NotRegularFileError as err:
        kind = kind_of(err.mode)
        raise SkipRecord(f"not a regular file ({kind}); packed images are files") from err
    except FileTooLargeError as err:
        raise SkipRecord(f"larger than {limit} bytes; not an image pack reads whole") from err
    except FileNotFoundError as err:
        what = "a dangling symlink" if path.is_symlink() else "the file vanished while packing"
        raise SkipRecord(f"cannot read: {what}") from err
    except OSError as err:
        raise SkipRecord(f"cannot read: {err.strerror or err}") from err


LARGE_DECODE_BYTES = 3 * 89_478_485
"""Decodes past this (Pillow's warning threshold, ~268 MB) get a note in the result."""


def _file_record(
    path: Path, label: int, config: PackConfig, budget: DecodeBudget
) -> dict[str, Any]:
    data = _read(path)
    try:
        h, w = codec.image_size(data)
    except ValueError as err:
        raise SkipRecord(str(err)) from err
    with budget.hold(h * w * 3):
        rec = _decoded_file(data, label, config)
    if LARGE_DECODE_BYTES < h * w * 3 <= codec.MAX_DECODE_BYTES:
        big = (
            f"a large image ({w} x {h}): it decodes to {h * w * 3 / 1e6:.0f} MB, within the "
            f"{codec.MAX_DECODE_BYTES / 1e6:.0f} MB limit; packed inside the "
            f"{budget.limit_bytes / 1e6:.0f} MB that all decodes share"
        )
        rec[NOTE_KEY] = f"{rec[NOTE_KEY]}; {big}" if NOTE_KEY in rec else big
    return rec


def _decoded_file(data: bytes, label: int, config: PackConfig) -> dict[str, Any]:
    fast = _fast_jpeg_resize(data, config)  # guarded on its downscaled decode cost
    if fast is not None:
        return {"image": fast, "label": label}
    try:
        codec.check_pixels(data)
    except ValueError as err:
        raise SkipRecord(str(err)) from err
    if codec.is_sixteen_bit(data):
        rec = _decoded_record(data, label, config)
        return {**rec, NOTE_KEY: "16-bit grey image, scaled to 8 bits (value / 257)"}
    if config.mode == "jpeg" and _loader_reads(data):
        return {"image": data, "label": label}
    return _decoded_record(data, label, config)


def _decoded_record(data: bytes, label: int, config: PackConfig) -> dict[str, Any]:
    try:
        img = codec.decode_rgb(data)
    except ValueError as err:
        raise SkipRecord(str(err)) from err
    return {"image": _image_value(img, config), "label": label}


def imagefolder_source(root: Path, config: PackConfig) -> Source:
    """Describe an ImageFolder tree: one subdirectory per class, images inside.

    Args:
        root: The tree's root directory.
        config: Mode and size (raw mode needs a size).

    Returns:
        A Source of ``{"image", "label"}`` records, classes in sorted directory order.

    Raises:
        UsageError: No class directories or no images, or raw mode without a size.
    """
    notes: list[dict[str, str]] = []
    classes = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or not p.is_dir():
            continue
        if p.is_symlink():  # `c3 -> /` would pack the whole filesystem
            notes.append(_link_note(p, root))
            continue
        classes.append(p.name)
    files: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        files += [(p, label) for p in _class_images(root / name, root, notes)]
    if not files:
        raise UsageError(
            f"{root} holds no images in class subdirectories (looked for "
            f"{', '.join(IMAGE_SUFFIXES)}); expected ROOT/CLASS/IMAGE files"
        )
    if config.mode == "raw" and config.size is None:
        raise UsageError(
            "raw mode needs one image size; pass --size (e.g. --size 224), or --mode jpeg "
            "to keep the images' own sizes as JPEG bytes"
        )

    budget = DecodeBudget(config.decode_budget_bytes)

    def load(i: int) -> dict[str, Any]:
        return _file_record(files[i][0], files[i][1], config, budget)

    def item(i: int) -> str:
        return str(files[i][0].relative_to(root))

    return Source(len(files), item, load, classes, "imagefolder", notes)


def _class_images(folder: Path, root: Path, notes: list[dict[str, str]]) -> list[Path]:
    """The images under one class folder, in sorted order; linked folders are not followed.

    A symlinked image file is kept (a dangling one is listed as skipped, not dropped); a
    symlinked folder is skipped with a note, so a link to ``/`` or a cycle packs nothing.
    """
    found: list[Path] = []
    for top, dirs, names in os.walk(folder, followlinks=False):
        here = Path(top)
        for d in sorted(dirs):
            if (here / d).is_symlink():
                notes.append(_link_note(here / d, root))
        dirs.sort()
        for n in names:
            if Path(n).suffix.lower() in IMAGE_SUFFIXES:
                found.append(here / n)
    return sorted(found)


def _link_note(link: Path, root: Path) -> dict[str, str]:
    target = os.readlink(link)
    return {
        "item": str(link.relative_to(root)),
        "note": f"a symlinked folder (-> {target}) was not followed; link the images "
        "themselves, or copy the folder in",
    }


def array_source(
    images: np.ndarray,
    labels: np.ndarray | None,
    config: PackConfig,
    extra: dict[str, np.ndarray] | None = None,
) -> Source:
    """Describe in-memory arrays as a source of records.

    Args:
        images: N x H x W x C uint8, C = 1 or 3.
        labels: N labels, or None.
        config: Mode and size.
        extra: More per-record columns of length N, stored as fields of their own.

    Returns:
        A Source of ``{"image", "label"?, **extra}`` records.

    Raises:
        UsageError: Shapes or lengths that do not fit.
    """
    n = len(images)
    if images.ndim != 4 or images.dtype != np.uint8 or images.shape[-1] not in (1, 3):
        raise UsageError(
            f"images have shape {images.shape} and dtype {images.dtype}; expected "
            "N x H x W x C uint8 with C = 1 or 3"
        )
    columns = dict(extra or {})
    if labels is not None:
        columns = {"label": np.asarray(labels).astype(np.int64), **columns}
    for name, col in columns.items():
        if len(col) != n:
            raise UsageError(f"{name} has {len(col)} entries for {n} images; give one per image")

    def load(i: int) -> dict[str, Any]:
        rec = {name: col[i] for name, col in columns.items()}
        return {"image": _image_value(images[i], config), **rec}

    return Source(n, lambda i: f"record {i}", load)


def _as_array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    elif hasattr(x, "convert"):  # a PIL image
        x = np.asarray(x.convert("RGB"))
    arr = np.asarray(x)
    if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
        arr = arr.transpose(1, 2, 0)  # CHW tensor -> HWC
    return arr


def dataset_source(dataset: Any, config: PackConfig) -> Source:
    """Describe a map-style dataset whose items are ``(image, label, *extras)``.

    Args:
        dataset: Anything with ``len()`` and ``[i]``; images may be arrays, tensors (CHW or
            HWC) or PIL images.
        config: Mode and size (both need H x W x C uint8 images).

    Returns:
        A Source of ``{"image", "label", "field2", ...}`` records; an item that does not
        fit is skipped with its reason when packed.
    """

    def load(i: int) -> dict[str, Any]:
        item = dataset[i]
        values = item if isinstance(item, (tuple, list)) else (item,)
        image = _as_array(values[0])
        if config.mode == "jpeg" or config.size is not None:
            if image.dtype != np.uint8 or image.ndim != 3:
                raise SkipRecord(
                    f"image is {image.dtype} {image.shape}; jpeg/size need HxWxC uint8"
                )
            image = np.ascontiguousarray(image)
        rec: dict[str, Any] = {"image": _image_value(image, config)}
        names = ["label", *(f"field{k}" for k in range(2, len(values)))]
        rec.update({n: _as_array(v) for n, v in zip(names, values[1:], strict=False)})
        return rec

    return Source(len(dataset), lambda i: f"item {i}", load)


def load_labels(path: str | Path) -> Any:
    """Read the labels of a ``.npy`` image source (one per image), without pickle.

    Raises:
        GpuwiseError: The file does not exist.
        InputKindError: The file is not an array saved with ``np.save``.

    Example:
        >>> labels = load_labels("labels.npy")  # doctest: +SKIP
    """
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block np.load
        raise InputKindError(f"labels file '{path}' is not a regular file; give a .npy file")
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError as err:
        raise GpuwiseError(f"labels file '{path}' does not exist; check the path") from err
    except (OSError, ValueError) as err:
        raise InputKindError(
            f"cannot read labels from '{path}' ({err}); give a .npy file saved with np.save"
        ) from err
