"""Synthetic JPEG image sets for the loader benchmarks and tests (generated, never downloaded).

The set resembles the loader anchors' data: quality-90 JPEGs with 4:2:0 chroma subsampling,
sides drawn uniformly from 200-500 px, a class-tinted smooth colour field with random
rectangles and ellipses and two scales of noise, so that bytes per pixel (about 0.5) are
in the range of photographs. Every image is seeded by its index, so a set is reproducible.

Layout written by :func:`make_jpeg_set` under ``root``: ``class_XX/img_NNNNN.jpg`` (an
ImageFolder tree) and ``manifest.json`` (count, mean size, bytes per pixel).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

SEED = 7_340_113
MIN_SIDE, MAX_SIDE = 200, 500
QUALITY = 90


def make_image(index: int, label: int) -> np.ndarray:
    """Return one synthetic RGB image (uint8 HWC) seeded by its index."""
    import cv2

    rng = np.random.default_rng([SEED, index])
    h, w = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, size=2))
    coarse = rng.integers(0, 256, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    coarse[..., label % 3] = np.minimum(coarse[..., label % 3] + 48, 255)
    field = cv2.resize(coarse.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    for _ in range(int(rng.integers(4, 14))):
        x0, x1 = sorted(int(v) for v in rng.integers(0, w, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h, 2))
        colour = tuple(float(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            centre, axes = ((x0 + x1) // 2, (y0 + y1) // 2), ((x1 - x0) // 2, (y1 - y0) // 2)
            cv2.ellipse(field, centre, axes, 0.0, 0.0, 360.0, colour, -1)
        else:
            cv2.rectangle(field, (x0, y0), (x1, y1), colour, -1)
    grain = rng.normal(0.0, 1.0, size=(max(2, h // 3), max(2, w // 3))).astype(np.float32)
    field += 17.0 * cv2.resize(grain, (w, h), interpolation=cv2.INTER_LINEAR)[..., None]
    field += rng.normal(0.0, 10.0, size=(h, w, 1)).astype(np.float32)
    field += rng.normal(0.0, 6.0, size=(h, w, 3)).astype(np.float32)
    return np.clip(field, 0, 255).astype(np.uint8)


def encode(image: np.ndarray, quality: int = QUALITY) -> bytes:
    """Encode an RGB uint8 image as a baseline 4:2:0 JPEG."""
    import simplejpeg

    data: bytes = simplejpeg.encode_jpeg(
        np.ascontiguousarray(image), quality=quality, colorspace="RGB", colorsubsampling="420"
    )
    return data


def make_jpeg_set(root: str | os.PathLike[str], count: int = 4000, classes: int = 10) -> dict:
    """Write (or reuse) an ImageFolder tree of synthetic JPEGs and return its manifest.

    Args:
        root: Folder to write into (created); an existing set of the same count is reused.
        count: Number of images.
        classes: Number of class folders; image i has label i % classes.

    Returns:
        The manifest: count, classes, total_bytes, mean_kb, mean_megapixels, bytes_per_pixel.
    """
    root = Path(root)
    manifest_path = root / "manifest.json"
    if manifest_path.exists():
        manifest: dict = json.loads(manifest_path.read_text())
        if manifest.get("count") == count and manifest.get("classes") == classes:
            return manifest
    total_bytes = total_px = 0
    for i in range(count):
        label = i % classes
        folder = root / f"class_{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        image = make_image(i, label)
        data = encode(image)
        (folder / f"img_{i:05d}.jpg").write_bytes(data)
        total_bytes += len(data)
        total_px += image.shape[0] * image.shape[1]
    manifest = {
        "count": count,
        "classes": classes,
        "quality": QUALITY,
        "sides_px": [MIN_SIDE, MAX_SIDE],
        "total_bytes": total_bytes,
        "mean_kb": round(total_bytes / count / 1024, 1),
        "mean_megapixels": round(total_px / count / 1e6, 4),
        "bytes_per_pixel": round(total_bytes / total_px, 3),
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


def list_images(root: str | os.PathLike[str]) -> tuple[list[Path], np.ndarray]:
    """Return (paths, labels) of an ImageFolder tree in sorted class, sorted file order."""
    root = Path(root)
    paths: list[Path] = []
    labels: list[int] = []
    for label, folder in enumerate(sorted(p for p in root.iterdir() if p.is_dir())):
        for path in sorted(folder.glob("*.jpg")):
            paths.append(path)
            labels.append(label)
    return paths, np.asarray(labels, dtype=np.int64)


def write_packed(root: str | os.PathLike[str], stem: str | os.PathLike[str]) -> None:
    """Concatenate an ImageFolder's JPEGs into ``STEM.bin`` + ``.idx.npy`` + ``.labels.npy``.

    The index holds each image's [start, end) byte offsets; an existing pack is kept.
    """
    stem = Path(stem)
    if stem.with_suffix(".bin").exists():
        return
    paths, labels = list_images(root)
    blobs = [p.read_bytes() for p in paths]
    offsets = np.cumsum([0] + [len(b) for b in blobs])
    np.save(stem.with_suffix(".idx.npy"), np.stack([offsets[:-1], offsets[1:]], 1))
    np.save(stem.with_suffix(".labels.npy"), labels)
    stem.with_suffix(".tmp").write_bytes(b"".join(blobs))
    os.replace(stem.with_suffix(".tmp"), stem.with_suffix(".bin"))


def open_packed(stem: str | os.PathLike[str]) -> tuple[Any, np.ndarray, np.ndarray]:
    """Return the packed JPEG bytes (a read-only memmap), their offsets, and the labels."""
    stem = Path(stem)
    blob = np.memmap(stem.with_suffix(".bin"), dtype=np.uint8, mode="r")
    return blob, np.load(stem.with_suffix(".idx.npy")), np.load(stem.with_suffix(".labels.npy"))
