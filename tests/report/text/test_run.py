import dataclasses

import pytest
from rich.console import Console

from gpuwise.records import Finding, Run, Sample
from gpuwise.report.run_facts import command_line, run_duration_s
from gpuwise.report.text.run import BAR_WIDTH, phase_bar, render_findings, render_run
from gpuwise.report.units import PHASE_COLORS, format_bytes, format_seconds, format_value
from gpuwise.telemetry.summary import summarize
from tests.report.runs import INPUT_BOUND, PAGEABLE, make_run, uniform_steps


def _render(run: Run) -> str:
    console = Console(record=True, width=100, color_system=None)
    render_run(run, console)
    return console.export_text()


def test_header_names_command_exit_code_device_and_duration():
    run = make_run(command=["python", "train.py", "--name", "my run"])
    run.exit_code = 3
    text = _render(run)
    assert "python train.py --name 'my run'" in text
    assert "exit code  3" in text
    assert "gpu0 · NVIDIA H100 80GB HBM3 · 80.0 GiB" in text
    # 50 steps of 0.2 s from t=1.0 end at 11.0 s; samples span 5.9 s: the longer wins
    assert "duration   10.00 s" in text


def test_throughput_and_phase_breakdown_figures():
    text = _render(make_run())
    # 0.2 s per step on one rank, 32 samples per batch
    assert "50 steps · 1 rank · mean step 200.0 ms · 5.00 steps/s · 160.0 samples/s" in text
    assert "data_wait  40.0 %   80.0 ms" in text
    assert "h2d        10.0 %   20.0 ms" in text
    assert "compute    50.0 %  100.0 ms" in text
    assert "post        0.0 %       0 s" in text
    assert "█" * BAR_WIDTH in text


def test_ranks_table_shows_each_rank():
    text = _render(make_run(steps=uniform_steps(4, ranks=2)))
    assert "8 steps · 2 ranks" in text
    assert "5.00 steps/s" in text  # the job's rate: each rank steps in step, 0.2 s a step
    lines = [ln.split() for ln in text.splitlines()]
    assert ["0", "4", "200.0", "ms", "40.0", "%"] in lines
    assert ["1", "4", "200.0", "ms", "40.0", "%"] in lines


def test_device_table_formats_summary_and_says_na_for_missing():
    samples = [Sample(t_s=i * 0.5, device="cpu", utilization_pct=50.0) for i in range(4)]
    run = make_run(samples=samples)
    run.utilization = summarize(samples, 0.5)
    run.devices = [{"id": "cpu", "name": "Xeon", "cores": 2, "memory_total_bytes": 8 << 30}]
    text = _render(run)
    assert "cpu · Xeon · 8.0 GiB · 2 cores" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("cpu "))
    assert row.split() == ["cpu", "50.0", "%", "50.0", "%", "0.0", "%", "n/a", "n/a", "n/a"]


def test_gpu_device_row_has_memory_energy_and_power():
    text = _render(make_run())
    row = next(ln for ln in text.splitlines() if ln.startswith("gpu0 "))
    # utilization cycles 0..90 % (mean 45 %), memory peaks at 10 GiB, 300 W for 5.9 s
    assert row.split() == [
        "gpu0", "45.0", "%", "90.0", "%", "10.0", "%", "10.0", "GiB", "1.8", "kJ", "300.0", "W",
    ]  # fmt: skip


def test_findings_in_order_with_evidence_speedup_and_fixes():
    console = Console(record=True, width=100, color_system=None)
    render_findings([INPUT_BOUND, PAGEABLE], console)
    text = console.export_text()
    assert text.index("1. input_bound [critical] · up to 1.67x") < text.index(
        "2. pageable_h2d [warning] · up to 1.11x"
    )
    assert "The GPU waits for the next batch 40 % of every step." in text
    assert "data_wait_fraction  40.0 %" in text
    assert "step_mean_s         200.0 ms" in text
    assert "num_workers         0" in text
    assert "h2d_pageable_bytes  3.0 MiB" in text
    assert (
        "   fix 1. Load batches in 2 worker processes\n"
        "          DataLoader(..., num_workers=2)\n"
        "   fix 2. Read a preprocessed store\n"
        "          gpuwise.data.Loader(store, batch_size=32)\n"
    ) in _strip_right(text)


def _strip_right(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def test_fix_how_is_styled_as_code():
    console = Console(record=True, width=100, color_system="truecolor")
    render_findings([INPUT_BOUND], console)
    text = console.export_text(styles=True)
    assert "\x1b[1;36mDataLoader(..., num_workers=2)\x1b[0m" in text


def test_finding_without_speedup_or_evidence():
    console = Console(record=True, width=100, color_system=None)
    render_findings([Finding("healthy", "info", "Nothing dominates the step.")], console)
    text = console.export_text()
    assert "1. healthy [info]\n" in text
    assert "up to" not in text
    assert "evidence" not in text


def test_empty_run_says_what_is_missing():
    run = Run(source="analyze", command=None)
    text = _render(run)
    assert "command    n/a" in text
    assert "exit code  n/a" in text
    assert "duration   n/a" in text
    assert "no steps recorded" in text
    assert "no samples recorded" in text
    assert "findings    none" in text


def test_phase_bar_apportions_cells_and_colours_each_phase():
    bar = phase_bar({"data_wait": 0.4, "h2d": 0.1, "compute": 0.5, "post": 0.0}, width=60)
    assert bar.plain == "█" * 60
    spans = [(bar.plain[s.start : s.end], str(s.style)) for s in bar.spans if s.end > s.start]
    assert [(len(t), style) for t, style in spans] == [
        (24, PHASE_COLORS["data_wait"]),
        (6, PHASE_COLORS["h2d"]),
        (30, PHASE_COLORS["compute"]),
    ]


def test_phase_bar_is_always_full_width():
    thirds = {"data_wait": 1 / 3, "h2d": 1 / 3, "compute": 1 / 3, "post": 0.0}
    assert len(phase_bar(thirds, width=10).plain) == 10


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("data_wait_fraction", 0.396, "39.6 %"),
        ("mean_utilization_pct", 55.25, "55.2 %"),
        ("step_mean_s", 0.1748, "174.8 ms"),
        ("copy_s", 0.00085, "850 µs"),
        ("run_s", 24480.0, "6.8 h"),
        ("wait_ms", 1500.0, "1.50 s"),
        ("peak_memory_used_bytes", 80 * 1024**3, "80.0 GiB"),
        ("h2d_bytes", 512, "512 B"),
        ("pcie_rx_bytes_s", 6346 * 1024, "6.2 MiB/s"),
        ("h2d_bandwidth_gb_s", 4.35, "4.35 GB/s"),
        ("mean_power_w", 629.45, "629.5 W"),
        ("energy_j", 12_300.0, "12.3 kJ"),
        ("temperature_c", 61.0, "61 °C"),
        ("sm_clock_mhz", 1980.0, "1980 MHz"),
        ("max_speedup", 2.5, "2.50x"),
        ("num_workers", 4, "4"),
        ("ratio", 0.123456, "0.1235"),
        ("device", "gpu0", "gpu0"),
        ("energy_spans_gaps", True, "yes"),
        ("ranks", [0, 1], "[0, 1]"),
        ("power_w", None, "n/a"),
        ("power_w", float("nan"), "n/a"),
    ],
)
def test_format_value_uses_the_unit_in_the_name(name, value, expected):
    assert format_value(name, value) == expected


def test_formatters_say_na_for_none():
    assert format_seconds(None) == "n/a"
    assert format_bytes(None) == "n/a"


def test_command_line_and_duration_helpers():
    run = Run(source="profile", command=["python", "a b.py"], meta={"duration_s": 12.5})
    assert command_line(run) == "python 'a b.py'"
    assert run_duration_s(run) == 12.5


def test_sampling_gaps_and_skipped_records_are_reported():
    times = [0.0, 0.5, 1.0, 6.0, 6.5]  # one 5 s gap at a 0.5 s interval
    samples = [Sample(t_s=t, device="gpu0", utilization_pct=50.0) for t in times]
    run = make_run(samples=samples)
    run.utilization = summarize(samples, 0.5)
    run.meta["skipped_count"] = 3
    text = _render(run)
    assert "skipped    3 unusable input records" in text
    assert "gpu0: 1 sampling gap, 4.50 s without readings" in text


def test_duration_of_an_analyzed_trace_is_its_window():
    from gpuwise.records import Run
    from gpuwise.records.trace_section import TraceSection
    from gpuwise.report.run_facts import run_duration_s

    assert run_duration_s(Run("analyze", trace=TraceSection(window_s=12.9))) == 12.9
    assert run_duration_s(Run("analyze")) is None


def test_ranks_table_reads_the_rank_view_so_warm_up_is_left_out():
    steps = [
        dataclasses.replace(s, data_wait_s=1.08) if s.index == 0 else s
        for s in uniform_steps(5, ranks=2)
    ]
    run = make_run(steps=steps)
    assert run.ranks is not None
    assert [row["mean_s"] for row in run.ranks.per_rank] == [pytest.approx(0.2)] * 2
    lines = [ln.split() for ln in _render(run).splitlines()]
    # the same figures as the document's "ranks" section; the raw mean would be 400 ms
    assert ["0", "5", "200.0", "ms", "40.0", "%"] in lines
    assert ["1", "5", "200.0", "ms", "40.0", "%"] in lines


def test_the_cpu_row_is_the_machines_and_the_jobs_own_use_is_told_beside_it() -> None:
    from gpuwise.diagnose.anatomy import read_anatomy
    from gpuwise.report.text.run import job_resources_note

    samples = [
        Sample(t / 10, "cpu", utilization_pct=90.0, memory_used_bytes=12_600 << 20,
               process_cpu_pct=98.0, process_rss_bytes=310 << 20)
        for t in range(3)
    ]  # fmt: skip
    run = Run("profile", samples=samples, utilization=summarize(samples, 0.1))
    run.anatomy = read_anatomy(run)
    assert job_resources_note(run) == (
        "cpu row: the whole machine; the job's own processes: 98 % of one core, "
        f"peak RSS {format_bytes(310 << 20)}"
    )
    console = Console(width=120, record=True)
    render_run(run, console)
    assert "the job's own processes: 98 % of one core" in console.export_text()
