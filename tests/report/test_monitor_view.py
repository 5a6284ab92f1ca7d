"""The live monitor's view, rendered from fake-NVML readings onto a fixed-width console."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from gpuwise.records import Sample
from gpuwise.report.monitor.history import MonitorHistory
from gpuwise.report.monitor.view import (
    MonitorFrame,
    bar,
    gauge_widths,
    level_style,
    render,
    sort_processes,
)
from gpuwise.telemetry.fake import FakeGpu, FakeNvml, GiB
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.nvml_procs import DeviceProcess


def text_of(frame: MonitorFrame, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system="truecolor")
    console.print(render(frame, width=width))
    return console.export_text()


def frame_from_fake(gpus: list[FakeGpu], seconds: int = 3) -> MonitorFrame:
    """Read the fake GPUs through the real backend once per (fake) second."""
    clock = iter(float(t) for t in range(1000))
    backend = NvmlBackend(nvml=FakeNvml(gpus, clock=lambda: next(clock)))
    history = MonitorHistory(window_s=30.0, buckets=30, power_limits_w=backend.power_limits_w())
    for t in range(seconds):
        for sample in backend.read(float(t)):
            history.add(sample)
    frame = MonitorFrame(
        devices=backend.devices(),
        history=history,
        processes=backend.processes(),
        migs=backend.mig_instances(),
        power_limits_w=history.power_limits_w,
        now_s=float(seconds - 1),
        sort="memory",
    )
    backend.close()
    return frame


def test_device_block_shows_bars_values_and_history() -> None:
    values = {
        "utilization_pct": [20, 60, 95],
        "power_w": 350.0,
        "temperature_c": 88.0,
        "energy_j": [1000.0, 1350.0, 13_300.0],  # the counter, read once a second
    }
    frame = frame_from_fake([FakeGpu(values=values, processes={7: 5 * GiB})])
    out = text_of(frame)
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "gpu0  NVIDIA H100 80GB HBM3" in out
    assert "energy 12.3 kJ since start" in out
    assert "95 %" in lines["util"]
    assert lines["util"].rstrip().endswith("▂▅█")  # 20, 60, 95 % over the last 3 s
    assert "350 / 700 W" in lines["power"]
    assert "88 C" in lines["temp"]
    assert "30.0 GiB / 79.6 GiB" in lines["mem"]


def test_colours_follow_thresholds() -> None:
    assert [level_style(v, (70.0, 90.0)) for v in (10.0, 75.0, 95.0, None)] == [
        "green",
        "yellow",
        "red",
        "dim",
    ]
    gauge = bar(50.0, "green", width=10)
    assert gauge.plain == "█████░░░░░"
    assert gauge.spans[0].style == "green"
    assert bar(None, "dim", width=4).plain == "····"


def test_hot_gpu_is_drawn_red_in_ansi() -> None:
    frame = frame_from_fake([FakeGpu(values={"temperature_c": 90.0, "utilization_pct": 60})])
    console = Console(width=120, file=io.StringIO(), force_terminal=True, color_system="standard")
    console.print(render(frame))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[1;30;41m 90 C \x1b[0m\x1b[31m███" in out  # red temperature, written on its bar
    assert "\x1b[1;30;42m 60 % \x1b[0m\x1b[32m███" in out  # green utilization bar


def test_gpm_and_throttle_reasons_where_reported() -> None:
    values = {"clocks_event_reasons": 0x004 | 0x001, "sm_active_pct": 52.0}
    out = text_of(frame_from_fake([FakeGpu(values=values)]))
    assert "SM active 52 %" in out
    assert "throttle gpu_idle,sw_power_cap" in out
    old = text_of(frame_from_fake([FakeGpu(compute_capability=(8, 0))]))
    assert "SM active" not in old  # no GPM before Hopper: nothing, not "0 %"


def test_process_table_sorted_and_mig_listed() -> None:
    mig = [FakeGpu(name="1g.10gb", memory_total_bytes=10 * GiB, processes={31: GiB})]
    gpus = [
        FakeGpu(processes={11: 2 * GiB, 12: 6 * GiB}, process_sm_pct={11: 80.0, 12: 5.0}),
        FakeGpu(mig=mig),
    ]
    frame = frame_from_fake(gpus)
    out = text_of(frame)
    rows = [line.split() for line in out.splitlines() if line.startswith(("gpu0 ", "gpu1/"))]
    rows = [r for r in rows if r[1].isdigit()]  # process rows, not the device headers
    assert [r[1] for r in rows] == ["12", "11", "31"]  # by memory, largest first
    assert rows[0][3:5] == ["6.0", "GiB"]
    assert re.search(r"gpu1/mig0\s+1g\.10gb\s+1\s+0\s+1\.0 GiB / 10\.0 GiB\s+MIG-fake-0001-0", out)
    by_sm = sort_processes(frame.processes, "sm")
    assert [p.pid for p in by_sm] == [11, 12, 31]


def test_sort_keys() -> None:
    procs = [
        DeviceProcess("gpu1", 5, 10, 1.0, "bob", "b"),
        DeviceProcess("gpu0", 9, None, None, None, None),
        DeviceProcess("gpu0", 3, 30, 50.0, "amy", "a"),
    ]
    assert [p.pid for p in sort_processes(procs, "memory")] == [3, 5, 9]
    assert [p.pid for p in sort_processes(procs, "pid")] == [3, 5, 9]
    assert [p.pid for p in sort_processes(procs, "user")] == [3, 5, 9]
    assert [p.pid for p in sort_processes(procs, "device")] == [3, 9, 5]
    with pytest.raises(ValueError, match="one of memory, sm"):
        sort_processes(procs, "colour")


def test_cpu_as_the_device_lists_host_processes_without_gpu_columns() -> None:
    history = MonitorHistory()
    sample = Sample(
        0.0, "cpu", utilization_pct=12.0, memory_used_bytes=GiB, memory_total_bytes=4 * GiB
    )
    history.add(sample)
    procs = [DeviceProcess("cpu", 42, user="amy", command="python train.py", cpu_pct=97.0,
                           rss_bytes=3 * GiB, started_epoch_s=1000.0)]  # fmt: skip
    frame = MonitorFrame(
        devices=[{"id": "cpu", "name": "Some CPU"}], history=history, processes=procs,
        sort="cpu", now_epoch_s=1000.0 + 3723.0,
    )  # fmt: skip
    out = text_of(frame)
    assert "cpu  Some CPU" in out
    assert "12 %" in out
    assert "power" not in out  # the CPU reports no board power: no empty bar
    assert "GPU mem" not in out
    assert "SM" not in out.split("device", 1)[1]
    assert re.search(r"cpu\s+42\s+amy\s+97 %\s+3\.0 GiB\s+1:02:03\s+python train\.py", out)
    assert "host processes by CPU, sorted by cpu" in out  # the footer says what follows


def test_history_buckets_average_and_keep_gaps() -> None:
    history = MonitorHistory(window_s=10.0, buckets=5)
    for t, u in [(0.0, 10.0), (1.0, 30.0), (6.5, 100.0)]:  # 2 s buckets, nothing in 2-6 s
        history.add(Sample(t, "gpu0", utilization_pct=u))
    assert history.means("gpu0", "util", now_s=9.0) == [20.0, None, None, 100.0, None]
    assert history.sparkline("gpu0", "util", width=5, now_s=9.0) == "▂  █ "
    assert history.sparkline("gpu0", "util", width=8, now_s=9.0) == "   ▂  █ "


@pytest.mark.parametrize("width", [80, 120, 160, 200])
def test_gauge_lines_fill_the_width(width: int) -> None:
    frame = frame_from_fake([FakeGpu(values={"utilization_pct": [50] * 60})], seconds=60)
    frame.history = MonitorHistory(window_s=120.0, buckets=60)
    for t in range(120):
        frame.history.add(Sample(float(t), "gpu0", utilization_pct=50.0))
    frame.now_s = 119.0
    util = next(line for line in text_of(frame, width).splitlines() if line.startswith("  util"))
    bar_cells, spark = gauge_widths(width)
    assert len(util.rstrip()) == width - 1  # bar, value and history reach the last column
    assert len(" 50 % ") + util.count("█") + util.count("░") == bar_cells  # value on the bar
    assert spark in (30, 60)
    assert "  " not in util.rstrip()[-spark:]
    assert not re.search(r" {10,}", util.rstrip())  # no wide gap between bar and history


def test_tree_filter_and_elapsed_in_the_process_table() -> None:
    parent = DeviceProcess("gpu0", 10, 4 * GiB, 60.0, "amy", "python train.py", 180.0,
                           2 * GiB, 0.0, 1)  # fmt: skip
    other = DeviceProcess("gpu1", 20, GiB, 5.0, "bob", "python serve.py", 3.0, GiB, 50.0, 1)
    workers = [
        DeviceProcess("host", 11, None, None, "amy", "python train.py", 95.0, GiB, 1.0, 10),
        DeviceProcess("host", 12, None, None, "amy", "pt_data_worker", 90.0, GiB, 1.0, 11),
    ]
    frame = frame_from_fake([FakeGpu(), FakeGpu()])
    frame.processes, frame.now_epoch_s = [parent, other], 100.0
    frame.children, frame.tree, frame.sort = {10: workers, 20: []}, True, "cpu"
    lines = [line for line in text_of(frame).splitlines() if re.match(r"(gpu\d|\s+)\s*\d+ ", line)]
    assert [line.split()[0:2] for line in lines[:1]] == [["gpu0", "10"]]
    assert re.search(r"^\s+11\s+amy\s+95 %\s+1\.0 GiB\s+1:39\s+└ python train\.py", lines[1])
    assert re.search(r"^\s+12\s+amy\s+90 %.*  └ pt_data_worker", lines[2])  # a grandchild
    assert lines[3].split()[:2] == ["gpu1", "20"]
    assert "CPU▼" in text_of(frame)
    frame.filter = "serve"
    out = text_of(frame)
    assert "python serve.py" in out
    assert "python train.py" not in out
    assert "filtered by 'serve'" in out
    frame.filter = "nothing-like-it"
    assert "no process matches 'nothing-like-it'" in text_of(frame)


def test_help_and_pause_are_drawn() -> None:
    frame = frame_from_fake([FakeGpu()])
    frame.show_help, frame.paused = True, True
    out = text_of(frame)
    assert "PAUSED (space resumes)" in out
    assert re.search(r"^\s+/\s+filter the processes", out, re.MULTILINE)
    assert "gpu0  NVIDIA" not in out  # the help takes the devices' place
    frame.show_help, frame.editing, frame.filter = False, True, "py"
    assert "filter: py" in text_of(frame)


def test_short_command_names_the_program_and_keeps_one_line() -> None:
    from gpuwise.telemetry.proc_stats import short_command

    argv = ["/opt/conda/bin/python3.11", "/home/amy/job/train.py", "--lr", "3e-4"]
    assert short_command(argv, home="/home/amy") == "python3.11 ~/job/train.py --lr 3e-4"
    assert short_command(["python", "-c", "import x\nx.run()"], home="/h") == (
        "python -c import x x.run()"
    )
    assert short_command([], home="/h") == ""


def test_the_process_table_lists_what_fits_the_terminal() -> None:
    frame = frame_from_fake([FakeGpu()])
    frame.processes = [DeviceProcess("gpu0", pid, pid << 20) for pid in range(1, 31)]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render(frame, width=120, height=20))
    lines = console.export_text().rstrip("\n").split("\n")
    assert len(lines) <= 20  # header, the device, the table and the footer fit
    assert re.search(r"… and \d+ more \(a taller terminal\)", lines[-2])
    rows = [line for line in lines if line.startswith("gpu0 ") and line.split()[1].isdigit()]
    assert [int(r.split()[1]) for r in rows] == list(range(30, 30 - len(rows), -1))  # by memory


def test_at_80_columns_the_footer_keeps_help_and_order_and_commands_name_the_script() -> None:
    from dataclasses import replace

    from gpuwise.report.monitor.procs import fit_command

    frame = frame_from_fake([FakeGpu(processes={7: 5 * GiB})])
    job = "/opt/conda/envs/train/bin/python3.11 /home/amy/projects/vision/train.py --lr 3e-4"
    procs = [
        replace(p, command=job.replace("/opt/conda/envs/train/bin/", "")) for p in frame.processes
    ]
    out = text_of(replace(frame, processes=procs), width=80)
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80
    assert lines[-1] == "GPU processes, sorted by memory — h help · q quit"  # was cut at 80
    row = next(line for line in lines if line.startswith("gpu0") and " 7 " in line)
    assert re.search(r"train\.py", row), row  # the script, not only "python3.11 /home/am…"
    assert fit_command("python3.11 ~/job/train.py --lr 3e-4", 16) == "train.py --lr 3…"
    assert fit_command("python3.11 ~/job/train.py", 40) == "python3.11 ~/job/train.py"  # room
    assert fit_command("python -m gpuwise monitor --fake 2", 12) == "python -m g…"
    assert fit_command("nginx: worker process", 10) == "nginx: wo…"
