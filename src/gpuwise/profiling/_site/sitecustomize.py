"""Arm gpuwise's step hooks in this Python process, then run the next ``sitecustomize``.

``gpuwise profile`` puts this directory first on ``PYTHONPATH`` of the command it runs, so
every Python process of the job (torchrun's launcher and ranks included) runs this file at
start-up. It stays cheap: it adds an import hook and imports nothing heavy; the step hooks
are installed only when the script imports torch (``gpuwise.profiling.bootstrap``).

An interpreter from another environment (gpuwise installed with pipx, or in a tools venv)
may not find gpuwise. The hooks need only the standard library and the script's own torch,
so this file then loads the profiler's own copy of the ``gpuwise`` package from
``$GPUWISE_PROFILE_PKG`` without putting anything else of that environment on the path,
and leaves a note (``site-<pid>.json`` in the profile directory) that the runner reads.
"""

import json
import os
import sys


def _note(**fields: str) -> None:
    directory = os.environ.get("GPUWISE_PROFILE_DIR")
    if not directory or os.environ.get("GPUWISE_PROFILE_WORKER"):
        return
    record = dict(fields, pid=os.getpid(), python=sys.version.split()[0])
    record["executable"] = sys.executable
    try:
        with open(os.path.join(directory, f"site-{os.getpid()}.json"), "w") as out:
            json.dump(record, out)
    except OSError:
        pass


def _borrow() -> None:
    """Load gpuwise from the profiler's environment: only its package directory."""
    import importlib.util

    package = os.environ.get("GPUWISE_PROFILE_PKG", "")
    init = os.path.join(package, "__init__.py")
    if not package or not os.path.isfile(init):
        raise ImportError(f"no gpuwise package at {package!r}")
    spec = importlib.util.spec_from_file_location(
        "gpuwise", init, submodule_search_locations=[package]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load gpuwise from {package!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpuwise"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["gpuwise"]
        raise


def _arm() -> None:
    if os.environ.get("GPUWISE_PROFILE") != "1":
        return
    try:
        from gpuwise.profiling.bootstrap import bootstrap
    except ImportError as own_err:
        try:
            _borrow()
            from gpuwise.profiling.bootstrap import bootstrap
        except Exception as err:
            message = f"gpuwise: this Python cannot import gpuwise ({err}); no steps recorded\n"
            sys.stderr.write(message)
            _note(gpuwise="failed", error=f"{type(err).__name__}: {err}", own_error=str(own_err))
            return
        _note(gpuwise="borrowed", error=str(own_err))
        sys.stderr.write(
            f"gpuwise: {sys.executable} cannot import gpuwise; the step hooks use the profiler's"
            " copy of its package\n"
        )
    bootstrap()


def _chain() -> None:
    """Run the sitecustomize this one shadows, as Python would have without it."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm()
_chain()
