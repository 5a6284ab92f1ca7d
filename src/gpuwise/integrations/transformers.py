"""gpuwise inside the Hugging Face ``Trainer``: ``callbacks=[GpuwiseCallback()]``.

Needs ``gpuwise[hf]``. The Trainer's ``on_step_begin`` (the step's batches have
been fetched) and ``on_step_end`` (the optimizer stepped) mark each optimizer step; the
time between one step's end and the next one's begin is the data wait, and includes the
Trainer's own logging, saving and evaluation between steps. Samples per step are
``per_device_train_batch_size * gradient_accumulation_steps``. At the end of training the
callback holds a diagnosed Run (``callback.run``), writes the asked-for report files, and
appends the gpuwise numbers to ``state.log_history``.
"""

from __future__ import annotations

from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.integrations.recorder import CallbackCore, callback_class


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as err:
        raise MissingExtraError("transformers", "hf", "The Hugging Face Trainer callback") from err
    return TrainerCallback  # type: ignore[no-any-return]


class _TrainerCore(CallbackCore):
    """The callback's behaviour; mixed with ``TrainerCallback`` when first built."""

    source = "transformers"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start sampling."""
        self._start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The step's batches are here: compute starts."""
        self._begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer stepped."""
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self._end(samples, rank=int(args.process_index), model=kwargs.get("model"))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Build the Run, write the reports, add the numbers to the log history."""
        metrics = self._finish()
        if metrics is not None:
            state.log_history.append({**metrics, "step": state.global_step})


def __getattr__(name: str) -> Any:
    """Build ``GpuwiseCallback`` on first use: importing this module needs no transformers."""
    if name != "GpuwiseCallback":
        raise AttributeError(name)
    cls = callback_class(__name__, _TrainerCore, _callback_base(), _DOC)
    globals()["GpuwiseCallback"] = cls
    return cls


_DOC = """A Hugging Face Trainer callback: steps and device metrics become a gpuwise Run.

Args:
    interval_s: Seconds between device samples (default 0.5).
    flops_per_sample: Training FLOPs of one sample, for MFU; default: counted on the first
        optimizer step as it runs (every micro-batch of it, recomputation included).
    precision: The run's precision, for the peak FLOP/s (default ``fp32``).
    json_path: Also write the Run as JSON here at the end of training.
    html_path: Also write the HTML report here.
    backends: Telemetry backends (default: NVML, else the host CPU).

Attributes:
    run: The diagnosed Run, after training.

Raises:
    MissingExtraError: transformers is not installed (``pip install 'gpuwise[hf]'``).

Example:
    >>> from gpuwise.integrations.transformers import GpuwiseCallback
    >>> callback = GpuwiseCallback()
    >>> Trainer(model, args, train_dataset=data, callbacks=[callback]).train()  # doctest: +SKIP
    >>> callback.run.step_stats()["fractions"]  # doctest: +SKIP
"""
