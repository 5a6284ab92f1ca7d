"""Image codec helpers for packing: strict decode of any format, resize, encode once.

The loader's crops (the JPEG decode-with-crop path, the random box, and the resized crop
of already-decoded raw images) live in ``gpuwise.data.jpeg``. OpenCV, simplejpeg and
Pillow are imported inside the functions (the ``jpeg`` extra); their calls release the
GIL, so threads scale.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from gpuwise.errors import GpuwiseError, MissingExtraError


def is_jpeg(data: bytes | memoryview | np.ndarray) -> bool:
    """Tell whether encoded bytes are a JPEG.

    Args:
        data: The encoded image.

    Returns:
        True when the bytes start with the JPEG start-of-image marker.
    """
    return bytes(np.frombuffer(data, dtype=np.uint8)[:2]) == b"\xff\xd8"


MAX_PIXELS = 178_956_970
"""Pillow's own bomb limit (~179 MP); ``MAX_DECODE_BYTES`` is that many RGB pixels."""

MAX_DECODE_BYTES = 3 * MAX_PIXELS
"""Largest decode, in bytes of decoded pixels (height x width x channels, after the
decoder's own DCT downscale): ~537 MB. An image costing more is a decompression bomb
(a 65500 x 65500 JPEG of a few KB, say) and is refused before a byte of it is decoded.
Every decoding path checks it (:func:`check_decode_cost`): the serving ``pre``
(``jpeg.decode_resize``), the loader's crops, and ``pack``."""


class ImageTooLarge(GpuwiseError, ValueError):
    """An image would cost more than ``MAX_DECODE_BYTES`` to decode (a decompression bomb).

    A ``ValueError`` as well, so that ``pack`` skips the record with the reason.
    """


def check_decode_cost(height: int, width: int, channels: int = 3) -> None:
    """Refuse a decode of ``height x width x channels`` bytes over ``MAX_DECODE_BYTES``.

    Args:
        height: Rows the decoder will produce (after its own downscale).
        width: Columns the decoder will produce.
        channels: Bytes per pixel of the decoded image.

    Raises:
        ImageTooLarge: The decode would cost more (the message gives the sizes).
    """
    cost = int(height) * int(width) * int(channels)
    if cost > MAX_DECODE_BYTES:
        raise ImageTooLarge(
            f"image decodes to {width} x {height} x {channels} = {cost / 1e6:.0f} MB, over the "
            f"{MAX_DECODE_BYTES / 1e6:.0f} MB decode limit (a decompression bomb, or an image "
            "to downscale before it is served or packed)"
        )


SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
"""Pillow modes of 16-bit grey images: scaled to 8 bits, not clipped."""


def image_size(data: bytes | memoryview | np.ndarray) -> tuple[int, int]:
    """An encoded image's ``(height, width)``, read from its header alone.

    Returns:
        ``(0, 0)`` when the header cannot be read: the strict decode then names the problem.

    Raises:
        ValueError: Pillow calls the image a decompression bomb.
    """
    if is_jpeg(data):
        simplejpeg = _simplejpeg()
        try:
            h, w, _, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError:
            return 0, 0
        return int(h), int(w)
    return _pillow_size(data)


def check_pixels(data: bytes | memoryview | np.ndarray) -> int:
    """Refuse an image whose full decode would cost more than ``MAX_DECODE_BYTES``.

    Reads only the header (JPEG: simplejpeg's; other formats: Pillow's lazy open).

    Returns:
        The bytes of its full RGB decode (0 when the header cannot be read).

    Raises:
        ImageTooLarge: The full decode costs too much (a ``ValueError``).
        ValueError: Pillow calls the image a decompression bomb.
    """
    h, w = image_size(data)
    check_decode_cost(h, w, 3)
    return h * w * 3


@contextlib.contextmanager
def open_image(data: bytes | memoryview | np.ndarray) -> Iterator[Any]:
    """``PIL.Image.open`` of encoded bytes, without Pillow's ``DecompressionBombWarning``.

    gpuwise applies its own limit (``check_decode_cost``) before any decode, and says so
    in its own words; Pillow's warning (printed with the path of Pillow's source file)
    would only repeat it less clearly.
    """
    Image = _pillow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with Image.open(io.BytesIO(bytes(data))) as im:
            yield im


def _pillow_size(data: bytes | memoryview | np.ndarray) -> tuple[int, int]:
    Image = _pillow()
    try:
        with open_image(data) as im:
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
    check_pixels(data)
    if is_jpeg(data):
        simplejpeg = _simplejpeg()
        try:
            return np.asarray(simplejpeg.decode_jpeg(data, colorspace="rgb", strict=True))
        except ValueError as err:  # CMYK and other rare JPEGs: let Pillow try
            jpeg_error = err
    Image = _pillow()
    try:
        with open_image(data) as im:
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
    try:
        with open_image(data) as im:
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

    Only the part of the source that the centre crop keeps is resized, so the work and
    memory are bounded by the source and the output (a 65500 x 1 image costs no
    8 M-pixel-wide row).
    """
    h, w = img.shape[:2]
    if resize == "stretch":
        cv2 = _cv2()
        shrink = size * size < h * w
        interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        out = cv2.resize(img, (size, size), interpolation=interp)
        return np.ascontiguousarray(out.reshape(size, size, img.shape[-1]))
    scale = size / min(h, w)
    return cover_crop(img, max(size, round(h * scale)), max(size, round(w * scale)), size, size)


def cover_crop(image: np.ndarray, cover_h: int, cover_w: int, out_h: int, out_w: int) -> np.ndarray:
    """The centre ``out_h x out_w`` of ``image`` resized to ``cover_h x cover_w``.

    Equal to resizing the whole image to the cover and cutting out its centre, but only
    the source rows and columns under the centre are resized: the cost is bounded by the
    output (plus one source pixel each side), whatever the cover's size.

    Args:
        image: ``H x W x C`` uint8.
        cover_h: Height of the (never built) resized image.
        cover_w: Width of the resized image.
        out_h: Height of the centre kept (at most ``cover_h``).
        out_w: Width of the centre kept (at most ``cover_w``).

    Returns:
        A new ``out_h x out_w x C`` uint8 array.
    """
    cv2 = _cv2()
    height, width = image.shape[:2]
    fy, fx = cover_h / height, cover_w / width
    yc, xc = (cover_h - out_h) // 2, (cover_w - out_w) // 2
    y0, x0 = math.floor(yc / fy), math.floor(xc / fx)
    y1 = min(height, math.ceil((yc + out_h) / fy))
    x1 = min(width, math.ceil((xc + out_w) / fx))
    part_h = max(round(y1 * fy) - round(y0 * fy), yc + out_h - round(y0 * fy))
    part_w = max(round(x1 * fx) - round(x0 * fx), xc + out_w - round(x0 * fx))
    shrink = part_h * part_w < (y1 - y0) * (x1 - x0)
    interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    part = cv2.resize(image[y0:y1, x0:x1], (part_w, part_h), interpolation=interp)
    part = part.reshape(part_h, part_w, image.shape[-1])
    oy, ox = yc - round(y0 * fy), xc - round(x0 * fx)
    return np.ascontiguousarray(part[oy : oy + out_h, ox : ox + out_w])
