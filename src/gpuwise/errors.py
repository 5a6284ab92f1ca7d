"""Errors raised by gpuwise.

Every message says what was seen, what was expected, and the next step.
"""

from __future__ import annotations


class GpuwiseError(Exception):
    """Base class of every error gpuwise raises on purpose.

    Attributes:
        exit_status: The command line's exit code for it (1: the work failed).
    """

    exit_status = 1


class InputKindError(GpuwiseError):
    """An input is not of a kind the command reads (exit 2, as a usage error)."""

    exit_status = 2


class UsageError(GpuwiseError):
    """The caller asked for something that cannot be done as asked (bad flag value, shape)."""


class NoDeviceError(GpuwiseError):
    """A device (GPU, NVML, CUDA) that the operation needs is not available."""


class MissingExtraError(GpuwiseError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{module}' package, which is not installed; "
            f"install it with: pip install 'gpuwise[{extra}]'"
        )
        self.module = module
        self.extra = extra


class LogFormatError(GpuwiseError):
    """A recorded log or trace cannot be read (names the file and line or record)."""


class StoreFormatError(GpuwiseError):
    """A gpuwise store is malformed, corrupt, or from an unsupported format version."""


class StoreHeaderError(StoreFormatError):
    """A store header names a field or shard wrongly (a mistyped value, a path outside it)."""

    exit_status = 2


class OutOfMemoryProbe(GpuwiseError):
    """A sizing probe ran out of memory (the tuner recovers from it)."""


class FlagValueError(UsageError):
    """A flag's value names nothing that exists (``--devices 99``): exit 2, as argparse's."""

    exit_status = 2
