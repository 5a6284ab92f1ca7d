from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main


@pytest.fixture(autouse=True)
def host_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the measured host figures of every test in its own tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "gpuwise" / "host.json"


def test_advise_json_small_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--batch",
            "4",
            "--dataset-size",
            "60000",
            "--epochs",
            "2",
            "--gpu",
            "4090",
            "--gpu",
            "t4",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuwise.advise/1"
    assert data["price_date"] == "2025-10"
    devices = [r["device"] for r in data["rows"]]
    assert "NVIDIA GeForce RTX 4090" in devices
    assert "NVIDIA T4" in devices
    assert sum(r["kind"] == "cpu" for r in data["rows"]) == 1
    hours = [r["train_hours"] for r in data["rows"]]
    assert hours == sorted(hours)
    rtx = next(r for r in data["rows"] if r["device"] == "NVIDIA GeForce RTX 4090")
    assert rtx["months_to_buy"] == pytest.approx(1599 / (0.41 * 730 * 0.5))
    assert rtx["cost_usd"] == pytest.approx(rtx["train_hours"] * 0.41)
    steps = -(-60000 // 4) * 2
    assert rtx["train_hours"] == pytest.approx(rtx["step_s"] * steps / 3600)


def test_advise_text_names_the_price_date(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--batch",
            "1",
            "--optimizer",
            "sgd",
            "--dataset-size",
            "1000",
            "--epochs",
            "1",
            "--gpu",
            "h100 sxm",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "2025-10" in out
    assert "this CPU" in out


def test_advise_budget_keeps_cheap_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--dataset-size",
            "1000",
            "--epochs",
            "1",
            "--budget",
            "0",
            "--json",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["kind"] == "cpu" or r["cost_usd"] == 0 for r in rows)


def test_advise_unknown_gpu_lists_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["advise", "mnist_mlp", "--dataset-size", "10", "--epochs", "1", "--gpu", "voodoo5"]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "unknown GPU 'voodoo5'" in err
    assert "NVIDIA L40S" in err


def test_two_runs_give_the_same_table(capsys: pytest.CaptureFixture[str], host_cache: Path) -> None:
    argv = ["advise", "mnist_mlp", "--batch", "64", "--precision", "bf16", "--json"]
    tables, figures = [], []
    for _ in range(2):
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        tables.append(doc["rows"])
        figures.append(doc["host_figures"])
    if figures[0]["provenance"] == "loaded":  # measured beside busy processes: not kept
        assert not host_cache.exists()
        assert figures[0]["others_cores"] >= 0.5
        assert "not kept" in figures[0]["summary"]
    else:  # kept, and the second run reads the same figures back
        assert host_cache.exists()
        assert figures[1]["provenance"] == "cached"
        assert "ago" in figures[1]["summary"]
        assert tables[0] == tables[1]
    t4 = next(r for r in tables[0] if r["device"] == "NVIDIA T4")
    assert t4["precision"] == "fp16"
    assert t4["speedup_vs_cpu"] is not None
    assert all(r["train_hours"] is None for r in tables[0])


def test_inference_and_half_given_run_length(
    capsys: pytest.CaptureFixture[str], host_cache: Path
) -> None:
    assert main(["advise", "mnist_mlp", "--inference", "--gpu", "l4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["training"] is False
    assert data["rows"][0]["samples_per_s"] > 0
    assert main(["advise", "mnist_mlp", "--epochs", "2"]) == 2
    assert "--dataset-size and --epochs together" in capsys.readouterr().err


def test_checkpoint_is_suggested_only_where_it_makes_the_job_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["advise", "gpt2_small", "--seq", "1024", "--batch", "48", "--gpu", "t4"]
    code = main([*argv, "--gpu", "l40s", "--json"])
    assert code == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    from gpuwise.sizing.memory.estimate import estimate

    checkpointed = estimate("gpt2_small", seq_len=1024, batch_size=48, checkpoint=True)
    # 65 GiB without checkpointing: fits neither; checkpointed it fits the 48 GB L40S only
    assert 16 * 2**30 < checkpointed.peak_bytes < 44 * 2**30
    assert not rows["NVIDIA L40S"]["fits"]
    assert "--checkpoint" in rows["NVIDIA L40S"]["verdict"]
    assert not rows["NVIDIA T4"]["fits"]
    assert "--checkpoint" not in rows["NVIDIA T4"]["verdict"]


def test_notes_tell_an_ambiguous_gpu_name_and_what_compile_models(
    capsys: pytest.CaptureFixture[str], host_cache: Path
) -> None:
    argv = ["advise", "mnist_mlp", "--batch", "8", "--gpu", "a100", "--gpu", "NVIDIA A10"]
    assert main([*argv, "--compile", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    devices = {r["device"] for r in data["rows"] if r["kind"] == "gpu"}
    assert len(devices) == 5  # the four A100s and the A10, named whole
    assert "NVIDIA A10" in devices
    ambiguous = [n for n in data["notes"] if n.startswith("--gpu")]
    assert len(ambiguous) == 1
    assert ambiguous[0].startswith("--gpu 'a100' matches 4 cards")
    assert any("partitioner keeps 0.94-1.00 of the activations" in n for n in data["notes"])
    row = next(r for r in data["rows"] if r["device"] == "NVIDIA A10")
    assert row["rate_sources"]["gemm"].startswith("NVIDIA A10:")


def test_remeasure_measures_again_even_with_figures_kept(
    capsys: pytest.CaptureFixture[str], host_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuwise.sizing.hardware import cpu_rates

    monkeypatch.setattr(cpu_rates, "QUIET_OTHERS_CORES", float("inf"))  # keep whatever is seen
    argv = ["advise", "mnist_mlp", "--batch", "4", "--gpu", "t4", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["host_figures"]["provenance"] == "measured now"
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["host_figures"]["provenance"] == "cached"
    assert main([*argv, "--remeasure"]) == 0
    assert json.loads(capsys.readouterr().out)["host_figures"]["provenance"] == "measured now"
    assert main(["advise", "--help"]) == 0
    assert "--remeasure  # measure this CPU again" in capsys.readouterr().out
