"""What a profiled job's input batches are: images, token ids, in-memory tensors, audio.

Read from what the profile hooks saw: the Dataset class and its transforms at the line that
built the DataLoader (``setup_capture``), token-id inputs of an embedding that the FLOP
count met on the first iteration (``model_flops``), and, when the class names no kind (a
custom pair Dataset, a ``random_split`` Subset), the first batch itself
(``profiling.batch_probe``: dtype, shape, value range). A job that builds no DataLoader
trains on tensors it holds in memory.

Batch shapes: ``[B, C, H, W]`` (or ``[B, H, W, C]``) with 1, 3 or 4 channels and sides of
at least ``MIN_IMAGE_SIDE`` is images (uint8 pixels, or floats in a normalized range);
``[B, H, W]`` uint8 is grey images; ``[B, T]`` non-negative integers is token ids;
``[B, T]`` floats in ``[-1, 1]`` with ``T`` of at least ``MIN_AUDIO_SAMPLES`` is audio;
any other tensor batch is tensors (tabular or features).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IMAGE_MARKS = (
    "image", "mnist", "cifar", "imagenet", "coco", "torchvision", "vision", "pil",
    "jpeg", "png", "randomresizedcrop", "randomcrop", "totensor", "resize", "devicetransform",
)  # fmt: skip
AUDIO_MARKS = ("audio", "torchaudio", "speech", "wav", "spectrogram", "librispeech")
TOKEN_MARKS = ("token", "text", "corpus", "wikitext", "vocab", "sentence")
TENSOR_MARKS = ("tensordataset", "stackdataset", "torch.tensor")


def data_kind(setup: Mapping[str, Any], model_flops: Any = None) -> tuple[str, str]:
    """``(kind, where it came from)``; kind is one of ``records.anatomy.DATA_KINDS``."""
    loaders = [ld for ld in setup.get("loaders") or [] if isinstance(ld, Mapping)]
    if _token_inputs(model_flops):
        return "tokens", "profile: the model's embedding took integer token ids"
    if not loaders:
        if setup.get("optimizers") or setup.get("losses"):
            return "tensors", "setup: no DataLoader; the script trains on tensors it holds"
        return "unknown", "setup: no DataLoader was built"
    text = " ".join(
        str(ld.get(k) or "") for ld in loaders for k in ("dataset", "transforms", "collate")
    ).lower()
    from_batch = batch_kind(loaders)
    for kind, marks in (
        ("tensors", TENSOR_MARKS),
        ("audio", AUDIO_MARKS),
        ("images", IMAGE_MARKS),
        ("tokens", TOKEN_MARKS),
    ):
        hit = next((m for m in marks if m in text), None)
        if hit is not None:
            return kind, f"setup: the DataLoader's dataset and transforms ({hit!r})"
    if from_batch is not None:
        return from_batch
    return "unknown", "setup: the dataset's class and transforms name no known kind"


MIN_IMAGE_SIDE = 8
"""Sides under 8 pixels are a feature map or a table, not a picture."""

IMAGE_CHANNELS = (1, 3, 4)

NORMALIZED_RANGE = 10.0
"""Pixels as floats lie in [0, 1], [0, 255] or, normalized, within a few units of 0."""

MIN_AUDIO_SAMPLES = 4000
"""A quarter second at 16 kHz: shorter float rows are features, not a waveform."""


def batch_kind(loaders: list[Mapping[str, Any]]) -> tuple[str, str] | None:
    """``(kind, why)`` from the first loader's first batch (``None``: no batch was read)."""
    facts = next((ld.get("batch") for ld in loaders if isinstance(ld.get("batch"), Mapping)), None)
    if not isinstance(facts, Mapping):
        return None
    shape = [int(n) for n in facts.get("shape") or [] if isinstance(n, int)]
    dtype = str(facts.get("dtype") or "")
    lo, hi = _number(facts.get("min")), _number(facts.get("max"))
    kind = _kind_of(shape, dtype, lo, hi)
    spread = f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else ""
    return kind, f"batch: the first batch is {dtype} {shape}{spread}"


def _kind_of(shape: list[int], dtype: str, lo: float | None, hi: float | None) -> str:
    integer = dtype.startswith(("int", "uint"))
    floating = dtype.startswith(("float", "bfloat"))
    if image_side(shape, dtype, lo, hi) is not None:
        return "images"
    if len(shape) == 2 and integer and (lo is None or lo >= 0) and shape[1] >= 2:
        return "tokens"
    audio = len(shape) == 2 and floating and shape[1] >= MIN_AUDIO_SAMPLES
    if audio and lo is not None and hi is not None and lo >= -1.0 and hi <= 1.0:
        return "audio"
    return "tensors"


def image_side(shape: list[int], dtype: str, lo: float | None, hi: float | None) -> int | None:
    """The side of the images a batch of ``shape`` holds (the shorter one), else ``None``."""
    uint8 = dtype == "uint8"
    in_range = lo is not None and hi is not None and max(abs(lo), abs(hi)) <= NORMALIZED_RANGE
    pixels = uint8 or (dtype.startswith(("float", "bfloat")) and (in_range or hi == 255))
    if not pixels:
        return None
    sides: tuple[int, int] | None = None
    if len(shape) == 4 and shape[1] in IMAGE_CHANNELS:
        sides = (shape[2], shape[3])
    elif len(shape) == 4 and shape[3] in IMAGE_CHANNELS:
        sides = (shape[1], shape[2])  # channels last
    elif len(shape) == 3 and uint8:
        sides = (shape[1], shape[2])  # grey pixels, no channel dimension
    if sides is None or min(sides) < MIN_IMAGE_SIDE:
        return None
    return min(sides)


def loader_image_side(setup: Mapping[str, Any] | None) -> int | None:
    """The side of the images the job's first loader's first batch holds, if it read one."""
    for ld in (setup or {}).get("loaders") or []:
        facts = ld.get("batch") if isinstance(ld, Mapping) else None
        if isinstance(facts, Mapping):
            shape = [int(n) for n in facts.get("shape") or [] if isinstance(n, int)]
            lo, hi = _number(facts.get("min")), _number(facts.get("max"))
            return image_side(shape, str(facts.get("dtype") or ""), lo, hi)
    return None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _token_inputs(model_flops: Any) -> bool:
    if not isinstance(model_flops, Mapping):
        return False
    counted = model_flops.get("counted") or []
    return any(isinstance(c, Mapping) and c.get("tokens") for c in counted)
