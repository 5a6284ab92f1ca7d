"""The one rule for stopping a long command: the first SIGINT, SIGTERM or SIGHUP ends it.

Note [the stop rule]
    ``gpuwise try``, ``profile``, ``monitor``, ``serve-bench`` and ``pack`` run under
    :func:`stop_on_signals`. The first SIGINT, SIGTERM or SIGHUP stops the whole command:

    - while a child runs (``childproc.forward_signals``) the signal is passed on to it and
      noted here; the command waits for the child to end, then sees :func:`stopped_by`
      and runs nothing more;
    - inside :func:`deferred` (work on threads: ``pack``'s decode pool) the signal is only
      noted; the block checks :func:`raise_if_stopped` between pieces of work and waits on
      its threads with a bound, so the signal never lands inside a lock it holds;
    - otherwise the handler raises :class:`Interrupted` at once in the main thread.

    The command keeps and prints what it measured, then exits ``128 + N`` for signal N,
    as a shell does for a command a signal ended. Later signals are noted, not raised
    again: a second Ctrl-C must not break the cleanup that the first one started, up to
    the process's exit (``gpuwise`` keeps noting them after the block once one came).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a long command (Note [the stop rule])."""

_received: list[int] = []
"""Signals received since the current command started, in order."""

_deferring: list[bool] = []
"""Non-empty while the main thread runs a :func:`deferred` block."""


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the command; its exit status is ``128 + N``.

    A ``KeyboardInterrupt`` (as Ctrl-C is in Python), so that no ``except Exception``
    swallows it and code that already stops cleanly on Ctrl-C stops so on SIGTERM too.

    Attributes:
        signum: The signal's number.
        exit_status: ``128 + signum``.
    """

    def __init__(self, signum: int, message: str | None = None) -> None:
        self.signum = int(signum)
        self.exit_status = 128 + self.signum
        name = signal_name(signum)
        super().__init__(message or f"interrupted by {name}")


def signal_name(signum: int) -> str:
    """``15`` -> ``"SIGTERM"`` (the number itself for a signal Python does not name)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def note(signum: int) -> bool:
    """Record a stop signal; return True when it is the first of this command."""
    _received.append(int(signum))
    return len(_received) == 1


def reset() -> None:
    """Forget the signals of an earlier command (a library caller runs several in turn)."""
    _received.clear()


def stopped_by() -> int | None:
    """The first stop signal this command received, or ``None``."""
    return _received[0] if _received else None


def raise_if_stopped() -> None:
    """Raise :class:`Interrupted` when a stop signal came (between two pieces of work).

    Raises:
        Interrupted: A stop signal was received.
    """
    signum = stopped_by()
    if signum is not None:
        raise Interrupted(signum)


def _stop(signum: int, frame: Any) -> None:
    if note(signum) and not _deferring:
        raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside the block a stop signal is noted, never raised (Note [the stop rule]).

    For work that waits on threads: a signal raised at an arbitrary point of the main
    thread can land inside a lock of ``concurrent.futures`` or ``threading`` and leave
    every thread waiting for good. The block calls :func:`raise_if_stopped` between
    pieces of work instead, and waits only with a timeout. Outside the main thread
    (where no handler runs) it changes nothing.

    Example:
        >>> with deferred():
        ...     raise_if_stopped()
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()


@contextlib.contextmanager
def stop_on_signals(*, linger: bool = False) -> Iterator[None]:
    """Apply Note [the stop rule] for the length of the block (main thread only).

    Args:
        linger: Once a stop signal came, keep noting later ones after the block instead
            of restoring the old handlers: for the command line, whose process ends right
            after, so that a second signal cannot kill the exit's own cleanup (threads
            joined, output flushed). A library caller's handlers are restored (default).

    Raises:
        Interrupted: From inside the block, at the first stop signal received while no
            child runs.

    Example:
        >>> with stop_on_signals():
        ...     pass
    """
    reset()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in old.items():
            stopped = linger and stopped_by() is not None
            signal.signal(signum, _note_only if stopped else handler)


def _note_only(signum: int, frame: Any) -> None:
    note(signum)


@contextlib.contextmanager
def caught() -> Iterator[list[int]]:
    """Run a block that a stop signal may end; the signal is kept instead of raised.

    Yields:
        A list that holds the signal's number once the block was stopped.
    """
    got: list[int] = []
    try:
        yield got
    except Interrupted as err:
        got.append(err.signum)
    except KeyboardInterrupt:  # a caller that did not install the stop rule
        got.append(int(signal.SIGINT))
