"""Forward / backward / optimizer time within a step (the step protocol in ``steps``).

The hooks report region boundaries; ``ComputeSplit`` turns them into seconds per region on
the step timer's clock.
"""

from __future__ import annotations

from collections.abc import Callable

SPLIT = ("forward", "backward", "optimizer")


class ComputeSplit:
    """Time spent inside forward / backward / optimizer regions (see the step protocol).

    Regions nest (Lightning runs forward and backward inside ``optimizer.step(closure)``);
    time goes to the innermost one only. A host-to-device copy pauses the region it runs in.
    Time seen before the step's last optimizer step is kept; time after it is ``post``.

    Args:
        clock: The StepTimer's clock.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.stack: list[str] = []
        self.seen = False
        self._mark = 0.0
        self._pending = dict.fromkeys(SPLIT, 0.0)
        self._kept = dict.fromkeys(SPLIT, 0.0)

    def enter(self, region: str, counting: bool) -> None:
        """A region (``forward``, ``backward``, ``optimizer``, or ``copy``) begins."""
        self._account(counting)
        self.stack.append(region)
        self.seen = True

    def exit(self, region: str, counting: bool) -> None:
        """The innermost open ``region`` ends."""
        self._account(counting)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] == region:
                del self.stack[i]
                return

    def pause(self) -> None:
        """Time until the next event belongs to no region (the step waited for data)."""
        self._account(False)

    def keep(self) -> None:
        """Everything measured so far belongs to the step's compute (an optimizer step ran)."""
        for k in SPLIT:
            self._kept[k] += self._pending[k]
            self._pending[k] = 0.0

    def take(self, *, keep_pending: bool) -> tuple[float, float, float] | None:
        """The step's split, then reset; ``None`` when no region was seen in the step."""
        if keep_pending:
            self.keep()
        split = tuple(self._kept[k] for k in SPLIT) if self.seen else None
        self._pending = dict.fromkeys(SPLIT, 0.0)
        self._kept = dict.fromkeys(SPLIT, 0.0)
        self.seen = bool(self.stack)
        self._mark = self.clock()
        return split  # type: ignore[return-value]

    def take_kept(self) -> tuple[float, float, float]:
        """The time kept so far (up to the last update), for a step cut there; reset it.

        The time seen since (``pending``) stays, for the step that continues.
        """
        split = tuple(self._kept[k] for k in SPLIT)
        self._kept = dict.fromkeys(SPLIT, 0.0)
        self.seen = True
        return split  # type: ignore[return-value]

    def _account(self, counting: bool) -> None:
        now = self.clock()
        if counting and self.stack and self.stack[-1] in self._pending:
            self._pending[self.stack[-1]] += now - self._mark
        self._mark = now
