"""The GPU catalog shipped with gpuwise (``sizing/hardware/gpus.csv``): vendor datasheet figures.

Tensor rates are dense (no 2:4 sparsity); cloud prices are medians of on-demand prices
from the community cloud-gpus.github.io list, October 2025. Each row's ``source`` names
the datasheet and the price list.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources

from gpuwise.errors import UsageError

PRICE_DATE = "2025-10"
"""Date of the cloud prices in the catalog (cloud-gpus.github.io, commit b0b08c2)."""

_RATE_COLUMNS = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tflops_dense",
    "bf16": "bf16_tflops_dense",
    "fp16": "fp16_tflops_dense",
}

_PCIE_BYTES_S = {3: 16e9, 4: 32e9, 5: 64e9}
"""Host-to-device bandwidth per direction of a x16 link (gpus_notes.md: Gen4 64 GB/s and
Gen5 128 GB/s bidirectional, about half each way; Gen3 about 16 GB/s each way)."""


@dataclass(frozen=True)
class GpuSpec:
    """One catalog row (rates in TFLOPS, bandwidth in GB/s, decimal units).

    ``sm_count`` and ``boost_clock_mhz`` (streaming multiprocessors and maximum boost
    clock, from the architecture whitepapers) are None where the catalog lacks them.
    """

    name: str
    memory_gib: float
    bandwidth_gbs: float
    tflops: dict[str, float | None]
    tdp_w: float
    pcie_gen: int
    launch_usd: float | None
    cloud_usd_per_hour: float | None
    source: str
    sm_count: int | None = None
    boost_clock_mhz: float | None = None

    @property
    def watts_per_sm_ghz(self) -> float | None:
        """Board power per SM per GHz of boost clock: the power headroom of its silicon.

        Dynamic power grows with the SMs switching and their clock, so a board whose power
        limit (``tdp_w``) is small for its SMs at boost clock must lower the clock under a
        sustained tensor load (``speed.class_rates.gemm_share``). None without the figures.
        """
        if not self.sm_count or not self.boost_clock_mhz:
            return None
        return self.tdp_w / (self.sm_count * self.boost_clock_mhz / 1000)

    @property
    def pcie_bytes_s(self) -> float:
        """Host-to-device bandwidth of the card's x16 link, one direction."""
        return _PCIE_BYTES_S.get(self.pcie_gen, 16e9)

    def peak_flops(self, precision: str) -> float | None:
        """Peak FLOP/s at ``precision``; None when the matrix units do not support it.

        TF32 on a card without TF32 tensor cores runs as plain FP32.
        """
        rate = self.tflops.get(precision)
        if rate is None and precision == "tf32":
            rate = self.tflops.get("fp32")
        return rate * 1e12 if rate is not None else None


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def _row(row: dict[str, str]) -> GpuSpec:
    return GpuSpec(
        name=row["name"],
        memory_gib=float(row["memory_gib"]),
        bandwidth_gbs=float(row["bandwidth_gbs"]),
        tflops={p: _number(row[c]) for p, c in _RATE_COLUMNS.items()},
        tdp_w=float(row["tdp_w"]),
        pcie_gen=int(row["pcie_gen"]),
        launch_usd=_number(row["launch_usd"]),
        cloud_usd_per_hour=_number(row["cloud_usd_per_hour"]),
        source=row["source"],
        sm_count=int(row["sm_count"]) if row.get("sm_count", "").strip() else None,
        boost_clock_mhz=_number(row.get("boost_clock_mhz", "")),
    )


@functools.cache
def load_catalog() -> tuple[GpuSpec, ...]:
    """All GPUs in the shipped catalog, in file order.

    Example:
        >>> any(g.name == "NVIDIA A100 80GB SXM" for g in load_catalog())
        True
    """
    text = (
        resources.files("gpuwise.sizing.hardware").joinpath("gpus.csv").read_text(encoding="utf-8")
    )
    return tuple(_row(row) for row in csv.DictReader(io.StringIO(text)))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", "").replace("geforce", ""))


def _matches(name: str, catalog: tuple[GpuSpec, ...]) -> list[GpuSpec]:
    """The rows ``name`` picks: the one it names exactly, else every row containing it."""
    key = _key(name)
    exact = [g for g in catalog if key and _key(g.name) == key]
    return exact or [g for g in catalog if key and key in _key(g.name)]


def find_gpus(names: list[str]) -> list[GpuSpec]:
    """Catalog rows matching ``names`` (case, spaces and the vendor prefix ignored).

    A name that is a row's whole name picks that row only (``NVIDIA A10`` is the A10,
    not the A100s); otherwise it matches every row that contains it (``a100`` gives the
    four A100 rows; ``ambiguous_names`` says so).

    Raises:
        UsageError: A name matches nothing; the message lists the valid names.

    Example:
        >>> [g.name for g in find_gpus(["NVIDIA A10"])]
        ['NVIDIA A10']
    """
    catalog = load_catalog()
    chosen: list[GpuSpec] = []
    for name in names:
        matches = _matches(name, catalog)
        if not matches:
            valid = "; ".join(g.name for g in catalog)
            raise UsageError(f"unknown GPU {name!r}; the catalog has: {valid}")
        chosen.extend(g for g in matches if g not in chosen)
    return chosen


def ambiguous_names(names: list[str]) -> dict[str, list[str]]:
    """Each of ``names`` that matches several catalog rows (and no row exactly), with them.

    Example:
        >>> ambiguous_names(["a100", "NVIDIA A10"])["a100"][0]
        'NVIDIA A100 80GB SXM'
    """
    catalog = load_catalog()
    found = {name: [g.name for g in _matches(name, catalog)] for name in names}
    return {name: cards for name, cards in found.items() if len(cards) > 1}
