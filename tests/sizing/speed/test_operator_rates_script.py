"""``benchmarks/operator_rates_gpu.py`` on the CPU: the script runs and its rows are sound.

The figures are a GPU's; here the same code runs at small sizes so that it cannot rot
between the GPU runs that fill ``benchmarks/results/operator-rates-*.json``.
"""

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "operator_rates_gpu.py"


def test_memory_and_launch_parts_write_rows_in_the_calibration_columns(tmp_path: Path) -> None:
    out, table = tmp_path / "rates.json", tmp_path / "rates.csv"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--only", "memory,launch",
         "--out", str(out), "--csv", str(table)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["errors"] == {}
    memory = [r for r in doc["rows"] if r["what"] == "memory"]
    assert {r["op"] for r in memory} >= {"copy", "add", "layer_norm", "softmax"}
    assert all(r["gbs"] > 0 for r in memory)
    (launch,) = [r for r in doc["rows"] if r["what"] == "launch"]
    assert 0 < launch["seconds_per_kernel"] < 1e-2
    with table.open() as fh:
        rows = list(csv.DictReader(fh))
    calibration = ROOT / "src/gpuwise/sizing/hardware/measured_calibration.csv"
    header = calibration.read_text(encoding="utf-8").splitlines()[0]
    assert list(rows[0]) == header.split(",")
    assert sum(r["metric"] == "achieved_bandwidth" for r in rows) == 2  # copy, two sizes
    assert all("operator_rates_gpu.py" in r["source"] for r in rows)


def test_kernel_names_map_to_the_models_classes() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from operator_rates_gpu import catalog_card, kernel_class
    finally:
        sys.path.remove(str(SCRIPT.parent))
    names = {
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc": "conv",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": "gemm",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>": "optimizer",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>": (
            "memory"
        ),
    }
    assert {name: kernel_class(name) for name in names} == names
    assert catalog_card("NVIDIA H200").name == "NVIDIA H200 SXM"
    assert catalog_card("NVIDIA H100 80GB HBM3").name == "NVIDIA H100 SXM"
