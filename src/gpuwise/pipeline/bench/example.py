"""The built-in serving example: JPEG classification that runs offline on any machine.

``pre`` decodes a JPEG and resizes it to ``size x size`` uint8 (what crosses to the
device); on the device the batch is normalised to float NCHW; the model is a small
CNN with random weights (nothing is downloaded); ``post`` takes the top-5 classes and
encodes them as JSON. The inputs are synthetic JPEGs made in memory (smooth colour
fields with noise, 240-400 px, quality 90), so the example needs no files and no network.

``gpuwise serve-bench`` without a factory serves this; a user's factory returns a
``ServingApp`` the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from gpuwise.data.transforms import as_nchw, normalize
from gpuwise.errors import UsageError
from gpuwise.user_code import import_factory


@dataclass(frozen=True)
class ServingApp:
    """What ``gpuwise serve-bench`` serves: the stages and a source of inputs.

    Attributes:
        name: Shown in reports.
        pre: One input -> one sample (see ``Pipeline``).
        model: Batch -> outputs.
        post: One output row -> result.
        make_input: Request number -> input.
        transform: Runs on the device before the model, or ``None``.
        device: Where the model runs.
    """

    name: str
    pre: Callable[[Any], Any]
    model: Callable[[torch.Tensor], Any]
    post: Callable[[Any], Any]
    make_input: Callable[[int], Any]
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None
    device: str = "cpu"


class SmallCNN(nn.Module):
    """Four strided 3x3 convolutions, global pooling and an MLP classifier head.

    The head's 6.8 M weights (27 MB) make a one-sample forward read more weights than it
    computes with, as transformer and MLP heads do; a batch reads them once for all its
    rows (measured on one core of the 2-core test machine, 128 px: 2.3 ms for one sample
    alone, 0.88 ms per sample in a batch of 16).
    """

    def __init__(self, classes: int = 1000, width: int = 32, hidden: int = 2048) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for i in range(4):
            out = width * 2**i
            layers += [nn.Conv2d(channels, out, 3, stride=2, padding=1), nn.ReLU(inplace=True)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``B x classes`` of a normalised ``B x 3 x H x W`` batch."""
        logits: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return logits


def synthetic_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """Make ``count`` JPEGs in memory (240-400 px sides, quality 90), seeded.

    Raises:
        MissingExtraError: The ``jpeg`` extra (OpenCV, simplejpeg) is not installed.
    """
    from gpuwise.data.codec import encode_jpeg

    rng = np.random.default_rng(seed)
    images = []
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(240, 401, size=2))
        coarse = rng.integers(0, 256, size=(4, 4, 3)).astype(np.float32)
        field = np.kron(coarse, np.ones((h // 4 + 1, w // 4 + 1, 1), dtype=np.float32))[:h, :w]
        field += rng.normal(0.0, 6.0, size=(h, w, 3)).astype(np.float32)
        images.append(encode_jpeg(np.clip(field, 0, 255).astype(np.uint8), quality=90))
    return images


def top5_json(logits: torch.Tensor) -> str:
    """Encode the five most likely classes of one row of logits as JSON."""
    p, idx = logits.softmax(dim=0).topk(5)
    return json.dumps(
        {"top5": [{"class": int(i), "p": round(float(q), 5)} for q, i in zip(p, idx, strict=True)]}
    )


def load_app(spec: str | None) -> ServingApp:
    """Return the app a ``module:factory`` names (the built-in example for ``None``).

    Raises:
        UsageError: The module cannot be imported, or the factory is missing, raises, or
            returns something other than a ``ServingApp``.
    """
    if spec is None:
        return image_classifier()
    factory = import_factory(spec, default_attr="app", returns="a gpuwise.pipeline.ServingApp")
    try:
        app = factory()
    except Exception as err:  # the user's code: say so, it is not a gpuwise bug
        raise UsageError(
            f"the app factory {spec} raised {type(err).__name__}: {err}; this is an error in "
            "the serving app's code, not in gpuwise; fix the factory"
        ) from err
    if not isinstance(app, ServingApp):
        raise UsageError(
            f"{spec} returned a {type(app).__name__}; it must return a "
            "gpuwise.pipeline.ServingApp(name, pre, model, post, make_input)"
        )
    return app


def image_classifier(size: int = 128, images: int = 64, seed: int = 0) -> ServingApp:
    """The built-in example (see the module docstring).

    Args:
        size: Side of the model's input in pixels.
        images: Distinct synthetic JPEGs; requests cycle through them.
        seed: Seed of the images and the model's weights.

    Returns:
        The app ``gpuwise serve-bench`` serves.

    Example:
        >>> app = image_classifier()
        >>> with Pipeline(app.pre, app.model, app.post, transform=app.transform) as pipe:
        ...     print(pipe.submit(app.make_input(0)).result(timeout=10)[:9])   # doctest: +SKIP
        {"top5":
    """
    from gpuwise.data.jpeg import decode_resize

    jpegs = synthetic_jpegs(images, seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = SmallCNN().eval().to(device)

    # size x size x 3 uint8 (1 byte per value crosses); a partial of a module-level
    # function, so that worker processes can receive it
    pre = functools.partial(decode_resize, size=size)

    def to_model_input(batch: torch.Tensor) -> torch.Tensor:
        return normalize(as_nchw(batch, "NHWC"))

    return ServingApp(
        name=f"built-in: JPEG {size}px -> small CNN -> top-5 JSON",
        pre=pre,
        model=net,
        post=top5_json,
        make_input=lambda i: jpegs[i % len(jpegs)],
        transform=to_model_input,
        device=device,
    )
