"""How the cards of a node talk to each other and to other nodes (``interconnect.csv``).

Per GPU: the link within a node (NVLink through NVSwitch, Infinity Fabric, else PCIe),
the all-reduce bus bandwidth NCCL reaches on it (``busbw`` as nccl-tests prints it: the
algorithm bandwidth times ``2(n-1)/n``, so one figure serves every GPU count), and the
network port each GPU has to other nodes. A card the file does not name is taken as a
PCIe card (``pcie_link``), and its rows say so.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpuwise.sizing.hardware.catalog import GpuSpec

NETWORK_EFFICIENCY = 0.9
"""Share of the network ports' line rate NCCL's collectives reach between nodes (InfiniBand
and RoCE with GPUDirect RDMA; nccl-tests across nodes reach 90-95 % of the ports)."""
PCIE_BUSBW_SHARE = 0.625
"""All-reduce bus bandwidth over a PCIe link, as a share of it: 40 of 64 GB/s on 8x H100
PCIe (nccl-tests, the ``interconnect.csv`` H100 PCIe row)."""
DEFAULT_NETWORK_GBS = 12.5
"""A network port per GPU where the file names none: 100 Gb/s Ethernet (an assumption)."""


@dataclass(frozen=True)
class Interconnect:
    """One card's links (GB/s, one direction, decimal units).

    Attributes:
        gpus_per_node: GPUs one node holds.
        link_gbs: Each GPU's link within the node.
        busbw_gbs: All-reduce bus bandwidth NCCL reaches within a node.
        network_gbs_per_gpu: Each GPU's network port to other nodes.
        source: Where the figures come from; ``estimated`` where no row names the card.
    """

    gpus_per_node: int
    link_gbs: float
    busbw_gbs: float
    network_gbs_per_gpu: float
    source: str

    def bus_bytes_s(self, nodes: int) -> float:
        """Bus bandwidth of a collective over ``nodes`` nodes (bytes/s).

        Across nodes NCCL runs one ring per GPU's port in parallel, each carrying its share,
        so the network gives ``ports x port rate x NETWORK_EFFICIENCY``, at most the
        node's own bus bandwidth.
        """
        within = self.busbw_gbs * 1e9
        if nodes <= 1:
            return within
        across = self.gpus_per_node * self.network_gbs_per_gpu * 1e9 * NETWORK_EFFICIENCY
        return min(within, across)


@cache
def _rows() -> dict[str, Interconnect]:
    text = resources.files("gpuwise.sizing.hardware").joinpath("interconnect.csv").read_text()
    return {
        row["name"]: Interconnect(
            int(row["gpus_per_node"]),
            float(row["link_gbs"]),
            float(row["busbw_gbs"]),
            float(row["network_gbs_per_gpu"]),
            row["source"],
        )
        for row in csv.DictReader(text.splitlines())
    }


def interconnect_of(gpu: GpuSpec) -> Interconnect:
    """``gpu``'s links: its ``interconnect.csv`` row, else a PCIe card's (``pcie_link``)."""
    return _rows().get(gpu.name) or pcie_link(gpu)


def pcie_link(gpu: GpuSpec) -> Interconnect:
    """A card joined to the others only over PCIe, 8 to a node, on a 100 Gb/s network."""
    link = gpu.pcie_bytes_s / 1e9
    return Interconnect(
        8,
        link,
        link * PCIE_BUSBW_SHARE,
        DEFAULT_NETWORK_GBS,
        f"estimated: no interconnect row for {gpu.name}; PCIe Gen{gpu.pcie_gen} x16 at "
        f"{PCIE_BUSBW_SHARE:.3g} of its rate, 100 Gb/s network per GPU",
    )
