"""The cuBLAS workspaces beside the estimate's peak, against a real H100's allocator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.sizing.hardware.calibration import cublas_workspace_bytes
from gpuwise.sizing.memory.estimate import estimate

pytestmark = pytest.mark.kernels

H100 = json.loads(
    (Path(__file__).resolve().parents[2] / "realdata" / "h100_workspaces.json").read_text()
)


def test_the_modelled_workspaces_are_what_stays_allocated_on_the_h100() -> None:
    modelled = cublas_workspace_bytes(H100["device"])
    assert modelled == 2 * 32 * 2**20  # two of cuBLAS's recommended 32 MiB on Hopper
    assert abs(modelled - H100["left_allocated_bytes"]) / H100["left_allocated_bytes"] < 0.05


@pytest.mark.parametrize("row", H100["rows"][1::2], ids=lambda r: f"b{r['batch']}")
def test_estimate_plus_workspaces_meets_the_measured_peak_without_cudnn(row: dict) -> None:
    est = estimate(
        "resnet18", (3, 64, 64), batch_size=row["batch"], optimizer="adamw", device="cuda"
    )
    assert est.peak_bytes == row["estimate_peak_bytes"]  # the trace is deterministic
    predicted = est.peak_bytes + cublas_workspace_bytes(H100["device"])
    assert predicted / row["cudnn_off_peak_bytes"] == pytest.approx(1.0, abs=0.03)
    # cuDNN's convolution workspaces, not modelled, only ever add to the peak
    assert row["cudnn_on_peak_bytes"] >= 0.99 * row["cudnn_off_peak_bytes"]
