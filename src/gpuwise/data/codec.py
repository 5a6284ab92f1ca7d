"""Image codec helpers for packing: strict decode of any format, resize, encode once.

The loader's crops (the JPEG decode-with-crop path, the random box, and the resized crop
of already-decoded raw images) live in ``gpuwise.data.jpeg``. OpenCV, simplejpeg and
Pillow are imported inside the functions (the ``jpeg`` extra); their calls release the
GIL, so threads scale.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from gpuwise.errors import MissingExtraError


def is_jpeg(data: bytes | memoryview | np.ndarray) -> bool:
    """Tell whether encoded bytes are a JPEG.

    Args:
        data: The encoded image.

    Returns:
        True when the bytes start with the JPEG start-of-image marker.
    """
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
    """Encode an image as a baseline JPEG.

    Args:
        img: H x W x C uint8, C = 1 (grey) or 3 (RGB).
        quality: JPEG quality, 1..100.

    Returns:
        The encoded bytes.
    """
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
