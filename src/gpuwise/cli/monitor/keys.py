r"""The live monitor's keys: what each key press changes in the view.

``ViewState`` holds what the reader chose (order, filter, tree, pause, help); ``press``
applies one key to it. Bytes read from the terminal become keys in ``keys_of``: an
escape sequence (an arrow, a function key) is one key, so its tail is never read as
letters. Nothing here touches the terminal; ``cli.monitor.live`` reads it in cbreak mode.

Example:
    >>> state = ViewState()
    >>> for key in keys_of(b"/train\\r>t"):
    ...     press(state, key)
    >>> state.filter, state.sort, state.tree
    ('train', 'sm', True)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.report.monitor.procs import SORT_KEYS

ESC, ENTER, BACKSPACE = "\x1b", "\r", "\x7f"


@dataclass
class ViewState:
    """What the reader chose with the keys.

    Attributes:
        sort: Process table order, one of ``SORT_KEYS``.
        filter: Text the process rows must hold.
        editing: The filter is being typed (letters go to it, not to the keys).
        tree: Show each process's children under it.
        paused: Keep the last frame on screen (sampling goes on).
        show_help: Show the keys' help.
        quit: The reader asked to end the view.
    """

    sort: str = "memory"
    filter: str = ""
    editing: bool = False
    tree: bool = False
    paused: bool = False
    show_help: bool = False
    quit: bool = False


def keys_of(data: bytes) -> list[str]:
    """The keys in bytes read from a terminal: characters, or whole escape sequences."""
    text = data.decode("utf-8", errors="ignore").replace("\n", ENTER)
    keys, i = [], 0
    while i < len(text):
        if text[i] == ESC and i + 1 < len(text) and text[i + 1] in "[O":
            end = i + 2
            while end < len(text) and not text[end].isalpha() and text[end] != "~":
                end += 1
            keys.append(text[i : end + 1])
            i = end + 1
        else:
            keys.append(text[i])
            i += 1
    return keys


def _step_sort(state: ViewState, by: int) -> None:
    index = SORT_KEYS.index(state.sort) if state.sort in SORT_KEYS else 0
    state.sort = SORT_KEYS[(index + by) % len(SORT_KEYS)]


def _edit_filter(state: ViewState, key: str) -> None:
    if key == ENTER:
        state.editing = False
    elif key == ESC:
        state.editing, state.filter = False, ""
    elif key in (BACKSPACE, "\b"):
        state.filter = state.filter[:-1]
    elif len(key) == 1 and key.isprintable():
        state.filter += key


def press(state: ViewState, key: str) -> None:
    """Apply one key to the view's state."""
    if state.editing:
        _edit_filter(state, key)
    elif state.show_help:  # any key closes the help; q still quits
        state.show_help = False
        state.quit = key in ("q", "Q", "\x03")
    elif key in ("q", "Q", "\x03"):
        state.quit = True
    elif key in ("h", "?"):
        state.show_help = True
    elif key in (">", ".", "\x1b[C"):
        _step_sort(state, 1)
    elif key in ("<", ",", "\x1b[D"):
        _step_sort(state, -1)
    elif key == "/":
        state.editing, state.filter = True, ""
    elif key == ESC:
        state.filter = ""
    elif key == "t":
        state.tree = not state.tree
    elif key in (" ", "p"):
        state.paused = not state.paused
