"""``make gpu-check`` without a GPU: says so, writes the JSON, exits 0."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path, capsys) -> None:
    out = tmp_path / "gpu-check.json"
    assert _gpu_check().main(["--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["schema"], doc["gpu"], doc["checks"]) == ("gpuwise.gpu_check/1", None, [])
    assert "no CUDA GPU" in capsys.readouterr().out


def test_every_gpu_only_benchmark_is_a_check_and_quick_reaches_them() -> None:
    checks = _gpu_check().checks(quick=True)
    scripts = {a for c in checks for a in c.argv if a.startswith("benchmarks/")}
    gpu_only = {f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*_gpu.py")}
    assert gpu_only <= scripts
    quick = [c for c in checks if "--quick" in c.argv]
    assert {c.name for c in quick} >= {"profile hooks overhead", "end to end"}
