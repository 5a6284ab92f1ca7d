"""The FLOPs of the user's model, counted on the job's own first iteration.

A recording counts one iteration of the training loop with a ``FlopTally`` and writes what
it counted as one ``flops`` record (``write_record`` of the recorder), which the report turns
into MFU. No extra step runs and the batch is the job's own: the count is exact for what
ran (the loss, activation checkpointing's recomputation, the autocast precision).

Counting window protocol (``FirstIterationFlops`` rides on the LoopTracker's events; the
step protocol in ``steps`` says where those come from):

* The window opens at the first outermost module call (``forward``) of the tracker's
  thread while no batch is awaited. The modules called outermost in the window are the
  models (their parameters give ``N``; the first one's first tensor argument gives the
  samples when no loader is seen).
* It closes at the first of: the optimizer step's end; the next batch request; a new
  outermost module call after a ``backward()`` (the next micro-step, or a loop that
  updates weights by hand); the first model called again under ``no_grad`` with no
  ``backward()`` between (inference without a loader); the recording's end. A model called
  again with gradients before any ``backward()`` (an episode's forwards) stays in the
  window: its FLOPs and samples add up to the whole step's. One micro-step is counted, so FLOPs per
  sample hold under gradient accumulation.
* A window without a ``backward()`` is an ``eval`` count; the next iteration with grad
  mode on is then counted too (up to ``MAX_WINDOWS``), so a job that evaluates (under
  ``no_grad``) before it trains still gets its training count.
* Only the window's iteration is slowed (each aten op passes through Python once): with a
  loader that is step 0, which the report leaves out as warm-up once every rank ran at
  least four steps; without a loader it is the iteration before step 0. Outside the window
  the tracker's own methods run, unwrapped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from gpuwise.profiling.flop_tally import FlopTally

log = logging.getLogger(__name__)

MAX_WINDOWS = 2
"""Iterations counted at most: an ``eval`` one, then the training one."""

_WRAPPED = (
    "region_entered",
    "region_exited",
    "optimizer_stepped",
    "batch_requested",
    "batch_ready",
)

Write = Callable[[dict[str, Any]], None]


class FirstIterationFlops:
    """Count one iteration's FLOPs on ``tracker``'s events (see the window protocol).

    Args:
        tracker: The recording's LoopTracker.
        write: Receives each finished count as a ``flops`` record.
        rank: The process's distributed rank, written into the record.
    """

    def __init__(self, tracker: Any, write: Write, rank: int = 0) -> None:
        self.tracker = tracker
        self.write = write
        self.rank = rank
        self.records: list[dict[str, Any]] = []
        self._tally: FlopTally | None = None
        self._models: list[Any] = []
        self._inputs: Any = None
        self._samples = 0  # leading dims of the first model's calls in the window
        self._outermost = False
        self._hook: Any = None
        self._backward = False
        self._batch_size: int | None = None
        self._windows = 0
        self._attached = False

    def attach(self) -> FirstIterationFlops:
        """Wrap the tracker's event methods until the count is done."""
        for name in _WRAPPED:
            setattr(
                self.tracker, name, _chain(getattr(self, f"_{name}"), getattr(self.tracker, name))
            )
        self._attached = True
        return self

    def detach(self) -> None:
        """Close an open window and give the tracker its own methods back."""
        self._close()
        if self._attached:
            for name in _WRAPPED:
                vars(self.tracker).pop(name, None)
            self._attached = False

    def _region_entered(self, region: str, **_: Any) -> None:
        if region != "forward":
            return
        if self._tally is not None and self._backward:
            self._close()
        idle = self._tally is None and not self.tracker.waiting
        if idle and self._attached and self._may_train():  # closing may have detached it
            self._open()
        self._outermost = self._tally is not None  # the next module call is a model

    def _may_train(self) -> bool:
        """After an ``eval`` count, forwards under ``no_grad`` are not counted again."""
        return not self.records or torch.is_grad_enabled()

    def _region_exited(self, region: str) -> None:
        if region == "backward" and self._tally is not None:
            self._backward = True

    def _optimizer_stepped(self, optimizer: Any = None) -> None:
        self._close()

    def _batch_requested(self) -> None:
        self._close()

    def _batch_ready(self, batch_size: int | None = None) -> None:
        self._batch_size = batch_size

    def _open(self) -> None:
        self._windows += 1
        self._backward = False
        self._models, self._inputs, self._samples = [], None, 0
        self._hook = torch.nn.modules.module.register_module_forward_pre_hook(self._see_model)
        self._tally = enter_tally()

    def _see_model(self, module: Any, args: Any) -> None:
        """Keep each outermost module called in the window: the models (and the loss)."""
        if not self._outermost:
            return
        self._outermost = False
        again = self._models and module is self._models[0] and not self._backward
        recomputing = torch._C._current_graph_task_id() != -1
        if again and not recomputing and not torch.is_grad_enabled():
            self._close()  # the model again with no backward between: the next inference
            return
        if not any(module is seen for seen in self._models):
            self._models.append(module)
        if self._inputs is None:
            self._inputs = args
        if module is self._models[0] and not recomputing:  # an episode calls it many times
            self._samples += _leading_dim(args) or 0

    def _close(self) -> None:
        tally, self._tally = self._tally, None
        if tally is None:
            return
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        exit_tally(tally)
        samples = self._batch_size if self.tracker.loader_seen else None
        if samples is None:
            samples = self._samples or _leading_dim(self._inputs)
        phase = "train" if self._backward else "eval"
        record = flops_record(
            tally, rank=self.rank, phase=phase, samples=samples, models=self._models
        )
        self._models, self._inputs = [], None
        if record is not None:
            self.records.append(record)
            self.write(record)
        if self._backward or self._windows >= MAX_WINDOWS:
            self.detach()


def enter_tally() -> FlopTally:
    """Start counting this thread's ops (the window opens)."""
    tally = FlopTally()
    tally.__enter__()  # type: ignore[no-untyped-call]
    return tally


def exit_tally(tally: FlopTally) -> None:
    """Stop counting: leave the mode, or let it pass through when another mode sits above it."""
    if _get_current_dispatch_mode() is tally:
        tally.__exit__(None, None, None)  # type: ignore[no-untyped-call]
    else:  # another mode was entered after it and is still open: stop counting only
        tally.passthrough = True
        log.debug("gpuwise: the FLOP count's mode is not on top; it passes through now")


def flops_record(
    tally: FlopTally, *, rank: int, phase: str, samples: int | None, models: Sequence[Any]
) -> dict[str, Any] | None:
    """The ``flops`` record of a finished window (``None`` when it counted nothing).

    Args:
        tally: The window's tally.
        rank: The process's distributed rank.
        phase: ``"train"`` (a backward ran) or ``"eval"``.
        samples: Samples the window's FLOPs were for, when known.
        models: The modules called at the top level in the window (the model, several for
            a GAN, the loss): their parameters give ``N``.
    """
    if not tally.hardware_flops:
        return None
    return {
        "type": "flops",
        "rank": rank,
        "phase": phase,
        "samples": samples,
        "model_flops": tally.model_flops,
        "hardware_flops": tally.hardware_flops,
        "forward_flops": tally.forward_flops,
        "backward_flops": tally.backward_flops,
        "recompute_flops": tally.recompute_flops,
        "flops_by_precision": dict(tally.by_precision),
        "precision": tally.precision,
        "device": tally.device,
        "failed_ops": tally.failures,
        **model_facts(models, tally),
    }


def count_model_flops(recorder: Any) -> FirstIterationFlops:
    """Count the first iteration's FLOPs into ``recorder``.

    Args:
        recorder: A MemoryRecorder or JsonlRecorder: its ``tracker`` gives the events, its
            ``write_record`` takes the ``flops`` record.
    """
    return FirstIterationFlops(recorder.tracker, recorder.write_record, recorder.rank).attach()


def _chain(first: Callable[..., None], then: Callable[..., Any]) -> Callable[..., Any]:
    """Call ``first`` (never raising into the user's loop), then the tracker's own method."""

    def both(*args: Any, **kwargs: Any) -> Any:
        try:
            first(*args, **kwargs)
        except Exception as err:  # counting FLOPs must never break the user's script
            log.debug("gpuwise: FLOP count failed: %r", err)
        return then(*args, **kwargs)

    return both


def _leading_dim(inputs: Any) -> int | None:
    for item in inputs or ():
        if isinstance(item, torch.Tensor) and item.dim() > 0:
            return int(item.shape[0])
    return None


def model_facts(models: Sequence[Any], tally: FlopTally) -> dict[str, Any]:
    """The model's parameter count and, for token-id inputs, the LLM-formula terms.

    Args:
        models: The outermost modules called in the window (none when not seen).
        tally: The window's tally (token ids and attention calls).

    Returns:
        ``{"params", "params_dtype", "tokens"}``; ``params`` is ``N`` of ``6·N·tokens``:
        the unique parameters less the embedding tables that no linear layer shares (a
        tied output layer counts, a position table does not), as in nanoGPT's
        ``estimate_mfu``; ``tokens`` is ``None`` unless the inputs were 2-D integer ids.
    """
    modules = [m for m in models if isinstance(m, torch.nn.Module)]
    params = matmul_params(modules) if modules else None
    first = next((p for m in modules for p in m.parameters()), None)
    tokens = None
    if tally.tokens is not None:
        batch, seq_len = tally.tokens
        layers = [shape for shape in tally.attention if shape[0] == batch]
        tokens = {
            "batch": batch,
            "seq_len": seq_len,
            "layers": len(layers),
            "width": layers[0][1] * layers[0][3] if layers else 0,
            "attention_seq_len": layers[0][2] if layers else seq_len,
            "attention_from": "kernels" if layers else None,
        }
        if not layers:
            tokens.update(_config_attention(modules))
    return {
        "params": params,
        "params_dtype": None if first is None else str(first.dtype).removeprefix("torch."),
        "tokens": tokens,
    }


def _config_attention(models: Sequence[Any]) -> dict[str, Any]:
    """Layers and width from a Hugging Face config, when attention ran as plain products.

    (On a CPU, or with a mask some kernels refuse, ``scaled_dot_product_attention`` runs its
    math form: batched products the tally cannot tell from other products.)
    """
    for model in models:
        config = getattr(model, "config", None)
        layers = getattr(config, "num_hidden_layers", None)
        width = getattr(config, "hidden_size", None)
        if isinstance(layers, int) and isinstance(width, int):
            return {"layers": layers, "width": width, "attention_from": "config"}
    return {}


def matmul_params(models: Sequence[torch.nn.Module]) -> int:
    """Unique parameters of ``models`` less embedding tables not shared with a linear layer."""
    modules = [m for model in models for m in model.modules()]
    linear = {id(m.weight) for m in modules if isinstance(m, torch.nn.Linear)}
    tables = {
        id(m.weight)
        for m in modules
        if isinstance(m, torch.nn.Embedding) and id(m.weight) not in linear
    }
    params = {id(p): p for model in models for p in model.parameters()}
    return sum(p.numel() for key, p in params.items() if key not in tables)
