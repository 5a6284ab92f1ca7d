from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.pipeline.workers.threads import plan_threads, pre_worker_grid, usable_cores

FAKE = "tests.pipeline.fake_app:app"
QUICK = ["--duration", "0.6", "--warmup", "0.2"]


def test_json_run_has_the_serving_section_and_a_diagnosis(capsys, tmp_path: Path):
    html = tmp_path / "serving.html"
    code = main(["serve-bench", FAKE, *QUICK, "--max-batch", "8", "--json", "--html", str(html)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["schema"] == "gpuwise.run/1"
    serving = doc["serving"]
    assert serving["schema"] == "gpuwise.serving/1"
    assert serving["settings"]["max_batch"] == 8
    assert serving["load"]["concurrency"] == 16
    # 16 clients keep 8-row batches full: 8 / (2 ms + 8 * 0.5 ms) = 1333 req/s at most
    assert 300 < serving["throughput_per_s"] <= 1333 * 1.05
    assert serving["batches"]["mean_fill"] > 0.8
    # the fake model's step: 2 ms + 8 x 0.5 ms; the device is the busiest stage, so no
    # finding blames pre or post (whether it reaches 70 % busy depends on this shared CPU)
    assert serving["batches"]["mean_device_s"] == pytest.approx(0.006, rel=0.3)
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds[0] in ("model_bound", "healthy", "queueing")
    assert not {"pre_bound", "post_bound"} & set(kinds)
    page = html.read_text()
    assert "end-to-end latency" in page
    # stage shares, latency CDF, latency over time, latency and batch histograms (no sweep)
    assert page.count("<svg") == 5
    assert '<section id="sweep">' not in page


def test_sweep_reports_the_best_setting_meeting_the_target(capsys):
    argv = ["serve-bench", FAKE, *QUICK, "--slo-p99-ms", "1000", "--batches", "1,8"]
    code = main([*argv, "--delays", "1", "--workers", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    sweep = doc["serving"]["sweep"]
    # each batch size with and without closing beside an idle device (the default grid)
    assert [p["settings"]["max_batch"] for p in sweep] == [1, 1, 8, 8]
    assert [p["settings"]["close_on_idle"] for p in sweep] == [True, False, True, False]
    assert all(p["meets_slo"] for p in sweep)
    assert doc["serving"]["settings"]["max_batch"] == 8  # 8-row batches: more throughput
    assert sweep[2]["throughput_per_s"] > 2 * sweep[0]["throughput_per_s"]
    assert doc["serving"]["slo_p99_s"] == pytest.approx(1.0)


def test_text_report_names_the_stages_and_the_sweep(capsys):
    argv = ["serve-bench", FAKE, *QUICK, "--slo-p99-ms", "500", "--batches", "4", "--delays", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "where a request's time goes" in out
    assert "sweep · p99 target 500.0 ms" in out
    assert "best setting (bold): max_batch 4, max_delay 2 ms" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-batch", "0"],
        ["--rate", "10", "--concurrency", "4"],
        ["--batches", "4,x", "--slo-p99-ms", "10"],
        ["--delays", "-1", "--slo-p99-ms", "10"],
    ],
)
def test_bad_flags_are_usage_errors(argv, capsys):
    assert main(["serve-bench", *argv]) == 2
    assert "error" in capsys.readouterr().err


def test_a_bad_factory_is_a_one_line_error(capsys):
    assert main(["serve-bench", "tests.pipeline.fake_app:not_an_app", *QUICK]) == 1
    err = capsys.readouterr().err
    assert "returned a int; it must return a gpuwise.pipeline.ServingApp" in err
    assert main(["serve-bench", "no_such_module_xyz:app"]) == 1
    assert "cannot import module 'no_such_module_xyz'" in capsys.readouterr().err


@pytest.mark.slow
def test_pre_in_processes_from_the_command_line(capsys):
    argv = ["serve-bench", FAKE, *QUICK, "--max-batch", "4", "--pre-processes", "2", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["serving"]["settings"]["pre_workers"] == 2
    assert "2 pre processes" in doc["serving"]["thread_plan"]["explanation"]
    assert doc["serving"]["requests"]["ok"] > 50


def test_a_sweep_tries_half_the_planned_and_all_the_cores_as_pre_workers(capsys):
    argv = ["serve-bench", FAKE, *QUICK, "--slo-p99-ms", "1000", "--batches", "4"]
    assert main([*argv, "--delays", "1", "--close-on-idle", "on", "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)["serving"]["sweep"]
    cores = usable_cores()
    want = sorted({max(1, cores // 2), plan_threads("cpu", cores=cores).pre_workers, cores})
    assert [p["settings"]["pre_workers"] for p in sweep] == want


@pytest.mark.parametrize(
    ("device", "cores", "want"),
    [("cuda", 16, [8, 15, 16]), ("cpu", 16, [8, 16]), ("cpu", 2, [1, 2]), ("cuda", 1, [1])],
)
def test_the_worker_grid_for_a_core_count(device, cores, want):
    assert pre_worker_grid(device, cores=cores) == want
