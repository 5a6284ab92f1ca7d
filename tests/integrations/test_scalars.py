"""The Run's scalars through TensorBoard's own writer, read back with TensorBoard's reader."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from gpuwise.errors import GpuwiseError
from gpuwise.integrations.scalars import export_scalars, findings_text, run_scalars
from tests.report.runs import INPUT_BOUND, gpu_samples, make_run, uniform_steps


def _run():  # type: ignore[no-untyped-def]
    steps = [dataclasses.replace(s, forward_s=0.04) for s in uniform_steps(4)]
    run = make_run(steps=steps, samples=gpu_samples(5), findings=[INPUT_BOUND])
    run.extra["mfu"] = {"mfu": 0.25}
    return run


def _read(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {
        tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def test_scalars_of_a_run() -> None:
    scalars = list(run_scalars(_run()))
    by_tag: dict[str, list[tuple[int, float]]] = {}
    for s in scalars:
        by_tag.setdefault(s.tag, []).append((s.step, round(s.value, 6)))
    assert by_tag["gpuwise/step_s"] == [(i, 0.2) for i in range(4)]
    assert by_tag["gpuwise/phase/data_wait_s"] == [(i, 0.08) for i in range(4)]
    assert by_tag["gpuwise/compute/forward_s"] == [(i, 0.04) for i in range(4)]
    assert by_tag["gpuwise/gpu0/utilization_pct"] == [(i, 10.0 * i) for i in range(5)]
    assert by_tag["gpuwise/gpu0/memory_used_gib"] == [(i, float(i)) for i in range(5)]
    assert by_tag["gpuwise/summary/data_wait_fraction"] == [(3, 0.4)]
    assert by_tag["gpuwise/summary/mfu"] == [(3, 0.25)]
    assert "gpuwise/gpu0/sm_active_pct" not in by_tag  # not reported: not logged as 0


def test_tensorboard_event_file_reads_back(tmp_path: Path) -> None:
    written = export_scalars(_run(), tensorboard=tmp_path / "tb")
    scalars = _read(tmp_path / "tb")
    assert written["tensorboard"] == sum(len(v) for v in scalars.values())
    assert scalars["gpuwise/phase/compute_s"] == [(i, 0.1) for i in range(4)]
    assert scalars["gpuwise/gpu0/power_w"] == [(i, 300.0) for i in range(5)]
    assert "wandb" not in written  # not installed here, not asked: skipped silently
    assert "mlflow" not in written


def test_findings_text() -> None:
    assert findings_text(_run()) == (
        "1. **input_bound** (critical, up to 1.67x): "
        "The GPU waits for the next batch 40 % of every step."
    )


@pytest.mark.parametrize(("tool", "extra"), [("wandb", "wandb"), ("mlflow", "mlflow")])
def test_asked_for_but_absent_names_the_extra(
    tool: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, tool, None)  # import now raises ImportError
    with pytest.raises(GpuwiseError, match=rf"pip install 'gpuwise\[{extra}\]'"):
        export_scalars(_run(), **{tool: True})
    assert export_scalars(_run(), **{tool: None}) == {}  # "if there": skipped silently


def test_tensorboard_absent_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(GpuwiseError, match=r"pip install 'gpuwise\[tensorboard\]'"):
        export_scalars(_run(), tensorboard=tmp_path)


SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_profile_tensorboard_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuwise.cli.main import main

    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    logdir = tmp_path / "tb"
    argv = ["profile", "--interval", "0.1", "--tensorboard", str(logdir), "--"]
    assert main([*argv, sys.executable, str(script)]) == 0
    assert f"gpuwise profile: wrote {logdir}" in capsys.readouterr().err
    scalars = _read(logdir)
    assert [step for step, _ in scalars["gpuwise/step_s"]] == list(range(8))
    assert "gpuwise/summary/compute_fraction" in scalars
