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


MAX_PIXELS = 178_956_970
"""Largest image decoded (Pillow's own bomb limit, ~179 MP, about 537 MB as RGB): an image
claiming more is a decompression bomb and is skipped, not decoded."""

SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
"""Pillow modes of 16-bit grey images: scaled to 8 bits, not clipped."""


def check_pixels(data: bytes | memoryview | np.ndarray) -> None:
    """Refuse an image whose header claims more than ``MAX_PIXELS`` before decoding it.

    Raises:
        ValueError: The image claims too many pixels (the message gives its size).
    """
    if is_jpeg(data):
        simplejpeg = _simplejpeg()
        try:
            h, w, _, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError:
            return  # a corrupt header: the strict decode names the problem
    else:
        h, w = _pillow_size(data)
    if h * w > MAX_PIXELS:
        raise ValueError(
            f"image claims {w} x {h} pixels, over the {MAX_PIXELS} pixel limit "
            "(a decompression bomb, or an image to downscale first)"
        )


def _pillow_size(data: bytes | memoryview | np.ndarray) -> tuple[int, int]:
    import warnings

    Image = _pillow()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(bytes(data))) as im:
                return im.size[1], im.size[0]
    except Image.DecompressionBombError as err:
        raise ValueError(f"decompression bomb: {err}") from err
    except Exception:  # not an image Pillow can identify: the strict decode says why
        return 0, 0


def _simplejpeg() -> Any:
    try:
        import simplejpeg
    except ImportError as err:
        raise MissingExtraError("simplejpeg", "jpeg", "Decoding JPEG images") from err
    return simplejpeg


def _pillow() -> Any:
    """``PIL.Image``, or the error naming the extra that installs Pillow."""
    try:
        from PIL import Image
    except ImportError as err:
        raise MissingExtraError("pillow", "jpeg", "Decoding images") from err
    return Image


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

    16-bit grey images are scaled to 8 bits (value / 257), not clipped at 255.

    Raises:
        ValueError: The bytes are corrupt, truncated, not an image, or claim more than
            ``MAX_PIXELS`` pixels (message = reason).
    """
    jpeg_error = None
    if is_jpeg(data):
        simplejpeg = _simplejpeg()
        try:
            return np.asarray(simplejpeg.decode_jpeg(data, colorspace="rgb", strict=True))
        except ValueError as err:  # CMYK and other rare JPEGs: let Pillow try
            jpeg_error = err
    Image = _pillow()
    check_pixels(data)
    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            if im.mode in SIXTEEN_BIT_MODES:
                return _grey16_to_rgb(np.asarray(im))
            return np.asarray(im.convert("RGB"))
    except (OSError, Image.UnidentifiedImageError, SyntaxError, ValueError) as err:
        reason = jpeg_error or ("not a known image format" if "identify" in str(err) else err)
        raise ValueError(f"cannot decode image: {reason}") from err


def is_sixteen_bit(data: bytes | memoryview | np.ndarray) -> bool:
    """True for a 16-bit grey image (decoded scaled to 8 bits: worth a note)."""
    if is_jpeg(data):
        return False
    Image = _pillow()
    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            return im.mode in SIXTEEN_BIT_MODES
    except Exception:  # not an image: decode_rgb says why
        return False


def _grey16_to_rgb(grey: np.ndarray) -> np.ndarray:
    """Scale 0..65535 grey to 0..255 (x / 257, rounded) and repeat it in three channels."""
    scaled = np.clip((grey.astype(np.float64) / 257.0).round(), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.repeat(scaled[..., None], 3, axis=-1))


def encode_jpeg(img: np.ndarray, quality: int = 95) -> bytes:
    """Encode an image as a baseline JPEG.

    Args:
        img: H x W x C uint8, C = 1 (grey) or 3 (RGB).
        quality: JPEG quality, 1..100.

    Returns:
        The encoded bytes.
    """
    simplejpeg = _simplejpeg()
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
