"""Image codec helpers for packing and CPU crops: strict decode, encode, resize, crop boxes.

The fast JPEG decode-with-crop path of the loader lives in ``gpuwise.data.jpeg``; this
module is what ``pack`` needs besides (decode any format strictly, resize, encode once) and
the raw-mode CPU crop. OpenCV, simplejpeg and Pillow are imported inside the functions (the
``jpeg`` extra); their calls release the GIL, so threads scale.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from gpuwise.errors import MissingExtraError

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)


def is_jpeg(data: bytes | memoryview | np.ndarray) -> bool:
    """True when the bytes start with the JPEG start-of-image marker."""
    return bytes(np.frombuffer(data, dtype=np.uint8)[:2]) == b"\xff\xd8"


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as err:
        raise MissingExtraError("opencv-python-headless", "jpeg", "Resizing images") from err
    return cv2


def decode_rgb(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """Decode an encoded image strictly to H x W x 3 uint8 RGB.

    Args:
        data: JPEG, PNG or another format Pillow reads.

    Returns:
        The decoded image.

    Raises:
        ValueError: The bytes are corrupt, truncated, or not an image (message = reason).
    """
    jpeg_error = None
    if is_jpeg(data):
        import simplejpeg

        try:
            return np.asarray(simplejpeg.decode_jpeg(data, colorspace="rgb", strict=True))
        except ValueError as err:  # CMYK and other rare JPEGs: let Pillow try
            jpeg_error = err
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as err:
        reason = jpeg_error or ("not a known image format" if "identify" in str(err) else err)
        raise ValueError(f"cannot decode image: {reason}") from err


def encode_jpeg(img: np.ndarray, quality: int = 95) -> bytes:
    """Encode H x W x C (C = 1 or 3) uint8 as a baseline JPEG at ``quality``."""
    import simplejpeg

    img = np.ascontiguousarray(img)
    space = "gray" if img.shape[-1] == 1 else "rgb"
    return bytes(simplejpeg.encode_jpeg(img, quality=quality, colorspace=space))


def fit(img: np.ndarray, size: int, resize: str = "center") -> np.ndarray:
    """Resize an image to ``size x size``.

    Args:
        img: H x W x C uint8.
        size: Output side in pixels.
        resize: ``"center"``: shorter side to ``size`` then a centre crop; ``"stretch"``:
            straight to ``size x size``.

    Returns:
        A new ``size x size x C`` uint8 array.
    """
    cv2 = _cv2()
    h, w = img.shape[:2]
    if resize == "stretch":
        th, tw = size, size
    else:
        scale = size / min(h, w)
        th, tw = max(size, round(h * scale)), max(size, round(w * scale))
    shrink = th * tw < h * w
    out = cv2.resize(img, (tw, th), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    out = out.reshape(th, tw, img.shape[-1])
    y, x = (th - size) // 2, (tw - size) // 2
    return np.ascontiguousarray(out[y : y + size, x : x + size])


def random_box(
    rng: np.random.Generator,
    height: int,
    width: int,
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
) -> tuple[int, int, int, int]:
    """Draw a random-resized-crop box the way torchvision does (10 tries, then centre).

    Args:
        rng: The random source.
        height: Image height in pixels.
        width: Image width in pixels.
        scale: Range of the box's share of the image area.
        ratio: Range of the box's aspect ratio (width / height).

    Returns:
        ``(y, x, h, w)`` in pixels.
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            y = int(rng.integers(0, height - h + 1))
            x = int(rng.integers(0, width - w + 1))
            return y, x, h, w
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif aspect > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def crop_into(
    src: np.ndarray, box: tuple[int, int, int, int], out: np.ndarray, flip: bool = False
) -> None:
    """Resize the ``(y, x, h, w)`` box of ``src`` into ``out`` (bilinear), optionally mirrored.

    Args:
        src: H x W x C uint8 image (a memmap row is fine).
        box: The crop box in pixels.
        out: The destination, ``S x S x C`` uint8, written in place.
        flip: Mirror left-right.
    """
    cv2 = _cv2()
    y, x, h, w = box
    region = src[y : y + h, x : x + w]
    size = (out.shape[1], out.shape[0])
    shrink = h * w > out.shape[0] * out.shape[1]
    interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    if out.shape[-1] == 1:
        out[..., 0] = cv2.resize(region[..., 0], size, interpolation=interp)
    else:
        cv2.resize(region, size, dst=out, interpolation=interp)
    if flip:
        out[:] = out[:, ::-1]
