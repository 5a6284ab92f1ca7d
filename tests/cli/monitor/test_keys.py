"""The live monitor's keys, applied to the view's state."""

from __future__ import annotations

from gpuwise.cli.monitor.keys import ViewState, keys_of, press
from gpuwise.report.monitor.procs import SORT_KEYS


def pressed(data: bytes, state: ViewState | None = None) -> ViewState:
    state = state or ViewState()
    for key in keys_of(data):
        press(state, key)
    return state


def test_escape_sequences_are_single_keys() -> None:
    assert keys_of(b"a\x1b[Cq\x1b[15~/") == ["a", "\x1b[C", "q", "\x1b[15~", "/"]
    assert keys_of(b"x\n") == ["x", "\r"]


def test_sort_steps_through_every_column_and_wraps() -> None:
    state = ViewState(sort="memory")
    seen = [pressed(b">", state).sort for _ in SORT_KEYS]
    assert seen == [*SORT_KEYS[1:], SORT_KEYS[0]]
    assert pressed(b"<", ViewState(sort="memory")).sort == SORT_KEYS[-1]
    assert pressed(b"\x1b[D", ViewState(sort="sm")).sort == "memory"  # left arrow


def test_filter_is_typed_then_kept_or_cleared() -> None:
    state = pressed(b"/tra\x7fain q")  # q while typing is part of the filter
    assert (state.editing, state.filter, state.quit) == (True, "train q", False)
    assert pressed(b"\r", state).editing is False
    assert state.filter == "train q"
    assert pressed(b"/x\x1b", ViewState()).filter == ""


def test_tree_pause_help_and_quit() -> None:
    state = pressed(b"t p")
    assert (state.tree, state.paused) == (True, False)  # space and p both toggle the pause
    state = pressed(b"h")
    assert state.show_help
    assert pressed(b"x", state).show_help is False  # any key closes the help
    assert state.quit is False
    assert pressed(b"?q").quit is True  # q quits from the help too
    assert pressed(b"q").quit is True
