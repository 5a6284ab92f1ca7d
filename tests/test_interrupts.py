"""Note [the stop rule]: the first stop signal raises once; the rest are noted, not raised."""

from __future__ import annotations

import os
import signal

import pytest

from gpuwise import interrupts
from gpuwise.interrupts import Interrupted, caught, stop_on_signals


def test_the_first_signal_raises_with_its_exit_status() -> None:
    def signalled() -> None:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes
                pass

    with pytest.raises(Interrupted) as info:
        signalled()
    assert info.value.signum == signal.SIGTERM
    assert info.value.exit_status == 128 + signal.SIGTERM
    assert str(info.value) == "interrupted by SIGTERM"
    assert isinstance(info.value, KeyboardInterrupt)  # no `except Exception` swallows it
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_later_signals_are_noted_not_raised() -> None:
    with caught() as stop, stop_on_signals():
        for signum in (signal.SIGHUP, signal.SIGINT):
            try:
                os.kill(os.getpid(), signum)
                for _ in range(1000):
                    pass
            except Interrupted:
                pass  # the first one
        assert interrupts.stopped_by() == signal.SIGHUP
    assert stop == []
    assert interrupts._received == [signal.SIGHUP, signal.SIGINT]


def test_caught_keeps_the_signal_of_a_stopped_block() -> None:
    with caught() as stop:
        raise Interrupted(signal.SIGHUP)
    assert stop == [signal.SIGHUP]
    interrupts.reset()
    assert interrupts.stopped_by() is None
