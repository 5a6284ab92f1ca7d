"""The small interface every telemetry backend implements (NVML, host, or your own).

A backend turns one hardware interface into ``Sample`` records. It knows nothing about
threads, schedules or files: the ``Sampler`` calls ``read`` at its interval from one
background thread, and owns the backend's lifetime (it calls ``close`` when it stops).

Example:
    >>> from gpuwise.telemetry.host import HostBackend
    >>> backend = HostBackend()
    >>> backend.devices()[0]["id"]
    'cpu'
    >>> backend.close()
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from gpuwise.records import Sample


@runtime_checkable
class Backend(Protocol):
    """A source of samples for one or more devices.

    Attributes:
        name: Short name used in messages (``"nvml"``, ``"host"``).
        unavailable_reason: Why this backend has no devices (``None`` when it has some);
            a sentence a user can act on, e.g. "NVML could not start: NVML Shared Library
            Not Found (no NVIDIA driver on this machine?)".
    """

    name: str
    unavailable_reason: str | None

    def devices(self) -> list[dict[str, Any]]:
        """Describe the devices this backend reads (see the device dicts in DESIGN)."""
        ...

    def read(self, t_s: float) -> list[Sample]:
        """Read every device once.

        Args:
            t_s: Time of this reading, seconds since the recording started; stamped on
                every returned sample.

        Returns:
            One sample per readable device. A metric the device cannot report is
            ``None``. A device that stopped answering yields one sample with ``event``
            set, once, and is skipped afterwards.
        """
        ...

    def close(self) -> None:
        """Release the hardware interface; safe to call twice."""
        ...
