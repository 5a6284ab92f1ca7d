"""Device and step metrics for Prometheus, in its exposition format (``gpuwise[prometheus]``).

GPU metrics take dcgm-exporter's names where they mean the same, in its units, so that
dashboards built for dcgm-exporter read them unchanged (``DCGM_NAMES``); labels are
dcgm-exporter's ``gpu``, ``UUID``, ``device`` and ``modelName``. What dcgm-exporter has no
name for, and every reading of the CPU as the device, is ``gpuwise_<field>`` with the unit
in the name. Step metrics (``gpuwise_step_seconds``, ``gpuwise_phase_fraction``,
``gpuwise_mfu``, ``gpuwise_hfu``, ``gpuwise_rank_mfu``, ``gpuwise_tokens_per_second``,
``gpuwise_model_flops_per_step``, ``gpuwise_energy_per_step_joules``) come from
``update_steps`` (``run_step_metrics`` of a Run).

The endpoint binds 127.0.0.1 unless told otherwise: metrics of a training job are not for
the whole network by default.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from gpuwise.errors import MissingExtraError, UsageError
from gpuwise.records import Run, Sample

DEFAULT_ADDRESS = "127.0.0.1:9400"
"""dcgm-exporter's port, on the loopback interface."""

DCGM_NAMES: dict[str, tuple[str, float, str]] = {
    "utilization_pct": ("DCGM_FI_DEV_GPU_UTIL", 1.0, "GPU utilization (in %)."),
    "memory_util_pct": ("DCGM_FI_DEV_MEM_COPY_UTIL", 1.0, "Memory utilization (in %)."),
    "memory_used_bytes": ("DCGM_FI_DEV_FB_USED", 1 / 2**20, "Framebuffer memory used (in MiB)."),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", 1.0, "Power draw (in W)."),
    "energy_j": (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        1e3,
        "Total energy consumption since boot (in mJ).",
    ),
    "temperature_c": ("DCGM_FI_DEV_GPU_TEMP", 1.0, "GPU temperature (in C)."),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK", 1.0, "SM clock frequency (in MHz)."),
    "mem_clock_mhz": ("DCGM_FI_DEV_MEM_CLOCK", 1.0, "Memory clock frequency (in MHz)."),
    "pcie_tx_bytes_s": ("DCGM_FI_PROF_PCIE_TX_BYTES", 1.0, "PCIe transmitted bytes per second."),
    "pcie_rx_bytes_s": ("DCGM_FI_PROF_PCIE_RX_BYTES", 1.0, "PCIe received bytes per second."),
    "sm_active_pct": ("DCGM_FI_PROF_SM_ACTIVE", 0.01, "Ratio of cycles an SM has a warp."),
    "tensor_active_pct": (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        0.01,
        "Ratio of cycles the tensor pipe is active.",
    ),
}
"""gpuwise sample field → (dcgm-exporter name, factor from gpuwise's unit to its unit, help)."""

OWN_FIELDS = (
    "utilization_pct",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "process_cpu_pct",
    "process_rss_bytes",
    "process_memory_bytes",
)
"""Fields exported as ``gpuwise_<field>`` (for the CPU, and those dcgm-exporter lacks)."""


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as err:
        raise MissingExtraError(
            "prometheus-client", "prometheus", "Serving metrics to Prometheus"
        ) from err
    return prometheus_client


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (a bare ``PORT`` binds 127.0.0.1).

    Raises:
        UsageError: The port is not a number from 0 to 65535.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(
            f"cannot serve Prometheus metrics on {address!r}; give HOST:PORT, "
            f"e.g. {DEFAULT_ADDRESS}"
        )
    return host, int(port)


class DeviceMetrics:
    """The latest sample of each device and step statistics, as a Prometheus collector."""

    def __init__(self, devices: list[dict[str, Any]] | None = None) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Sample] = {}
        self._devices = {str(d.get("id")): d for d in devices or []}
        self._steps: dict[str, Any] = {}

    def update(self, sample: Sample) -> None:
        """Keep ``sample`` as its device's latest (a Sampler's ``on_sample``)."""
        with self._lock:
            self._latest[sample.device] = sample

    def update_steps(self, stats: Mapping[str, Any]) -> None:
        """Keep step statistics: ``mean_s``, ``fractions``, ``mfu``, ``energy_per_step_j``."""
        with self._lock:
            self._steps = dict(stats)

    def _labels(self, device: str) -> dict[str, str]:
        if not device.startswith("gpu"):
            return {"device": device}
        info = self._devices.get(device, {})
        return {
            "gpu": device[3:],
            "UUID": str(info.get("uuid") or ""),
            "device": f"nvidia{device[3:]}",
            "modelName": str(info.get("name") or ""),
        }

    def collect(self) -> Iterator[Any]:
        """Yield the metric families (called by ``prometheus_client`` on every scrape)."""
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            latest, steps = dict(self._latest), dict(self._steps)
        families: dict[str, Any] = {}

        def put(name: str, doc: str, labels: dict[str, str], value: float) -> None:
            if name not in families:
                families[name] = GaugeMetricFamily(name, doc, labels=list(labels))
            families[name].add_metric(list(labels.values()), value)

        for device, sample in sorted(latest.items()):
            labels = self._labels(device)
            gpu = device.startswith("gpu")
            for field, value in _fields(sample, gpu=gpu):
                if gpu and field in DCGM_NAMES:
                    name, factor, doc = DCGM_NAMES[field]
                    put(name, doc, labels, value * factor)
                else:
                    put(f"gpuwise_{field}", f"gpuwise sample field {field}.", labels, value)
        yield from families.values()
        yield from _step_families(steps, GaugeMetricFamily)


def _fields(sample: Sample, *, gpu: bool) -> Iterator[tuple[str, float]]:
    names = (set(DCGM_NAMES) | {"process_memory_bytes"}) if gpu else set(OWN_FIELDS)
    for name in sorted(names):
        value = getattr(sample, name)
        if value is not None:
            yield name, float(value)


def run_step_metrics(run: Run) -> dict[str, Any]:
    """A Run's step statistics as ``DeviceMetrics.update_steps`` takes them.

    Returns:
        ``{"mean_s", "fractions", "mfu", "hfu", "tokens_per_s", "flops_per_step",
        "energy_per_step_j", "rank_mfu"}`` (``None`` where the Run has no such figure).
    """
    stats = run.step_stats()
    mfu = run.extra.get("mfu") or {}
    ranks = mfu.get("ranks") or []
    return {
        "mean_s": stats["mean_s"],
        "fractions": stats["fractions"],
        "mfu": mfu.get("mfu"),
        "hfu": mfu.get("hfu"),
        "tokens_per_s": (mfu.get("tokens") or {}).get("tokens_per_s"),
        "flops_per_step": mfu.get("model_flops_per_step"),
        "energy_per_step_j": (run.extra.get("energy") or {}).get("per_step_j"),
        "rank_mfu": {r["rank"]: r["mfu"] for r in ranks if r.get("mfu") is not None},
    }


def _step_families(steps: Mapping[str, Any], family: Any) -> Iterator[Any]:
    singles = (
        ("mean_s", "gpuwise_step_seconds", "Mean step time (seconds)."),
        ("mfu", "gpuwise_mfu", "Model FLOPs utilization (0-1)."),
        ("hfu", "gpuwise_hfu", "Hardware FLOPs utilization, recomputation included (0-1)."),
        ("tokens_per_s", "gpuwise_tokens_per_second", "Input tokens per second."),
        ("flops_per_step", "gpuwise_model_flops_per_step", "Model FLOPs of a mean step."),
        ("energy_per_step_j", "gpuwise_energy_per_step_joules", "Device energy per step."),
    )
    for key, name, doc in singles:
        if steps.get(key) is not None:
            yield family(name, doc, value=float(steps[key]))
    rank_mfu = steps.get("rank_mfu") or {}
    if rank_mfu:
        f = family("gpuwise_rank_mfu", "Model FLOPs utilization of each rank.", labels=["rank"])
        for rank, value in sorted(rank_mfu.items()):
            f.add_metric([str(rank)], float(value))
        yield f
    fractions = steps.get("fractions") or {}
    if fractions:
        f = family("gpuwise_phase_fraction", "Share of step time per phase.", labels=["phase"])
        for phase, value in fractions.items():
            f.add_metric([phase], float(value))
        yield f


class MetricsServer:
    """An HTTP endpoint serving a collector; ``close()`` stops it and its thread.

    Args:
        metrics: What to serve.
        address: ``HOST:PORT`` (default ``127.0.0.1:9400``; port 0 picks a free one).
    """

    def __init__(self, metrics: DeviceMetrics, address: str = DEFAULT_ADDRESS) -> None:
        client = _client()
        host, port = parse_address(address)
        self.registry = client.CollectorRegistry()
        self.registry.register(metrics)
        self.metrics = metrics
        try:
            self._server, self._thread = client.start_http_server(
                port, addr=host, registry=self.registry
            )
        except OSError as err:
            raise UsageError(
                f"cannot serve Prometheus metrics on {host}:{port}: {err.strerror}; "
                "choose another port"
            ) from err
        self.host, self.port = self._server.server_address[:2]

    def close(self) -> None:
        """Stop serving and wait for the server thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class DeviceExporter:
    """A Sampler feeding a MetricsServer: ``gpuwise monitor/profile --prometheus``."""

    def __init__(self, sampler: Any, server: MetricsServer) -> None:
        self.sampler = sampler
        self.server = server

    def close(self) -> None:
        """Stop the sampler and the server."""
        self.sampler.stop()
        self.server.close()


def serve_device_metrics(
    address: str = DEFAULT_ADDRESS, *, interval_s: float = 0.5, backends: Any = None
) -> DeviceExporter:
    """Sample the devices every ``interval_s`` and serve the latest readings for Prometheus.

    Args:
        address: ``HOST:PORT`` to bind (default ``127.0.0.1:9400``).
        interval_s: Seconds between samples.
        backends: Telemetry backends (default: NVML, else the host CPU).

    Returns:
        The running exporter; call ``close()`` to stop it.

    Raises:
        MissingExtraError: ``prometheus-client`` is not installed (``gpuwise[prometheus]``).
        UsageError: The address is malformed or taken.

    Example:
        >>> exporter = serve_device_metrics("127.0.0.1:9400")  # doctest: +SKIP
        >>> exporter.close()  # doctest: +SKIP
    """
    from gpuwise.telemetry.sampler import MonitorConfig, Sampler

    _client()
    sampler = Sampler(MonitorConfig(interval_s=interval_s), backends)
    metrics = DeviceMetrics(sampler.devices())
    sampler.on_sample = metrics.update
    try:
        server = MetricsServer(metrics, address)
    except BaseException:
        sampler.stop()
        raise
    sampler.start()
    return DeviceExporter(sampler, server)
