"""Arm gpuwise's step hooks in this Python process, then run the next ``sitecustomize``.

``gpuwise profile`` puts this directory first on ``PYTHONPATH`` of the command it runs, so
every Python process of the job (torchrun's launcher and ranks included) runs this file at
start-up. It stays cheap: it adds an import hook and imports nothing heavy; the step hooks
are installed only when the script imports torch (``gpuwise.profile.hooks.bootstrap``).
"""

import os
import sys


def _arm() -> None:
    try:
        from gpuwise.profile.hooks import bootstrap
    except ImportError as err:
        sys.stderr.write(f"gpuwise: this Python cannot import gpuwise ({err}); no steps recorded\n")
        return
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
