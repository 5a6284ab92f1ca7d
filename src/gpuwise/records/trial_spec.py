"""The optimizer part of a trial's overrides (``profiling/inject.py``'s trial protocol).

A trial that sets optimizer flags names, per optimizer class the job built, the flags to
set on it: ``{"optimizer_flags": {"Adam": {"fused": True}, "RMSprop": {"foreach": True}}}``.
A job with two optimizers (a GAN's generator and discriminator) gets both changed, each
with the flag its own class offers. The older one-class form, ``optimizer_class`` with
``optimizer``, is still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JOB_OPTIMIZER = ""
"""The class key of flags given without a class: they go on the job's (first) optimizer."""


def optimizer_flags(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The flags a trial sets, by optimizer class name (``{}``: none).

    Example:
        >>> optimizer_flags({"optimizer_class": "Adam", "optimizer": {"fused": True}})
        {'Adam': {'fused': True}}
    """
    per_class = spec.get("optimizer_flags")
    if isinstance(per_class, Mapping):
        return {
            str(cls): dict(flags)
            for cls, flags in per_class.items()
            if isinstance(flags, Mapping) and flags
        }
    flags = spec.get("optimizer")
    target = spec.get("optimizer_class")
    if isinstance(flags, Mapping) and flags:
        return {target if isinstance(target, str) else JOB_OPTIMIZER: dict(flags)}
    return {}
