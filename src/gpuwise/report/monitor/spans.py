"""The live view's lines as plain ``(text, style)`` spans, and a renderable that prints them.

Note [drawing cheaply]: a frame is a few dozen lines of a few styled pieces each. Built as
``rich.text.Text`` objects, rich measured, divided and wrapped every line again on each
redraw, which cost the eight-GPU view more than its budget in
``benchmarks/monitor_view.py``. So the view builds plain ``(text, style name)`` tuples:
the live screen writes them out itself (``cli.monitor.screen``), and ``SpanLines`` hands
them to rich as segments, cropped to the width, wherever the view is printed once.

Example:
    >>> import io
    >>> from rich.console import Console
    >>> console = Console(width=12, record=True, file=io.StringIO())
    >>> console.print(SpanLines([[("util ", "bold"), ("71 % and more", "green")]]))
    >>> console.export_text().splitlines()
    ['util 71 % an']
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions

Span = tuple[str, str]
"""A piece of a line and its rich style (``"bold cyan"``; ``""``: none)."""
Line = list[Span]


@lru_cache(maxsize=256)
def style_of(name: str) -> Style | None:
    """The parsed ``Style`` of a style name, once per name (``None`` for no style)."""
    return Style.parse(name) if name else None


def plain(line: Sequence[Span]) -> str:
    """The text of a line without its styles."""
    return "".join(text for text, _ in line)


def cropped(line: Sequence[Span], width: int) -> Iterator[Segment]:
    """The line's segments, cut to ``width`` terminal cells (never wrapped)."""
    room = width
    for text, style in line:
        if not text:
            continue
        cells = cell_len(text)
        if cells > room:
            text = set_cell_size(text, room) if room > 0 else ""
            if text:
                yield Segment(text, style_of(style))
            return
        room -= cells
        yield Segment(text, style_of(style))


class SpanLines:
    """Lines of spans as a rich renderable: each line cropped to the console's width.

    Args:
        lines: The lines, top to bottom.
    """

    def __init__(self, lines: Sequence[Sequence[Span]]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        """Yield each line's segments, then a line break (rich's renderable protocol)."""
        width = options.max_width
        new_line = Segment.line()
        for line in self.lines:
            yield from cropped(line, width)
            yield new_line

    @property
    def plain(self) -> str:
        """The whole text without styles, a line each."""
        return "\n".join(plain(line) for line in self.lines)
