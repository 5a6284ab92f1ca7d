"""Step hooks inside a profiled process, and the child-process handshake's variables.

This is the one module that names the ``GPUWISE_PROFILE*`` environment variables
(``child_env`` sets them; ``bootstrap`` reads them in the child). It imports only the
standard library at the top, because ``sitecustomize`` imports it in every Python process
of a profiled job; torch is touched only once the script itself imports it.

Hook protocol:

* ``bootstrap.bootstrap()`` (called by the ``_site/sitecustomize.py`` that the runner puts
  on ``PYTHONPATH``) adds an import hook; when the script imports torch, ``install()``
  patches torch and ``activate()`` routes events to a LoopTracker whose steps go, one JSON
  line each, to ``$GPUWISE_PROFILE_DIR/steps-<rank>-<pid>.jsonl``. The file is created on
  the first step, so processes that never step (the torchrun launcher) leave nothing.
* The patches: ``DataLoader.__iter__`` marks the environment while it starts worker
  processes (``GPUWISE_PROFILE_WORKER``, so their ``bootstrap()`` does nothing) and times
  ``__next__`` of the iterator's class; a global optimizer-step post hook marks the end of
  compute; on a CUDA build, ``Tensor.to``/``Tensor.cuda`` to a CUDA device count the copy
  and record CUDA events around it, read later (``CopyResolver``). No patch synchronizes.
* Forked children (fork-started DataLoader workers) drop the tracker at fork.
* Once recording, ``inject.arm`` records where the job builds its loaders and optimizers
  (``setup-<pid>.json``) and applies the trial in ``GPUWISE_TRIAL`` (``gpuwise try``).
"""

from __future__ import annotations

import os
from _thread import get_ident

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it too)

if TYPE_CHECKING:  # typing costs milliseconds, and this module loads in every process
    from collections.abc import Mapping
    from typing import Any

ENV_FLAG = "GPUWISE_PROFILE"
ENV_DIR = "GPUWISE_PROFILE_DIR"
ENV_T0 = "GPUWISE_PROFILE_T0"
ENV_WORKER = "GPUWISE_PROFILE_WORKER"
ENV_PKG = "GPUWISE_PROFILE_PKG"
ENV_TRIAL = "GPUWISE_TRIAL"
"""One trial's overrides and step limit, a JSON object (``profiling/inject.py``)."""


def child_env(base: Mapping[str, str], profile_dir: str, t0_wall_s: float) -> dict[str, str]:
    """Return the environment for a profiled child process.

    Args:
        base: The environment to extend (usually ``os.environ``).
        profile_dir: Directory for the per-process step files.
        t0_wall_s: Wall-clock time (``time.time()``) that is time 0 of the Run.

    Returns:
        ``base`` plus the flag, directory and time origin, with the ``_site`` directory
        prepended to ``PYTHONPATH`` (the user's entries kept after it), and gpuwise's own
        package directory for an interpreter that cannot import gpuwise itself.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    site = os.path.join(here, "_site")
    env = {k: v for k, v in base.items() if k != ENV_WORKER}
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site if not old else site + os.pathsep + old
    env.update({ENV_FLAG: "1", ENV_DIR: profile_dir, ENV_T0: repr(t0_wall_s)})
    env[ENV_PKG] = os.path.dirname(here)
    return env


class _State:
    tracker: Any = None
    patches: Any = None
    loaders: list[Any] = []  # noqa: RUF012 - one registry for the process
    installs = 0
    fork_hook = False


def activate(tracker: Any) -> None:
    """Route the patched functions' events to ``tracker`` (a LoopTracker)."""
    _State.tracker = tracker


def deactivate(tracker: Any) -> None:
    """Stop routing events to ``tracker`` and close its open step."""
    if _State.tracker is tracker:
        _State.tracker = None
    tracker.close()


def active_tracker() -> Any:
    """The LoopTracker that receives this thread's events now, or None.

    Only the thread that created the tracker (the training loop's) is timed: a prefetch
    thread's batch requests and copies are off the critical path.
    """
    tracker = _State.tracker
    if tracker is None or tracker.thread_id != get_ident():
        return None
    return tracker


def _drop_in_child() -> None:
    _State.tracker = None


def register_loader(cls: Any) -> Any:
    """Time ``cls``'s iteration like a DataLoader's (gpuwise's own loaders register here).

    Works before or after ``install()``; returns ``cls``, so it can decorate a class.
    """
    if cls not in _State.loaders:
        _State.loaders.append(cls)
        if _State.patches is not None:
            _State.patches.time_loader(cls)
    return cls


def install() -> None:
    """Patch torch for step timing (idempotent; each call needs one ``uninstall()``)."""
    from gpuwise.profiling import patches

    if _State.installs == 0:
        _State.patches = patches.apply(active_tracker, ENV_WORKER)
        for cls in _State.loaders:
            _State.patches.time_loader(cls)
    if not _State.fork_hook:
        os.register_at_fork(after_in_child=_drop_in_child)
        _State.fork_hook = True
    _State.installs += 1


def uninstall() -> None:
    """Undo ``install()`` once the last user is done."""
    if _State.installs == 0:
        return
    _State.installs -= 1
    if _State.installs == 0:
        _State.patches.remove()
        _State.patches = None
