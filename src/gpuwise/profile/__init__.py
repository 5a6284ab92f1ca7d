"""Step-phase timing: hooks into an unmodified script, or an explicit API.

This package is also callable, so that ``gpuwise.profile()`` is the explicit API's context
manager (``gpuwise.session.profile``) whether ``gpuwise.profile`` names this package
(once any of its modules is imported) or the function re-exported by ``gpuwise``. That
call is the one import from this package upward (``tests/test_layers.py`` names it); it
goes when the package gets a name of its own. The package imports nothing heavy:
``sitecustomize`` imports ``gpuwise.profile.hooks`` in every process of a profiled job.

Example:
    >>> import gpuwise
    >>> with gpuwise.profile(sample=False, diagnose=False) as prof:
    ...     pass
    >>> prof.run.source
    'api'
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it too)

if TYPE_CHECKING:
    from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, **options: Any) -> Any:
        from gpuwise.session import profile

        return profile(**options)


sys.modules[__name__].__class__ = _CallablePackage
