"""Third-party scripts of the shapes the job anatomy reads, pinned by commit (``sources.py``).

pytorch/examples (BSD-3-Clause), each fetched by ``fetch.py`` at ``EXAMPLES_COMMIT`` and run
unmodified on made-up data that the functions here write into the run directory:

* ``mnist_hogwild``: ``torch.multiprocessing`` trainers (spawn) updating one shared model;
* ``time_sequence_prediction``: L-BFGS ``optimizer.step(closure)`` in float64, full batch;
* ``word_language_model``: token ids batched in memory (no DataLoader), an LSTM.

The CPU torch here has no torchvision (its wheel is a CUDA build) and no matplotlib is
installed, so ``mnist_hogwild`` gets a stand-in ``torchvision`` (MNIST-shaped made-up
uint8 images, a per-sample ``ToTensor``/``Normalize`` like the real ones) and
``time_sequence_prediction`` a stand-in ``matplotlib`` whose drawing calls do nothing.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

from tests.realscripts.sources import Source

EXAMPLES = "pytorch/examples"
EXAMPLES_COMMIT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"

HOGWILD_SAMPLES = 640
"""Made-up training images: 10 batches of 64 per epoch and trainer."""

_TORCHVISION = '''
"""A stand-in for torchvision's MNIST and transforms (made-up images, no download)."""
'''

_DATASETS = '''
"""MNIST-shaped made-up data: uint8 28x28 images, labels 0-9, transformed per sample."""
import torch


class MNIST(torch.utils.data.Dataset):
    def __init__(self, root, train=True, download=False, transform=None):
        g = torch.Generator().manual_seed(0 if train else 1)
        n = {n_train} if train else 128
        self.images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.images[i]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[i])
'''

_TRANSFORMS = '''
"""Per-sample transforms shaped like torchvision's: uint8 HxW to float 1xHxW, normalize."""


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, image):
        return image.float().div(255).unsqueeze(0)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean[0], std[0]

    def __call__(self, x):
        return (x - self.mean) / self.std
'''

_PYPLOT = '''
"""A stand-in for matplotlib.pyplot: every drawing call does nothing."""


def __getattr__(name):
    return lambda *args, **kwargs: None
'''


def hogwild_data(directory: Path) -> None:
    """The stand-in ``torchvision`` package (made-up MNIST) in the run directory."""
    package = directory / "torchvision"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(_TORCHVISION))
    datasets = _DATASETS.replace("{n_train}", str(HOGWILD_SAMPLES))
    (package / "datasets.py").write_text(textwrap.dedent(datasets))
    (package / "transforms.py").write_text(textwrap.dedent(_TRANSFORMS))


def sine_data(directory: Path) -> None:
    """``traindata.pt`` as ``generate_sine_wave.py`` writes it (a numpy array), but 13 x 60
    instead of 100 x 1000, and the stand-in ``matplotlib``."""
    import numpy as np
    import torch

    rng = np.random.default_rng(2)
    t, length, n = 20, 60, 13
    x = np.arange(length)[None, :] + rng.integers(-4 * t, 4 * t, n)[:, None]
    with open(directory / "traindata.pt", "wb") as out:
        torch.save(np.sin(x / 1.0 / t).astype("float64"), out)
    package = directory / "matplotlib"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("def use(*args, **kwargs):\n    pass\n")
    (package / "pyplot.py").write_text(textwrap.dedent(_PYPLOT))


def corpus_data(directory: Path) -> None:
    """A made-up ``data/wikitext-2`` (train/valid/test.txt) on a 200-word vocabulary."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(200)]
    folder = directory / "data" / "wikitext-2"
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("train.txt", 3000), ("valid.txt", 300), ("test.txt", 300)):
        text = "\n".join(" ".join(rng.choice(vocab) for _ in range(10)) for _ in range(lines))
        (folder / name).write_text(text + "\n")


ANATOMY_SOURCES: tuple[Source, ...] = (
    Source(
        "mnist_hogwild",
        EXAMPLES,
        EXAMPLES_COMMIT,
        "mnist_hogwild/main.py",
        "ae3d2ccedb48f803176810ff5f4badef9a4a9040d6f1f10a5f5d30312185c865",
        companions=(
            (
                "mnist_hogwild/train.py",
                "f0bf273c747e4e9e2cdb96b459880d38b15d66ea2c57bde7037a1defeb00c8d7",
            ),
        ),
        argv=("--epochs", "3", "--num-processes", "2", "--log-interval", "100"),
        data=hogwild_data,
        licence="BSD-3-Clause",
    ),
    Source(
        "time_sequence_prediction",
        EXAMPLES,
        EXAMPLES_COMMIT,
        "time_sequence_prediction/train.py",
        "3a5d6603cecf7bbf76f96a515dc6c9377849adeefe783edaf6f661bd02e80330",
        argv=("--steps", "4"),
        data=sine_data,
        licence="BSD-3-Clause",
    ),
    Source(
        "word_language_model",
        EXAMPLES,
        EXAMPLES_COMMIT,
        "word_language_model/main.py",
        "391de12bb7c6e07dbb105d47d017632bf80c01d2e5b25adbf83da9cdcdd5a862",
        companions=(
            (
                "word_language_model/data.py",
                "15784815a6bd18e9b25eadf6ae049915f88d4fb8faebeba9d83ae6ec8e19883d",
            ),
            (
                "word_language_model/model.py",
                "e4451a33e9b16953004bc639d736d14f42a2b21f2939ccabe4cff10d3c40b74c",
            ),
        ),
        argv=(
            *("--emsize", "16", "--nhid", "16", "--nlayers", "1", "--epochs", "1"),
            *("--use-optimizer", "--lr", "0.001", "--log-interval", "1000"),
        ),
        data=corpus_data,
        licence="BSD-3-Clause",
    ),
)
"""Scripts whose job anatomy ``test_anatomy_realscripts.py`` checks (not ``measure.py``'s)."""
