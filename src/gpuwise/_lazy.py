"""Lazy re-exports for package ``__init__`` modules (PEP 562), so imports stay cheap."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing costs every profiled process ~10 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a package's ``__getattr__`` and ``__dir__`` importing each name on first use.

    Args:
        package: The package's name, for the error message.
        exports: Public name to the module that defines it.
    """

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def dir_() -> list[str]:
        return sorted([*importlib.import_module(package).__dict__, *exports])

    return getattr_, dir_
