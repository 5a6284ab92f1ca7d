"""The live monitor's view, rendered from fake-NVML readings onto a fixed-width console."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from gpuwise.records import Sample
from gpuwise.report.monitor_history import MonitorHistory
from gpuwise.report.monitor_view import MonitorFrame, bar, level_style, render, sort_processes
from gpuwise.telemetry.fake import FakeGpu, FakeNvml, GiB
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.nvml_procs import DeviceProcess


def text_of(frame: MonitorFrame, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system="truecolor")
    console.print(render(frame))
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
    frame = frame_from_fake([FakeGpu(values={"temperature_c": 90.0, "utilization_pct": 10})])
    console = Console(width=120, file=io.StringIO(), force_terminal=True, color_system="standard")
    console.print(render(frame))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[31m90 C" in out  # red temperature
    assert "\x1b[32m███" in out  # green utilization bar


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


def test_cpu_as_the_device_has_no_process_table() -> None:
    history = MonitorHistory()
    sample = Sample(
        0.0, "cpu", utilization_pct=12.0, memory_used_bytes=GiB, memory_total_bytes=4 * GiB
    )
    history.add(sample)
    out = text_of(MonitorFrame(devices=[{"id": "cpu", "name": "Some CPU"}], history=history))
    assert "cpu  Some CPU" in out
    assert "12 %" in out
    assert "power" not in out  # the CPU reports no board power: no empty bar
    assert "compute processes" not in out


def test_history_buckets_average_and_keep_gaps() -> None:
    history = MonitorHistory(window_s=10.0, buckets=5)
    for t, u in [(0.0, 10.0), (1.0, 30.0), (6.5, 100.0)]:  # 2 s buckets, nothing in 2-6 s
        history.add(Sample(t, "gpu0", utilization_pct=u))
    assert history.means("gpu0", "util", now_s=9.0) == [20.0, None, None, 100.0, None]
    assert history.sparkline("gpu0", "util", width=5, now_s=9.0) == "▂  █ "
    assert history.sparkline("gpu0", "util", width=8, now_s=9.0) == "   ▂  █ "
