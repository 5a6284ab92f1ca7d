"""Fast JPEG decoding for the loader: JPEG bytes -> random resized crop in the batch buffer.

The loader's JPEG mode calls :func:`decode_crop` once per image on worker threads. It

1. reads the JPEG header (no pixel decoding) and draws the crop box with torchvision's
   RandomResizedCrop algorithm (:func:`sample_box`: 10 tries, then a centre crop);
2. when the box is at least twice the output size, decodes at 1/2, 1/4 or 1/8 scale in
   the DCT domain (libjpeg-turbo's SIMD reduced inverse DCTs: cheaper, and a low-pass);
3. decodes into a buffer kept per thread, with the fast integer IDCT and plain chroma
   upsampling (simplejpeg, which releases the GIL);
4. resizes the box bilinearly straight into the caller's ``out``; when it shrinks by more
   than :data:`BLUR_ABOVE` it first blurs the box with a small Gaussian, the anti-aliasing
   that torchvision's bilinear resize applies; mirrors with probability 0.5.

What was measured (CPU time per image, one thread, the benchmark set of 4,000 q90 JPEGs
of 200-500 px, ``benchmarks/loader_throughput.py``): entropy (Huffman) decoding is ~95 %
of libjpeg-turbo's time on such images: a 1/8-scale decode costs as much as a full one,
so scaled or cropped IDCT barely helps. Decoding only the rows above the crop's bottom
(``jpeg_skip_scanlines``/``jpeg_crop_scanline`` through ctypes on Pillow's bundled
libjpeg-turbo) saved ~12 % on one thread and lost on two: libjpeg returns two rows per
call, so the GIL is taken a hundred times per image; it also cannot recover from a libjpeg
fatal error without C code. libjpeg-turbo's 7/8..5/8 scales run plain C and decoded up to
1.7x slower than full size. What pays is the resize: INTER_AREA on a 1-2x shrink costs
4-6x a bilinear resize; bilinear plus a Gaussian pre-blur where needed is as accurate
(mean error about 1 level against torch's anti-aliased bilinear) for a third of the cost.
Result: 709 us per image against 901 us for the anchors' plain simplejpeg + INTER_AREA
method (1.27x) and 824 us for a full-size decode + INTER_AREA (1.15x); a bare full
decode takes 557 us.

Every function raises :class:`CorruptImageError` (with libjpeg's reason) for corrupt or
truncated data, so that ``pack`` can skip and report the record.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from gpuwise.data.codec import check_decode_cost, cover_crop
from gpuwise.errors import GpuwiseError, MissingExtraError, UsageError

Buffer = bytes | bytearray | memoryview | np.ndarray
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
BLUR_ABOVE = 1.25
"""Shrink factor above which the crop is low-passed before the bilinear resize: plain
bilinear aliases beyond it (mean error 2-4 levels against an anti-aliased resize), and
OpenCV's INTER_AREA costs 4-6x a bilinear resize, a small Gaussian blur about 1.5x."""


class CorruptImageError(GpuwiseError):
    """An encoded image cannot be decoded (corrupt, truncated, or not a JPEG)."""


_local = threading.local()


_mods: tuple[Any, Any] | None = None


def _modules() -> tuple[Any, Any]:
    """Return (simplejpeg, cv2), imported once; they are the optional ``jpeg`` extra."""
    global _mods
    if _mods is None:
        try:
            import cv2
            import simplejpeg
        except ImportError as err:
            name = "simplejpeg" if "simplejpeg" in str(err) else "opencv-python-headless"
            raise MissingExtraError(name, "jpeg", "Decoding JPEG images") from err
        cv2.setNumThreads(1)  # the loader's threads are the parallelism; no nested pools
        _mods = (simplejpeg, cv2)
    return _mods


KEEP_SCRATCH_BYTES = 64 << 20
"""Largest decode buffer a thread keeps for the next image; a bigger one is freed after
its image, so one large image does not pin its memory in every worker thread."""


def _scratch(nbytes: int) -> np.ndarray:
    """Return this thread's reusable decode buffer, grown to at least ``nbytes``."""
    if nbytes > KEEP_SCRATCH_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    buf: np.ndarray | None = getattr(_local, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = np.empty(max(nbytes, 1 << 20), dtype=np.uint8)
        _local.buf = buf
    return buf


def _tmp_like(out: np.ndarray) -> np.ndarray:
    """Return this thread's reusable array with ``out``'s shape (for the mirrored pass)."""
    tmp: np.ndarray | None = getattr(_local, "tmp", None)
    if tmp is None or tmp.shape != out.shape:
        tmp = np.empty(out.shape, dtype=np.uint8)
        _local.tmp = tmp
    return tmp


def header(buf: Buffer) -> tuple[int, int]:
    """Return ``(height, width)`` of a JPEG from its header, without decoding pixels.

    Args:
        buf: The encoded JPEG.

    Returns:
        Height and width in pixels.

    Raises:
        CorruptImageError: The bytes are not a readable JPEG header.
    """
    simplejpeg, _ = _modules()
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(buf)
    except (ValueError, TypeError) as err:
        raise CorruptImageError(f"cannot read the JPEG header: {err}") from err
    return int(height), int(width)


def sample_box(
    rng: np.random.Generator,
    height: int,
    width: int,
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
) -> tuple[int, int, int, int]:
    """Draw a RandomResizedCrop box with torchvision's algorithm.

    Up to 10 times: draw an area share uniformly from ``scale`` and an aspect ratio
    log-uniformly from ``ratio``; the first box that fits is placed uniformly at random.
    If none fits, the whole image clamped to the ratio range, centred.

    Args:
        rng: Random source (consumed in a fixed order, so a seed fixes the box).
        height: Image height in pixels.
        width: Image width in pixels.
        scale: Range of the box's share of the image area.
        ratio: Range of the box's aspect ratio, width / height.

    Returns:
        ``(top, left, box_height, box_width)`` in pixels.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    return _centre_box(height, width, ratio)


def _centre_box(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif aspect > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def dct_scale(box_h: int, box_w: int, out_h: int, out_w: int) -> int:
    """Return M in (8, 4, 2, 1): the decode scale M/8 that keeps the box covering the output.

    Only the power-of-two scales are used: libjpeg-turbo has SIMD inverse DCTs for them,
    while its 7/8..5/8 scales run plain C and made decoding up to 1.7x slower here.

    Args:
        box_h: Box height in source pixels.
        box_w: Box width in source pixels.
        out_h: Output height in pixels.
        out_w: Output width in pixels.

    Returns:
        The numerator M of the scale M/8; 8 means full size.
    """
    m = 8
    while m > 1 and box_h * (m // 2) >= out_h * 8 and box_w * (m // 2) >= out_w * 8:
        m //= 2
    return m


def _decode_scaled(buf: Buffer, height: int, width: int, m: int, fast: bool) -> np.ndarray:
    """Decode at scale m/8 (libjpeg-turbo's IDCT scaling) into this thread's buffer.

    Every JPEG decode passes here, so the decode-cost guard is checked here, on the
    scaled size, before any pixel is decoded.
    """
    simplejpeg, _ = _modules()
    min_h, min_w = -(-height * m // 8), -(-width * m // 8)
    check_decode_cost(min_h, min_w, 3)
    scratch = _scratch(max(min_h, 1) * max(min_w, 1) * 3 + 4096)
    if m == 8:
        min_h = min_w = 0
    try:
        image: np.ndarray = simplejpeg.decode_jpeg(
            buf, colorspace="RGB", fastdct=fast, fastupsample=fast,
            min_height=min_h, min_width=min_w, buffer=scratch, strict=True,
        )  # fmt: skip
    except (ValueError, TypeError) as err:
        raise CorruptImageError(f"cannot decode the JPEG: {err}") from err
    return image


def _low_pass(region: np.ndarray, shrink_y: float, shrink_x: float) -> np.ndarray:
    """Blur ``region`` for a bilinear downscale by the given factors, into a thread buffer.

    A Gaussian of sigma 0.5 * sqrt(shrink**2 - 1) per axis approximates the anti-aliasing
    filter of torchvision's bilinear resize; measured mean error about 1 level against it.
    """
    _, cv2 = _modules()
    blurred: np.ndarray | None = getattr(_local, "blur", None)
    if blurred is None or blurred.size < region.size:
        blurred = np.empty(max(region.size, 1 << 19), dtype=np.uint8)
        _local.blur = blurred
    dst = blurred[: region.size].reshape(region.shape)
    # sigma 0 would mean "same as the other axis" to OpenCV: use a negligible one instead
    sigma_y = max(0.5 * math.sqrt(max(shrink_y * shrink_y - 1.0, 0.0)), 0.01)
    sigma_x = max(0.5 * math.sqrt(max(shrink_x * shrink_x - 1.0, 0.0)), 0.01)
    cv2.GaussianBlur(region, (0, 0), sigma_x, dst=dst, sigmaY=sigma_y,
                     borderType=cv2.BORDER_REPLICATE)  # fmt: skip
    return dst


def _resize_into(region: np.ndarray, out: np.ndarray, mirror: bool, area: bool) -> None:
    """Resize ``region`` to ``out``'s size (bilinear, or area averaging), mirrored or not."""
    _, cv2 = _modules()
    size = (out.shape[1], out.shape[0])
    interp = cv2.INTER_AREA if area else cv2.INTER_LINEAR
    direct = out.flags.c_contiguous and not mirror
    dst = out if direct else _tmp_like(out)
    cv2.resize(region, size, dst=dst, interpolation=interp)
    if mirror:
        if out.flags.c_contiguous:
            cv2.flip(dst, 1, dst=out)
        else:
            np.copyto(out, dst[:, ::-1])
    elif not direct:
        np.copyto(out, dst)


def _check_out(out: np.ndarray, what: str, channels: tuple[int, ...] = (3,)) -> None:
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] not in channels:
        raise UsageError(
            f"{what} writes H x W x C uint8 images with C in {channels}; out is {out.dtype} "
            f"{out.shape}; pass a view into a uint8 NHWC batch buffer"
        )


def decode_crop(
    buf: Buffer,
    out: np.ndarray,
    rng: np.random.Generator,
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
    flip: bool = True,
) -> None:
    """Decode a JPEG and write a random resized crop of it into ``out``.

    Equivalent to torchvision's ``RandomResizedCrop(out_size, scale, ratio)`` followed by
    ``RandomHorizontalFlip()`` on the decoded image, but decodes at the smallest DCT scale
    that keeps the crop at least as large as ``out`` (see the module note). Thread-safe;
    the GIL is released while decoding and resizing.

    Args:
        buf: The encoded JPEG (bytes, memoryview, or a uint8 array such as a memmap slice).
        out: Destination, ``H x W x 3`` uint8 (a view into the batch buffer), written in place.
        rng: Random source for the box and the flip; the box is drawn first, then the flip.
        scale: Range of the crop's share of the image area.
        ratio: Range of the crop's aspect ratio, width / height.
        flip: Mirror left-right with probability 0.5.

    Raises:
        CorruptImageError: The bytes are corrupt, truncated, or not a JPEG.
        UsageError: ``out`` is not ``H x W x 3`` uint8.

    Example:
        >>> batch = np.empty((256, 224, 224, 3), np.uint8)
        >>> decode_crop(jpeg_bytes, batch[0], np.random.default_rng(0))
    """
    _check_out(out, "decode_crop")
    height, width = header(buf)
    top, left, box_h, box_w = sample_box(rng, height, width, scale, ratio)
    mirror = bool(flip and rng.random() < 0.5)
    m = dct_scale(box_h, box_w, out.shape[0], out.shape[1])
    image = _decode_scaled(buf, height, width, m, fast=True)
    s = m / 8  # libjpeg's scaled pixels cover exactly 8/m source pixels each
    y0, x0 = round(top * s), round(left * s)
    y1 = min(max(round((top + box_h) * s), y0 + 1), image.shape[0])
    x1 = min(max(round((left + box_w) * s), x0 + 1), image.shape[1])
    resize_crop(image, (y0, x0, y1 - y0, x1 - x0), out, mirror)


def resize_crop(
    image: np.ndarray, box: tuple[int, int, int, int], out: np.ndarray, mirror: bool = False
) -> None:
    """Resize the ``(top, left, height, width)`` box of a decoded image into ``out``.

    Bilinear, with a Gaussian pre-blur when shrinking by more than :data:`BLUR_ABOVE` (the
    anti-aliasing of torchvision's bilinear resize, at a third of INTER_AREA's cost). For
    already-decoded stores (the loader's raw mode with a CPU crop) as well as for
    :func:`decode_crop`.

    Args:
        image: ``H x W x C`` uint8, C = 1 to 4 (a memmap row is fine).
        box: The crop box in pixels, ``(top, left, height, width)``, inside the image.
        out: Destination ``h x w x C`` uint8, written in place (may be a strided view).
        mirror: Mirror left-right.

    Raises:
        UsageError: ``out`` is not ``h x w x C`` uint8 with C = 1 to 4.

    Example:
        >>> image, out = np.full((300, 400, 3), 7, np.uint8), np.empty((224, 224, 3), np.uint8)
        >>> resize_crop(image, sample_box(np.random.default_rng(0), 300, 400), out)
        >>> int(out.min()), int(out.max())
        (7, 7)
    """
    _check_out(out, "resize_crop", channels=(1, 2, 3, 4))
    top, left, box_h, box_w = box
    region = image[top : top + box_h, left : left + box_w]
    if out.shape[2] == 1:  # OpenCV drops a trailing axis of 1: work on the 2-D planes
        region, out = region[..., 0], out[..., 0]
    shrink_y, shrink_x = box_h / out.shape[0], box_w / out.shape[1]
    if max(shrink_y, shrink_x) > BLUR_ABOVE:
        region = _low_pass(region, shrink_y, shrink_x)
    _resize_into(region, out, mirror, area=False)


def decode(buf: Buffer) -> np.ndarray:
    """Decode a JPEG fully (accurate IDCT and upsampling) to a new ``H x W x 3`` uint8 RGB array.

    Args:
        buf: The encoded JPEG.

    Returns:
        The image.

    Raises:
        CorruptImageError: The bytes are corrupt, truncated, or not a JPEG.
    """
    height, width = header(buf)
    return np.array(_decode_scaled(buf, height, width, 8, fast=False))


def decode_resize(buf: Buffer, size: int | tuple[int, int]) -> np.ndarray:
    """Decode a JPEG resized to cover ``size`` and centre-cropped to it (for packing).

    The image is scaled, keeping its aspect ratio, so that it just covers the target
    (``size`` as an int: the shorter side becomes ``size``), then the centre
    ``size x size`` (or ``height x width``) is cut out. Large shrinks decode at a
    reduced DCT scale first, then finish with area resampling (anti-aliased).

    Args:
        buf: The encoded JPEG.
        size: Output side in pixels, or ``(height, width)``.

    Returns:
        A new ``height x width x 3`` uint8 RGB array.

    Raises:
        CorruptImageError: The bytes are corrupt, truncated, or not a JPEG.
        ImageTooLarge: The decode would cost more than ``codec.MAX_DECODE_BYTES``.
        UsageError: ``size`` is not positive.

    Example:
        >>> decode_resize(jpeg_bytes, 256).shape
        (256, 256, 3)
    """
    out_h, out_w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    if out_h <= 0 or out_w <= 0:
        raise UsageError(f"decode_resize size must be positive; got {size!r}")
    height, width = header(buf)
    factor = max(out_h / height, out_w / width)  # scale that makes the image cover the target
    cover_h = max(out_h, round(height * factor))
    cover_w = max(out_w, round(width * factor))
    m = dct_scale(height, width, cover_h, cover_w)
    image = _decode_scaled(buf, height, width, m, fast=False)
    # only the source under the centre is resized: bounded whatever the aspect ratio
    # (a 65500 x 1 JPEG never becomes an 8 M-pixel-wide cover row)
    return cover_crop(image, cover_h, cover_w, out_h, out_w)
