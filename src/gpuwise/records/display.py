"""How records show themselves in a notebook (``_repr_html_``), drawn by the report layer.

The records are the bottom layer and draw nothing themselves: their ``_repr_html_``
asks ``gpuwise.report.notebook`` by name, importing it on first use (as the package's
lazy public names are), so that ``import gpuwise`` stays cheap and no module of the
records imports the report layer.
"""

from __future__ import annotations

import importlib
from typing import Any

VIEWS = "gpuwise.report.notebook"
"""The module that holds the views (``run_html``, ``comparison_html``)."""


def repr_html(view: str, obj: Any) -> str:
    """Render ``obj`` with the report layer's view ``view`` (``"run_html"``, ...)."""
    return str(getattr(importlib.import_module(VIEWS), view)(obj))
