from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.telemetry.export import read_jsonl


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert main(["monitor", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_once_json_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--once", "--interval", "0.1")
    ids = [d["id"] for d in doc["devices"]]
    assert doc["schema"] == "gpuwise.samples/1"
    assert [s["device"] for s in doc["samples"]] == ids
    assert list(doc["summary"]) == ids
    if ids == ["cpu"]:  # no GPU here: the reason is given, the CPU is the device
        assert doc["unavailable"]["nvml"].startswith("NVML could not")
        assert doc["samples"][0]["memory_total_bytes"] == doc["devices"][0]["memory_total_bytes"]


def test_once_json_with_fake_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--once", "--fake", "2", "--interval", "0.05")
    assert [d["name"] for d in doc["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [s["device"] for s in doc["samples"]] == ["gpu0", "gpu1"]
    gpu1 = doc["samples"][1]
    assert doc["summary"]["gpu1"]["mean_utilization_pct"] == gpu1["utilization_pct"]
    assert doc["summary"]["gpu1"]["peak_memory_used_bytes"] == gpu1["memory_used_bytes"]
    assert doc["unavailable"] == {}


def test_duration_with_log_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, csv = tmp_path / "gpu.jsonl", tmp_path / "gpu.csv"
    doc = run_json(
        capsys, "--fake", "1", "--duration", "0.3", "--interval", "0.05", "--log", str(log),
        "--csv", str(csv),
    )  # fmt: skip
    samples = doc["samples"]
    assert len(samples) >= 3
    assert [s.to_dict() for s in read_jsonl(log).samples] == samples
    rows = csv.read_text().splitlines()
    assert len(rows) == 1 + len(samples)
    assert rows[1].split(", ")[3] == f"{samples[0]['utilization_pct']:.0f} %"
    assert doc["summary"]["gpu0"]["samples"] == len(samples)
    assert doc["summary"]["gpu0"]["energy_source"] == "counter"


def test_summary_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--fake", "1", "--duration", "0.2", "--interval", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "summary" in out
    assert "gpu0" in out
    assert "mean util" in out


def test_command_exit_code_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["monitor", "--interval", "0.05", "--", sys.executable, "-c", "import sys; sys.exit(3)"]
    )
    assert code == 3
    captured = capsys.readouterr()
    assert "command exited with code 3" in captured.err


def test_command_json_records_the_process_tree(capsys: pytest.CaptureFixture[str]) -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    argv = ["monitor", "--json", "--interval", "0.05", "--fake", "1", "--host", "--"]
    assert main([*argv, sys.executable, "-c", busy]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 0
    assert doc["command"] == [sys.executable, "-c", busy]
    cpu = doc["processes"]["cpu"]
    assert cpu["peak_rss_bytes"] > 1_000_000
    assert cpu["mean_cpu_pct"] is not None


@pytest.mark.parametrize(
    "argv",
    [
        ["--interval", "0.01"],
        ["--interval", "soon"],
        ["--fake", "0"],
        ["--bogus"],
        ["--duration", "-1"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", *argv]) == 2
    assert "usage:" in capsys.readouterr().err


def test_unknown_command_is_a_runtime_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--", "gpuwise-no-such-program-xyz"]) == 1
    assert "cannot start 'gpuwise-no-such-program-xyz'" in capsys.readouterr().err


def test_once_with_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--once", "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    expected = "--once reads devices once; it cannot be combined with a command"
    assert err == f"gpuwise monitor: error: {expected}\n"


def test_command_killed_by_a_signal_exits_like_a_shell(capsys: pytest.CaptureFixture[str]) -> None:
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert main(["monitor", "--interval", "0.05", "--", sys.executable, "-c", kill]) == 128 + 15
    assert "command exited with code 143" in capsys.readouterr().err


def test_once_table_shows_gpu_readings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--once", "--fake", "1", "--interval", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in out
    assert "1980/2619 MHz" in out
    assert "30.0 GiB / 79.6 GiB" in out


def test_command_output_stays_off_stdout_with_json(capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["monitor", "--json", "--interval", "0.05", "--fake", "1", "--"]
    assert main([*argv, sys.executable, "-c", "print('hello from the child')"]) == 0
    captured = capfd.readouterr()
    doc = json.loads(captured.out)  # the JSON document and nothing else
    assert doc["exit_code"] == 0
    assert doc["schema"] == "gpuwise.samples/1"


def test_devices_flag_filters_plain_output(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--once", "--fake", "3", "--interval", "0.05", "--devices", "2,0")
    assert [s["device"] for s in doc["samples"]] == ["gpu2", "gpu0"]


def test_bad_devices_entry_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--once", "--fake", "2", "--devices", "5"]) != 0
    assert "device '5' names no GPU; this machine has 0 (GPU-fake-0000)" in capsys.readouterr().err


def test_the_docs_give_the_default_sampling_rate_the_parser_has() -> None:
    import argparse
    import re

    from gpuwise.cli._args import add_interval

    parser = argparse.ArgumentParser()
    add_interval(parser, "readings")
    hz = 1 / parser.get_default("interval")
    docs = Path(__file__).parents[3] / "docs"
    for page in ("nvitop.md", "commands/monitor.md"):
        text = (docs / page).read_text()
        prose = re.sub(r"```.*?```", "", text, flags=re.S)  # benchmark output names its rate
        said = {float(x) for x in re.findall(r"(\d+(?:\.\d+)?) Hz by default", prose)}
        said |= {1 / float(x) for x in re.findall(r"default (\d+(?:\.\d+)?) s: \d+ Hz", prose)}
        assert said == {hz}, f"{page} gives {said} Hz as the default; the parser has {hz:g}"
        # every other rate in the prose names the --interval that gives it
        for m in re.finditer(r"(\d+) Hz", prose):
            near = prose[max(0, m.start() - 80) : m.end() + 40]
            assert "default" in near or "--interval" in near, f"{page}: {near!r}"
