"""Arm the step hooks in a profiled child process: the handshake's receiving end.

``sitecustomize`` (``_site/``) calls ``bootstrap()`` in every Python process of the job.
When the runner asked for a profile (the variables ``hooks.child_env`` sets), it waits for
``import torch`` and then starts a file recording (``recording.file_recording``), which
installs the hooks (Hook protocol in ``hooks.py``). Above ``hooks`` and ``recording``, so
neither imports the other back; like ``hooks``, it imports only the standard library at the
top.
"""

from __future__ import annotations

import os
import sys
import time

from gpuwise.profiling.hooks import ENV_DIR, ENV_FLAG, ENV_T0, ENV_TRIAL, ENV_WORKER

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it too)

if TYPE_CHECKING:  # typing costs milliseconds, and this module loads in every process
    from collections.abc import Callable, Mapping
    from typing import Any


def bootstrap(environ: Mapping[str, str] | None = None) -> bool:
    """Arm the hooks in this process if the runner asked for it (sitecustomize calls this).

    Returns:
        True when the hooks are armed (now, or when torch gets imported).
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_FLAG) != "1" or env.get(ENV_WORKER) or not env.get(ENV_DIR):
        return False
    if "torch" in sys.modules:
        _start_recording(env)
    else:
        sys.meta_path.insert(0, _TorchImportHook(lambda: _start_recording(env)))
    return True


class _TorchImportHook:
    """A meta-path finder that runs a callback once ``import torch`` has finished.

    It stays on ``sys.meta_path`` until torch is executed: a library that only asks
    whether torch is installed (``importlib.util.find_spec("torch")``, as ``datasets`` and
    ``transformers`` do on import) gets a spec whose loader never runs, and the import that
    follows must still be seen.
    """

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.searching = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self.searching:
            return None
        self.searching = True  # the finders below may look torch up through sys.meta_path
        try:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
                if spec is not None and spec.loader is not None:
                    _call_after_exec(spec.loader, self._imported)
                    return spec
        finally:
            self.searching = False
        return None

    def _imported(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback()


def _call_after_exec(loader: Any, callback: Callable[[], None]) -> None:
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        original(module)
        del loader.exec_module  # back to the class's method
        try:
            callback()
        except Exception as err:  # profiling must never break the user's script
            print(f"gpuwise: step hooks not installed: {err!r}", file=sys.stderr)
            _note_failure(err)

    loader.exec_module = exec_module


def _note_failure(err: Exception) -> None:
    """Leave ``site-<pid>.json`` for the runner: why this process records no steps."""
    import json

    directory = os.environ.get(ENV_DIR)
    if not directory:
        return
    note = {"gpuwise": "hooks_failed", "error": f"{type(err).__name__}: {err}"}
    note.update(pid=str(os.getpid()), python=sys.version.split()[0], executable=sys.executable)
    try:
        with open(os.path.join(directory, f"site-{os.getpid()}.json"), "w") as out:
            json.dump(note, out)
    except OSError:
        pass


def _start_recording(env: Mapping[str, str]) -> None:
    from gpuwise.profiling.recording import file_recording

    t0_wall_s = float(env.get(ENV_T0) or time.time())
    recording = file_recording(env[ENV_DIR], t0_wall_s).start()
    from gpuwise.profiling.inject import arm  # construction capture and trial overrides

    arm(env[ENV_DIR], env.get(ENV_TRIAL), recording.recorder)
    import atexit

    atexit.register(recording.stop)
