"""Third-party scripts of the loop shapes a step is read from, pinned by commit (``sources.py``).

pytorch/examples (BSD-3-Clause) at ``anatomy_sources.EXAMPLES_COMMIT``, run unmodified on
made-up data that the functions here write into the run directory:

* ``reinforce``: policy gradient by episodes, no DataLoader (``reinforcement_learning``);
  a stand-in ``gymnasium`` whose CartPole runs episodes of ``EPISODE_LENGTH`` steps and
  whose reward threshold is crossed after exactly ``EPISODES`` episodes;
* ``gcn``: full-batch graph training with two ``eval()``/``no_grad`` evaluations after
  every step; a stand-in ``requests`` serves a made-up ``cora.tgz`` from the run directory.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
from pathlib import Path

from tests.realscripts.anatomy_sources import EXAMPLES, EXAMPLES_COMMIT
from tests.realscripts.sources import Source

EPISODES = 30
"""Episodes the stand-in CartPole lets the script run before it is "solved"."""

EPISODE_LENGTH = 20
"""Environment steps per episode (each a batch-1 forward of the policy)."""

GCN_NODES = 1600
"""Made-up Cora nodes: the script keeps the first 1,500 of a permutation for test and
validation, the other 100 train."""

GCN_EPOCHS = 12

_GYM = '''
"""A stand-in for gymnasium's CartPole: fixed-length episodes, a reachable threshold."""
import numpy as np

EPISODES, LENGTH = {episodes}, {length}


def _running(k):
    # reinforce.py's running reward after k episodes of LENGTH reward each, from 10
    return LENGTH - (LENGTH - 10) * 0.95 ** k


class _Spec:
    reward_threshold = (_running(EPISODES - 1) + _running(EPISODES)) / 2


class _CartPole:
    spec = _Spec()

    def __init__(self):
        self._rng = np.random.default_rng(0)
        self._t = 0

    def reset(self, seed=None):
        self._t = 0
        return self._rng.standard_normal(4), {{}}

    def step(self, action):
        self._t += 1
        return self._rng.standard_normal(4), 1.0, self._t >= LENGTH, False, {{}}


def make(name, render_mode=None):
    return _CartPole()
'''

_REQUESTS = '''
"""A stand-in for requests.get: serves the run directory's cora.tgz."""
import contextlib


@contextlib.contextmanager
def get(url, stream=False):
    with open("cora.tgz", "rb") as raw:
        yield type("Response", (), {"raw": raw})()
'''


def reinforce_data(directory: Path) -> None:
    """The stand-in ``gymnasium`` module in the run directory."""
    text = _GYM.format(episodes=EPISODES, length=EPISODE_LENGTH)
    (directory / "gymnasium.py").write_text(textwrap.dedent(text))


def cora_data(directory: Path) -> None:
    """A made-up ``cora.tgz`` (``cora/cora.content``, ``cora/cora.cites``) and ``requests``."""
    import numpy as np

    rng = np.random.default_rng(0)
    ids = np.arange(GCN_NODES) * 3 + 7
    lines = []
    for i, node in enumerate(ids):
        words = " ".join(str(int(b)) for b in rng.random(24) < 0.2)
        lines.append(f"{node} {words} class{i % 7}")
    cites = [f"{ids[i]} {ids[j]}" for i, j in rng.integers(0, GCN_NODES, (4 * GCN_NODES, 2))]
    with tarfile.open(directory / "cora.tgz", "w:gz") as tgz:
        for name, text in (("cora.content", lines), ("cora.cites", cites)):
            data = ("\n".join(text) + "\n").encode()
            info = tarfile.TarInfo(f"cora/{name}")
            info.size = len(data)
            tgz.addfile(info, io.BytesIO(data))
    (directory / "requests.py").write_text(textwrap.dedent(_REQUESTS))


STEP_SOURCES: tuple[Source, ...] = (
    Source(
        "reinforce",
        EXAMPLES,
        EXAMPLES_COMMIT,
        "reinforcement_learning/reinforce.py",
        "41db0a9af332bfb6018b9223c39cf7827f93a7c93aa92bfa0848b82442ca3e31",
        argv=("--log-interval", "100"),
        data=reinforce_data,
        licence="BSD-3-Clause",
    ),
    Source(
        "gcn",
        EXAMPLES,
        EXAMPLES_COMMIT,
        "gcn/main.py",
        "152157088c7ac6c048aa28a4e69b3b59d68503bf24df96464054fdea7cacd76b",
        argv=("--epochs", str(GCN_EPOCHS), "--no-accel", "--val-every", "100"),
        data=cora_data,
        licence="BSD-3-Clause",
    ),
)
"""Scripts whose step identity ``test_step_realscripts.py`` checks."""
