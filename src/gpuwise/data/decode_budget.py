"""One bound on the decoded pixels that all of ``pack``'s decode threads hold together.

``MAX_DECODE_BYTES`` refuses one image that would cost too much to decode; it does not stop
four threads from each decoding an image just under it at once (four 12000 x 12000 PNGs of
140 KB each decode to 432 MB apiece, and a decode holds two or three times that while the
image is converted and encoded). Each decode asks the pack's :class:`DecodeBudget` for its
decoded size first and waits while the others hold the rest; small images never wait, since
many fit the budget together.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from gpuwise import interrupts
from gpuwise.data.codec import MAX_DECODE_BYTES

__all__ = ["DEFAULT_DECODE_BUDGET_BYTES", "DecodeBudget"]

DEFAULT_DECODE_BUDGET_BYTES = MAX_DECODE_BYTES
"""The decoded bytes all of a pack's threads may hold at once (~537 MB): one image at the
decode limit, or some 3,500 images of 224 x 224 x 3."""

POLL_S = 0.1
"""How often a waiting decode looks for a stop signal (Note [the stop rule])."""


class DecodeBudget:
    """Bytes of decoded pixels that the decodes of one pack may hold together.

    Args:
        limit_bytes: The budget. A single decode larger than it runs alone, never refused
            here (``codec.check_decode_cost`` refuses bombs).

    Example:
        >>> budget = DecodeBudget(1_000_000)
        >>> with budget.hold(640 * 480 * 3):
        ...     budget.held_bytes
        921600
    """

    def __init__(self, limit_bytes: int = DEFAULT_DECODE_BUDGET_BYTES) -> None:
        if limit_bytes < 1:
            raise ValueError(f"a decode budget of {limit_bytes} bytes holds nothing")
        self.limit_bytes = int(limit_bytes)
        self.held_bytes = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        """Hold ``nbytes`` of the budget for the block; wait while others hold too much.

        Raises:
            Interrupted: A stop signal came while waiting (the decode is not started).
        """
        want = max(0, min(int(nbytes), self.limit_bytes))
        with self._changed:
            while self.held_bytes and self.held_bytes + want > self.limit_bytes:
                self._changed.wait(POLL_S)
                interrupts.raise_if_stopped()
            self.held_bytes += want
        try:
            yield
        finally:
            with self._changed:
                self.held_bytes -= want
                self._changed.notify_all()
