"""gpuwise inside Lightning: ``Trainer(callbacks=[GpuwiseCallback()])`` (``gpuwise[lightning]``).

Lightning's training-batch hooks mark each step (see ``gpuwise.integrations.recorder``);
devices are sampled alongside. At fit end the callback holds a diagnosed Run
(``callback.run``), writes the asked-for report files, and logs the phase fractions, step
time, MFU and energy per step to every logger of the Trainer. When training raises, the
callback stops sampling and writes the partial Run (``extra["interrupted"]``). Works with
the ``lightning`` package and with ``pytorch_lightning``.
"""

from __future__ import annotations

from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.integrations.recorder import CallbackCore, callback_class


def _callback_base() -> type:
    try:
        from lightning.pytorch.callbacks import Callback  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            from pytorch_lightning.callbacks import Callback  # type: ignore[assignment,unused-ignore]
        except ImportError as err:
            raise MissingExtraError(
                "pytorch-lightning", "lightning", "The Lightning callback"
            ) from err
    return Callback  # type: ignore[no-any-return]


def batch_size_of(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (``None`` if none)."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        for item in batch:
            size = batch_size_of(item)
            if size is not None:
                return size
    return None


class _LightningCore(CallbackCore):
    """The callback's behaviour; mixed with Lightning's ``Callback`` when first built."""

    source = "lightning"

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Start sampling."""
        self._start()

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """The batch has arrived: compute starts."""
        self._begin()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """The optimizer step is done."""
        self._end(batch_size_of(batch), rank=int(trainer.global_rank), model=pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training raised (Ctrl-C too): stop sampling, write the partial report."""
        self._fail(exception)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """Build the Run, write the reports, log the numbers to the Trainer's loggers."""
        metrics = self._finish()
        if metrics is not None:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)


def __getattr__(name: str) -> Any:
    """Build ``GpuwiseCallback`` on first use, so that importing this module needs no Lightning."""
    if name != "GpuwiseCallback":
        raise AttributeError(name)
    cls = callback_class(__name__, _LightningCore, _callback_base(), _DOC)
    globals()["GpuwiseCallback"] = cls
    return cls


_DOC = """A Lightning callback: steps, data waits and device metrics become a gpuwise Run.

Args:
    interval_s: Seconds between device samples (default 0.5).
    flops_per_sample: Training FLOPs of one sample, for MFU; default: counted on the first
        training batch as it runs (forward, backward, recomputation).
    precision: The run's precision, for the peak FLOP/s (default ``fp32``).
    json_path: Also write the Run as JSON here at fit end.
    html_path: Also write the HTML report here at fit end.
    backends: Telemetry backends (default: NVML, else the host CPU).

Attributes:
    run: The diagnosed Run, after fit end.

Raises:
    MissingExtraError: Lightning is not installed (``pip install 'gpuwise[lightning]'``).

Example:
    >>> from gpuwise.integrations.lightning import GpuwiseCallback
    >>> callback = GpuwiseCallback(flops_per_sample=6 * 25e6)  # doctest: +SKIP
    >>> Trainer(callbacks=[callback]).fit(model, loader)  # doctest: +SKIP
    >>> callback.run.findings[0].kind  # doctest: +SKIP
    'input_bound'
"""
