"""What a profiled job's input batches are: images, token ids, in-memory tensors, audio.

Read from what the profile hooks saw: the Dataset class and its transforms at the line that
built the DataLoader (``setup_capture``), and token-id inputs of an embedding that the FLOP
count met on the first iteration (``model_flops``). A job that builds no DataLoader trains
on tensors it holds in memory.
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
    for kind, marks in (
        ("tensors", TENSOR_MARKS),
        ("audio", AUDIO_MARKS),
        ("images", IMAGE_MARKS),
        ("tokens", TOKEN_MARKS),
    ):
        hit = next((m for m in marks if m in text), None)
        if hit is not None:
            return kind, f"setup: the DataLoader's dataset and transforms ({hit!r})"
    return "unknown", "setup: the dataset's class and transforms name no known kind"


def _token_inputs(model_flops: Any) -> bool:
    if not isinstance(model_flops, Mapping):
        return False
    counted = model_flops.get("counted") or []
    return any(isinstance(c, Mapping) and c.get("tokens") for c in counted)
