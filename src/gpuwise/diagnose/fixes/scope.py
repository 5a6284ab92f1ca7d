"""Where each fix applies: the job kinds, the device vendors and the premises it needs.

Every fix constructor in ``fixes`` (and ``fixes_inference``) is declared with ``@scoped``:
the Fix records it returns are registered under their action, with the job kinds
(``training``, ``inference``, ``evaluation``; ``unknown`` when the trace does not tell),
the vendors (``nvidia``, ``amd``, ``cpu``) and the premises (names of
``diagnose.trace_rules.Premises`` fields, each true only when it holds *in size*) it
applies to. ``fits`` then tells whether a fix fits a job: inference never gets optimizer,
learning-rate, ``loss.detach()`` or DDP/FSDP advice; an AMD job never gets an
``nvidia-smi`` command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuwise.records import Fix

JOB_KINDS = ("training", "inference", "evaluation", "unknown")
VENDORS = ("nvidia", "amd", "cpu")

ANY_JOB = frozenset(JOB_KINDS)
TRAINING = frozenset({"training", "unknown"})
"""Training fixes (optimizer, learning rate, gradients, DDP/FSDP); ``unknown`` keeps them
for traces and runs that do not tell (a profiled training script, an old document)."""
LOOPS = frozenset({"training", "evaluation", "unknown"})
"""A PyTorch loop over a DataLoader: training or evaluation, not a serving engine."""
INFERENCE = frozenset({"inference"})
ANY_VENDOR = frozenset(VENDORS)
GPU = frozenset({"nvidia", "amd"})
NVIDIA = frozenset({"nvidia"})
AMD = frozenset({"amd"})


@dataclass(frozen=True)
class Scope:
    """What a fix needs to apply (see module docstring)."""

    jobs: frozenset[str] = ANY_JOB
    vendors: frozenset[str] = ANY_VENDOR
    premises: tuple[str, ...] = ()
    data: frozenset[str] = frozenset()
    """The data kinds (``records.anatomy.DATA_KINDS``) the fix fits; empty: any."""


IMAGE_DATA = frozenset({"images", "unknown"})
"""Fixes for decoding and per-sample augmentation: images (and jobs whose data is unknown)."""

SCOPES: dict[str, Scope] = {}
"""The scope of every fix made so far, by its action."""

F = TypeVar("F", bound=Callable[..., Any])


def scoped(
    jobs: frozenset[str] = ANY_JOB,
    vendors: frozenset[str] = ANY_VENDOR,
    premises: tuple[str, ...] = (),
    data: frozenset[str] = frozenset(),
) -> Callable[[F], F]:
    """Declare the scope of a fix constructor (it returns a Fix, a tuple of them or None)."""
    scope = Scope(jobs, vendors, premises, data)

    def wrap(fn: F) -> F:
        def made(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            for fix in out if isinstance(out, tuple) else (out,):
                if isinstance(fix, Fix):
                    SCOPES[fix.action] = scope
            return out

        made.__name__, made.__doc__ = fn.__name__, fn.__doc__
        made.__wrapped__ = fn  # type: ignore[attr-defined]
        made.__scope__ = scope  # type: ignore[attr-defined]
        return made  # type: ignore[return-value]

    return wrap


def scope_of(fix: Fix) -> Scope:
    """The declared scope of ``fix`` (fixes made elsewhere apply everywhere)."""
    return SCOPES.get(fix.action, Scope())


def fits(
    fix: Fix,
    job: str = "unknown",
    vendor: str | None = None,
    premises: Mapping[str, bool] | None = None,
) -> bool:
    """True when ``fix`` applies to a job of kind ``job`` on ``vendor``'s devices.

    Args:
        fix: The fix.
        job: The job kind (``JOB_KINDS``).
        vendor: ``nvidia``, ``amd``, ``cpu``, or None when not known (any vendor fits).
        premises: Premise name -> holds; a premise not given is taken to hold.
    """
    scope = scope_of(fix)
    if job not in scope.jobs:
        return False
    if vendor is not None and vendor not in scope.vendors:
        return False
    held = premises or {}
    return all(held.get(p, True) for p in scope.premises)


def fits_data(fix: Fix, data_kind: str) -> bool:
    """True when ``fix`` fits a job whose batches are ``data_kind``."""
    kinds = scope_of(fix).data
    return not kinds or data_kind in kinds


def keep_fitting(
    fixes: tuple[Fix, ...],
    job: str = "unknown",
    vendor: str | None = None,
    premises: Mapping[str, bool] | None = None,
) -> tuple[Fix, ...]:
    """Return the fixes that fit (``fits``), in order."""
    return tuple(f for f in fixes if fits(f, job, vendor, premises))
