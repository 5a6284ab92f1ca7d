"""``gpuwise monitor`` in a real terminal (a pseudo-terminal): the live view, then the summary."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def run_in_pty(
    argv: list[str],
    env: dict[str, str],
    rows: int = 50,
    cols: int = 130,
    keys: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
) -> str:
    """Run gpuwise on a pty of the given size; return everything it wrote.

    ``keys`` are typed into the terminal in order, each once the output so far holds its
    text (``""``: at once): the view answers what it has drawn, as a person would.
    """
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwise", *argv],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        close_fds=True,
    )
    os.close(follower)
    chunks: list[bytes] = []
    pending = list(keys)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
        while pending and pending[0][0] in seen:
            os.write(leader, pending.pop(0)[1])
            seen = ""  # the next key waits for new output
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    assert proc.wait(timeout=30) == 0
    return b"".join(chunks).decode("utf-8", errors="replace")


@pytest.fixture
def env() -> dict[str, str]:
    drop = ("CUDA_VISIBLE_DEVICES", "NO_COLOR", "COLUMNS", "LINES")  # the pty's size rules
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TERM"] = "xterm-256color"
    return env


def test_live_view_in_a_terminal(env: dict[str, str]) -> None:
    argv = ["monitor", "--fake", "2", "--duration", "2", "--interval", "0.1", "--refresh", "0.5"]
    raw = run_in_pty(argv, env)
    assert "\x1b[?1049h" in raw  # the full-terminal (alternate) screen was used
    assert "\x1b[32m" in raw or "\x1b[38;5;2m" in raw or "\x1b[33m" in raw  # coloured bars
    view, _, summary = raw.partition("\x1b[?1049l")
    text = ANSI.sub("", view)
    assert "sampled every 0.1 s, drawn every 0.5 s" in text
    for device in ("gpu0  NVIDIA H100 80GB HBM3", "gpu1  NVIDIA H100 80GB HBM3"):
        assert device in text
    assert re.search(r"util\s+\d+ % █+░* ·*[▁-█]+", text)  # value on the bar, then history
    assert re.search(r"power\s+\d+ / 700 W █+░*", text)
    # the demo GPUs run the monitor's own process: its user, CPU, memory, age and a short
    # command (the interpreter by its name, not its path) resolve
    row = r"gpu1\s+\d+\s+\S+\s+16\.0 GiB\s+55 %\s+(n/a|\d+ %)\s+[\d.]+ MiB\s+0:0\d\s+"
    row += r"python\S* -m gpuwise"
    assert re.search(row, text)
    assert re.search(r"host\s+CPU\s+[█░]+", text)
    summary_text = ANSI.sub("", summary)
    assert "summary" in summary_text
    assert "mean util" in summary_text


def test_devices_flag_and_cuda_visible_devices(env: dict[str, str]) -> None:
    argv = ["monitor", "--fake", "3", "--duration", "1", "--interval", "0.1", "--refresh", "0.5"]
    text = ANSI.sub("", run_in_pty([*argv, "--devices", "2"], env))
    assert "gpu2  NVIDIA" in text
    assert "gpu0  NVIDIA" not in text
    assert "GPUs 2 (--devices)" in text
    env["CUDA_VISIBLE_DEVICES"] = "1,0"
    text = ANSI.sub("", run_in_pty(argv, env))
    assert "GPUs 1,0 (CUDA_VISIBLE_DEVICES)" in text
    assert "gpu1  NVIDIA" in text
    assert "gpu2  NVIDIA" not in text


def test_without_a_gpu_the_view_shows_the_cpu_and_why(env: dict[str, str]) -> None:
    argv = ["monitor", "--duration", "1", "--interval", "0.1", "--refresh", "0.5"]
    text = ANSI.sub("", run_in_pty(argv, env).partition("\x1b[?1049l")[0])
    if "gpu0  " in text:  # a machine with a GPU shows it; nothing more to check here
        return
    assert re.search(r"nvml: .+; the CPU is the device", text)
    assert re.search(r"cpu  .+\n\s+util\s+\d+ % [█░]+", text.replace("\r", ""))
    assert "no compute processes" not in text
    # no GPU: the host's processes, by CPU, and the footer says so
    assert re.search(r"pid\s+user\s+CPU▼\s+host mem\s+time\s+command", text)
    assert "host processes by CPU, sorted by cpu" in text
    assert "GPU mem" not in text


def test_keys_sort_filter_tree_help_and_quit(env: dict[str, str]) -> None:
    argv = ["monitor", "--fake", "2", "--duration", "30", "--interval", "0.1", "--refresh", "5"]
    keys = [
        ("GPU processes, sorted by memory", b">"),
        ("sorted by sm", b"/gpuwise\r"),
        ("filtered by 'gpuwise'", b"t"),
        ("as a tree", b" "),
        ("PAUSED", b"h"),
        ("filter the processes", b"q"),
    ]
    started = time.monotonic()
    raw = run_in_pty(argv, env, keys=keys)
    assert time.monotonic() - started < 25  # q ended it, long before --duration
    view, _, summary = raw.partition("\x1b[?1049l")
    text = ANSI.sub("", view)
    assert "SM▼" in text
    assert "sorted by sm" in text
    assert "filtered by 'gpuwise', as a tree" in text
    assert "keys" in text
    assert "pause the drawing" in text
    assert "summary" in ANSI.sub("", summary)  # q prints the summary, as Ctrl-C does


def test_a_tiny_terminal_crops_the_view_and_quits(env: dict[str, str]) -> None:
    argv = ["monitor", "--fake", "2", "--duration", "30", "--interval", "0.1", "--refresh", "0.3"]
    raw = run_in_pty(argv, env, rows=5, cols=20, keys=[("gpuwise", b"q")])
    view = ANSI.sub("", raw.partition("\x1b[?1049l")[0])
    assert "gpuwise monitor" in view
    lines = [line for line in view.replace("\r", "\n").split("\n") if line.strip()]
    assert max(len(line) for line in lines) <= 20  # cropped to the width, never wrapped


def test_the_docs_picture_script_captures_a_real_frame(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "tools" / "monitor_capture.py"
    spec = importlib.util.spec_from_file_location("monitor_capture", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "monitor.svg"
    text = module.capture(["--fake", "2", "--interval", "0.1", "--refresh", "0.5"], out,
                          rows=30, cols=100, keys="h", seconds=3.0)  # fmt: skip
    assert text.splitlines()[0].startswith("gpuwise monitor · host · sampled every 0.1 s")
    assert "pause the drawing" in text  # the keys typed reached the view: its help
    assert max(len(line) for line in text.splitlines()) <= 100
    svg = out.read_text(encoding="utf-8")
    assert svg.startswith("<svg")
    assert svg.count("<text") > 10  # the frame's lines, as text


def test_a_dumb_terminal_gets_no_cursor_moves_and_the_summary(env: dict[str, str]) -> None:
    env["TERM"] = "dumb"
    argv = ["monitor", "--fake", "1", "--duration", "1.5", "--interval", "0.1", "--refresh", "0.3"]
    raw = run_in_pty(argv, env)
    assert "\x1b[H" not in raw  # it moved the cursor home every frame
    assert "\x1b[?1049h" not in raw  # nor asked for the alternate screen
    assert "summary" in raw
    assert re.search(r"gpu0 .*\d+ ", raw)


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (5, 20)])
def test_a_terminal_too_small_for_the_summary_gets_its_figures(
    env: dict[str, str], rows: int, cols: int
) -> None:
    argv = ["monitor", "--fake", "1", "--duration", "1.5", "--interval", "0.1", "--refresh", "0.3"]
    raw = run_in_pty(argv, env, rows=rows, cols=cols)
    summary = ANSI.sub("", raw.partition("\x1b[?1049l")[2]).replace("\r", "").replace("\n", "")
    # the terminal wraps the line; the figures are all there, not borders and empty cells
    found = re.search(
        r"gpu0: (\d+) samples, mean util ([\d.]+) %, peak memory (.+?), mean power", summary
    )
    assert found, summary
    assert int(found.group(1)) >= 5  # 1.5 s at 0.1 s
    assert 0 <= float(found.group(2)) <= 100
    assert "terminal too small for the table" in summary


def test_the_tree_shows_a_listed_child_once_under_its_parent_with_its_own_figures() -> None:
    from gpuwise.cli.monitor.live import nest
    from gpuwise.report.monitor.procs import ProcessTable, table_rows
    from gpuwise.telemetry.nvml_procs import DeviceProcess

    parent = DeviceProcess("gpu0", 100, 2 << 30, command="python train.py", cpu_pct=90.0)
    child = DeviceProcess("gpu0", 101, 1 << 30, command="python train.py", cpu_pct=13.0,
                          ppid=100)  # fmt: skip
    # the descendants scan reads the child's CPU again within the frame: 0 % there
    again = DeviceProcess("host", 101, command="python train.py", cpu_pct=0.0, ppid=100)
    worker = DeviceProcess("host", 102, command="python train.py", cpu_pct=40.0, ppid=101)
    tops, kids = nest([parent, child], {100: [again, worker], 101: [worker]})
    assert [p.pid for p in tops] == [100]
    assert kids == {100: [child, worker]}
    rows = table_rows(ProcessTable(tops, gpu=True, children=kids, tree=True))
    pids = [cells[1] for cells, _ in rows]
    assert pids == ["100", "101", "102"]  # the child once, its worker under it
    assert any("13 %" in cells for cells, _ in rows)  # the child's own CPU, not 0 %
    assert not any("0 %" in cells for cells, _ in rows)
