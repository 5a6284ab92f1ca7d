"""The live view's screen: a frame's lines as the terminal codes that draw them."""

from __future__ import annotations

import io
import re

from rich.cells import cell_len
from rich.console import Console

from gpuwise.cli.monitor.screen import HOME, Screen

SGR = re.compile(r"\x1b\[[0-9;]*m")


def console(**kwargs: object) -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=10, height=4, **kwargs)  # type: ignore[arg-type]


def test_a_frame_is_cut_to_the_width_padded_and_blanked_below() -> None:
    screen = Screen(console(color_system="standard"))
    lines = [[("gpu0  ", "bold cyan"), ("NVIDIA H100", "bold")], [("ok", "")]]
    out = screen.text(lines, width=10, height=4)
    assert out.startswith(HOME)
    rows = SGR.sub("", out[len(HOME) :]).split("\n")
    assert rows == ["gpu0  NVID", "ok        ", " " * 10, " " * 10]  # nothing old stays
    assert "\x1b[1;36mgpu0  \x1b[0m\x1b[1mNVID\x1b[0m" in out


def test_a_tall_frame_keeps_the_rows_that_fit_and_never_scrolls() -> None:
    screen = Screen(console(color_system="standard"))
    out = screen.text([[(f"row {i}", "")] for i in range(9)], width=10, height=4)
    rows = out[len(HOME) :].split("\n")
    assert [r.strip() for r in rows] == ["row 0", "row 1", "row 2", "row 3"]
    assert not out.endswith("\n")  # a newline on the last row would scroll the screen


def test_wide_characters_are_cut_by_cells() -> None:
    screen = Screen(console(color_system=None))
    out = screen.text([[("日本語のコマンド", "bold")]], width=5, height=1)
    assert out == HOME + "日本 "  # two cells each: the third would cross the edge
    assert cell_len(out[len(HOME) :]) == 5


def test_no_color_keeps_bold_and_drops_colours() -> None:
    out = Screen(console(color_system="standard", no_color=True)).text(
        [[("hot", "bold red")]], width=5, height=1
    )
    assert out == HOME + "\x1b[1mhot\x1b[0m  "


def test_draw_writes_one_frame_to_the_console() -> None:
    term = console(color_system="standard")
    Screen(term).draw([[("q quit", "dim")]], width=8, height=2)
    assert term.file.getvalue() == HOME + "\x1b[2mq quit\x1b[0m  \n        "  # type: ignore[attr-defined]
