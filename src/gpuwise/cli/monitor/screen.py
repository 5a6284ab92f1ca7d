"""The live view's terminal screen: whole frames written from the top-left corner.

Note [one write per frame]: a redraw turns the frame's ``(text, style)`` lines
(``report.monitor.spans``) into one string of ANSI codes and writes it at once: the cursor
goes home, each line is cut to the terminal's width and padded with spaces to it (so
nothing of the last frame stays), and rows below the frame are blanked. rich still gives
the alternate screen, the cursor, the colour system the terminal supports and each
style's codes; its layout engine (measuring, wrapping and padding each segment again on
every redraw) is what this skips, and that was most of the view's cost with eight GPUs
(``benchmarks/monitor_view.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.color import ColorSystem

from gpuwise.report.monitor.spans import Span, style_of

if TYPE_CHECKING:
    from rich.console import Console
    from rich.style import Style

HOME = "\x1b[H"

_COLOR_SYSTEMS = {
    "standard": ColorSystem.STANDARD,
    "256": ColorSystem.EIGHT_BIT,
    "truecolor": ColorSystem.TRUECOLOR,
    "windows": ColorSystem.WINDOWS,
}


class Screen:
    """Draws frames on a console's terminal (see Note [one write per frame]).

    Args:
        console: The rich console whose file is the terminal.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._system = _COLOR_SYSTEMS.get(console.color_system or "")
        self._no_color = console.no_color
        self._styles: dict[str, Style | None] = {}

    def text(self, lines: Sequence[Sequence[Span]], width: int, height: int) -> str:
        """The frame as the terminal codes that draw it on a ``width`` x ``height`` screen."""
        out = [HOME]
        for row, line in enumerate(lines[:height]):
            if row:
                out.append("\n")
            room = width
            for text, style in line:
                if room <= 0:
                    break
                cells = cell_len(text)
                if cells > room:
                    text, cells = set_cell_size(text, room), room
                room -= cells
                out.append(self._styled(text, style) if style else text)
            out.append(" " * room)
        out += ["\n" + " " * width] * (height - min(len(lines), height))
        return "".join(out)

    def draw(self, lines: Sequence[Sequence[Span]], width: int, height: int) -> None:
        """Write one frame and flush it."""
        file = self.console.file
        file.write(self.text(lines, width, height))
        file.flush()

    def _styled(self, text: str, name: str) -> str:
        if name not in self._styles:
            style = style_of(name)
            if style is not None and self._no_color:
                style = style.without_color
            self._styles[name] = style
        style = self._styles[name]
        if style is None or self._system is None:
            return text
        return style.render(text, color_system=self._system)


@contextlib.contextmanager
def alternate_screen(console: Console) -> Iterator[Screen]:
    """The terminal's alternate screen with the cursor hidden, restored on the way out."""
    console.set_alt_screen(True)
    console.show_cursor(False)
    try:
        yield Screen(console)
    finally:
        console.show_cursor(True)
        console.set_alt_screen(False)
