"""Published many-GPU runs (LLM Foundry's tables): the rows as typed, and one through the CLI.

The rows' figures were typed from the pinned README before anything was run; nothing of
the model is fitted on them (``benchmarks/sizing_sharded.py`` sizes them all).
"""

from __future__ import annotations

import csv
import shlex
import sys
from pathlib import Path

import pytest

from gpuwise.sizing.speed import attention_rates

ROOT = Path(__file__).resolve().parents[3]
CSV = ROOT / "src" / "gpuwise" / "sizing" / "hardware" / "published_sharded.csv"


def _rows() -> list[dict[str, str]]:
    with CSV.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _size(row: dict[str, str], folder: Path) -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from sizing_sharded import size_row
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return size_row(row, folder)  # type: ignore[no-any-return]


def test_rows_carry_their_configuration_and_source() -> None:
    rows = _rows()
    assert len(rows) == 209  # the README's bf16 tables: 18 + 52 H100, 61 A100 80GB, 78 40GB
    cards = {r["gpu"] for r in rows}
    assert cards == {"NVIDIA H100 SXM", "NVIDIA A100 80GB SXM", "NVIDIA A100 40GB SXM"}
    for r in rows:
        argv = shlex.split(r["argv"])
        flags = {
            a: (b if not b.startswith("--") else "")
            for a, b in zip(argv, [*argv[1:], ""], strict=True)
            if a.startswith("--")
        }
        gpus = int(r["gpus"])
        assert flags["--gpus"] == r["gpus"]
        assert int(flags.get("--nodes", "1")) == max(1, gpus // 8)  # 8 GPUs a node
        assert flags["--shard"] in ("fsdp", "zero2")
        # Composer's DEFAULT of 2023 keeps fp32 weights under autocast; PURE casts them
        route = "bf16-o2" if r["precision"] == "bf16 PURE" else "bf16"
        assert flags["--precision"] == route
        # LLM Foundry's MPT takes flash-attn's fused cross-entropy unless told otherwise
        assert flags["--loss"] == "fused"
        assert r["source"].startswith("github.com/mosaicml/llm-foundry @4952183 ")
        # the tables' parameter counts: 12 d^2 a layer, the tied vocabulary, positions
        d, layers, seq = int(r["d_model"]), int(r["n_layers"]), int(r["seq"])
        counted = 12 * d * d * layers + (int(r["vocab_size"]) + seq) * d
        assert counted == pytest.approx(int(r["num_params"]), rel=0.002)


@pytest.mark.slow
def test_an_h100_row_at_8192_tokens_comes_within_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (row,) = [
        r
        for r in _rows()
        if (r["model"], r["gpu"], r["seq"]) == ("MPT-1B", "NVIDIA H100 SXM", "8192")
    ]
    assert (row["value"], row["micro_batch"]) == ("29157", "3")  # tokens/s per GPU, 8 GPUs
    hopper = _size(row, tmp_path)
    assert hopper["fits"]
    assert 1 / 1.15 <= hopper["ratio"] <= 1.15  # type: ignore[operator]
    # FlashAttention-2's A100 shares (before) put it past the budget, too fast
    monkeypatch.setattr(attention_rates, "MEASURED_ATTENTION", {})
    ampere = _size(row, tmp_path)
    assert ampere["ratio"] > 1.2  # type: ignore[operator]
