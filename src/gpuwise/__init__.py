"""gpuwise: keep deep-learning jobs' GPUs busy, and prove it.

The public API is re-exported here and imported lazily, so that ``import gpuwise`` stays
cheap (it runs in every process of a profiled job).

Example:
    >>> import gpuwise
    >>> gpuwise.__version__
    '0.1.0'
"""

from __future__ import annotations

from gpuwise._lazy import lazy_exports
from gpuwise._version import __version__ as __version__

_EXPORTS = {
    "AdviceRow": "gpuwise.sizing.advice.advisor",
    "DevicePrefetcher": "gpuwise.data.prefetch",
    "DeviceTransform": "gpuwise.data.transforms",
    "FakeGpu": "gpuwise.telemetry.fake",
    "FakeNvml": "gpuwise.telemetry.fake",
    "Finding": "gpuwise.records",
    "Fix": "gpuwise.records",
    "GpuwiseError": "gpuwise.errors",
    "Loader": "gpuwise.data.loader",
    "LogRead": "gpuwise.telemetry.readers.nvsmi",
    "MemoryEstimate": "gpuwise.sizing.memory.result",
    "MonitorConfig": "gpuwise.telemetry.sampler",
    "PackConfig": "gpuwise.data.pack",
    "Pipeline": "gpuwise.pipeline.core",
    "Run": "gpuwise.records",
    "Sample": "gpuwise.records",
    "Sampler": "gpuwise.telemetry.sampler",
    "Step": "gpuwise.records",
    "TuneResult": "gpuwise.sizing.advice.tune",
    "advise": "gpuwise.sizing.advice.advisor",
    "analyze": "gpuwise.diagnose.analyze",
    "compare_files": "gpuwise.diagnose.compare",
    "compare_precision": "gpuwise.sizing.advice.bf16_check",
    "compare_runs": "gpuwise.diagnose.compare",
    "cross_rank": "gpuwise.distributed.aggregate",
    "diagnose": "gpuwise.diagnose.rules",
    "estimate": "gpuwise.sizing.memory.estimate",
    "export_scalars": "gpuwise.integrations.scalars",
    "find_batch_size": "gpuwise.sizing.advice.tune",
    "fit_measured": "gpuwise.integrations.ray",
    "open_store": "gpuwise.data.store.read",
    "pack": "gpuwise.data.pack",
    "profile": "gpuwise.session",
    "read_log": "gpuwise.telemetry.readers.nvsmi",
    "read_trace": "gpuwise.telemetry.readers.kineto",
    "render_run": "gpuwise.report.text.run",
    "summarize": "gpuwise.telemetry.summary",
    "watch": "gpuwise.session",
    "write_html": "gpuwise.report.html.run",
    "write_trace": "gpuwise.report.trace",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
