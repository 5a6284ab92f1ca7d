"""The user's own code named on the command line: ``package.module:factory``.

``gpuwise estimate/tune/advise`` take a model factory this way and ``gpuwise serve-bench``
a serving app factory; both resolve it here, so the import and its errors read the same.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gpuwise.errors import UsageError


def import_factory(
    spec: str, *, default_attr: str | None = None, returns: str
) -> Callable[..., Any]:
    """Import ``module`` and return its callable ``attr`` from ``"module:attr"``.

    Args:
        spec: ``"package.module:factory"`` (``"package.module"`` when ``default_attr`` is given).
        default_attr: The name to take when ``spec`` names none.
        returns: What the factory must return, for the error message.

    Raises:
        UsageError: The module cannot be imported, or it has no such callable.

    Example:
        >>> import_factory("collections:OrderedDict", returns="a mapping")().__class__.__name__
        'OrderedDict'
    """
    module_name, _, attr = spec.partition(":")
    attr = attr or default_attr or ""
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise UsageError(
            f"cannot import module {module_name!r} for {spec!r}: "
            f"{type(err).__name__}: {err}; check that it is on PYTHONPATH"
        ) from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(
            f"{spec!r}: module {module_name!r} has no callable {attr!r}; "
            f"name a function or class that returns {returns}"
        )
    return factory  # type: ignore[no-any-return]
