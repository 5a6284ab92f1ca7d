"""Construction-time capture and one trial's overrides inside a profiled process.

Note: the trial protocol.

- ``bootstrap.py`` reads the handshake (``GPUWISE_TRIAL``, a JSON object) and calls ``arm`` once
  torch is imported, after the step hooks are installed. Without a trial, ``arm`` only
  records what the job builds (``setup_capture.JobSetup``).
- The overrides apply where the object is built, so the user's script stays unmodified:
  ``loader`` keyword arguments of every ``DataLoader`` (``persistent_workers`` and
  ``prefetch_factor`` only where the loader has workers); ``optimizer`` flags (``foreach``
  or ``fused``) for each class named in ``optimizer_flags`` (or the one ``optimizer_class``;
  ``records.trial_spec``), only where the user did not pass the flag and that class accepts
  it — the algorithm never changes; ``torch_threads``,
  ``cudnn_benchmark`` and ``tf32`` once at start; ``autocast``, ``channels_last`` and
  ``compile`` around the outermost module call (these change what is computed; the runner
  sends them only when the user allowed it).
- ``stop_after_steps``: once that many steps are written the job ends with ``SystemExit(0)``,
  raised from the hook whose event closed the last one (a batch request, an optimizer step
  or the end of a ``backward()``), so its ``finally`` blocks and ``atexit`` handlers run and
  the step files are complete. Steps are the step protocol's (``steps``), so a job
  that never steps a ``torch.optim`` optimizer (manual updates, a custom optimizer, an
  evaluation or inference loop over a DataLoader) ends on time too: training steps are
  counted once the job trained, evaluation steps until then.
- ``losses``: the first that many ``backward()`` calls record the value of the tensor
  ``backward()`` was called on (one host read each, inside the warm-up).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import threading
from typing import Any

import torch

from gpuwise.profiling import batch_probe
from gpuwise.profiling.setup_capture import JobSetup
from gpuwise.records.trial_spec import optimizer_flags

LOSS_STEPS = 5
"""Losses recorded per run when the trial spec does not say: the first five steps."""


class _Armed:
    setup: JobSetup | None = None
    spec: dict[str, Any] = {}  # noqa: RUF012 - one trial per process
    steps = 0
    depth = threading.local()


def parse_spec(text: str | None) -> dict[str, Any]:
    """The trial spec of the handshake variable (``{}`` when absent or not a JSON object)."""
    if not text:
        return {}
    with contextlib.suppress(ValueError):
        spec = json.loads(text)
        if isinstance(spec, dict):
            return spec
    return {}


def arm(directory: str | None, spec_text: str | None, recorder: Any = None) -> JobSetup:
    """Patch construction of loaders and optimizers in this process; apply the trial spec.

    Args:
        directory: The profile directory (``setup-<pid>.json`` goes there).
        spec_text: The ``GPUWISE_TRIAL`` handshake (a JSON object), or ``None``.
        recorder: The process's step recorder (``steps.files``): ``stop_after_steps``
            counts the steps it writes.

    Returns:
        The process's setup record.
    """
    if _Armed.setup is not None:
        return _Armed.setup
    spec = parse_spec(spec_text)
    _Armed.spec = spec
    _Armed.setup = JobSetup(directory, spec.get("name"))
    batch_probe.listen(_Armed.setup.batch_seen)
    _patch_loader()
    _patch_process_start()
    _patch_optimizers(optimizer_flags(spec))
    _patch_backward(int(spec.get("losses", LOSS_STEPS)))
    _apply_globals(spec)
    if spec.get("autocast") or spec.get("channels_last") or spec.get("compile"):
        _patch_forward(spec)
    if spec.get("stop_after_steps") and recorder is not None:
        stop_after_steps(recorder, int(spec["stop_after_steps"]))
    return _Armed.setup


def _apply_globals(spec: dict[str, Any]) -> None:
    if spec.get("torch_threads"):
        torch.set_num_threads(int(spec["torch_threads"]))
    if spec.get("cudnn_benchmark"):
        torch.backends.cudnn.benchmark = True
    if spec.get("tf32"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def stop_after_steps(recorder: Any, limit: int) -> None:
    """End the process once ``recorder`` has written ``limit`` steps (the protocol note).

    Wraps the writer the recorder's copy resolver passes steps to: the step is written
    first, then ``SystemExit(0)`` is raised once. Steps the tracker holds back for the job's
    first optimizer step count as written (a loop that updates by hand has none to wait
    for; an accumulation loop's are joined into one as that step comes). Steps written
    while the recorder closes (held steps flushed at exit) never raise.
    """
    resolver = recorder._resolver
    write = resolver.write
    close = recorder.close
    counts = {"train": 0, "eval": 0, "done": 0}
    tracker = recorder.tracker

    def _write(step: Any, gpu_s: Any) -> None:
        write(step, gpu_s)
        counts["train" if step.phase == "train" else "eval"] += 1
        _check()

    def _check() -> None:  # steps held back for the first optimizer step count as written
        trained = counts["train"] > 0 or tracker.trained
        done = counts["train"] + len(tracker.hold.held) if trained else counts["eval"]
        if counts["done"] or done < limit:
            return
        counts["done"] = 1
        if _Armed.setup is not None:
            _Armed.setup.doc["stopped_after_steps"] = limit
            _Armed.setup.write()
        raise SystemExit(0)

    def _close() -> None:
        counts["done"] = 1
        close()

    resolver.write = _write
    tracker.on_closed = _check
    recorder.close = _close


def loader_kwargs(bound: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``bound`` (a DataLoader's arguments by name) with the trial's loader overrides.

    ``persistent_workers`` and ``prefetch_factor`` are set only where the loader ends up with
    worker processes (PyTorch refuses them otherwise); ``batch_sampler`` loaders keep their
    batch settings.
    """
    out = dict(bound)
    out.update({k: v for k, v in overrides.items() if k in ("num_workers", "pin_memory")})
    if int(out.get("num_workers") or 0) > 0:
        for key in ("persistent_workers", "prefetch_factor"):
            if key in overrides:
                out[key] = overrides[key]
    return out


def _patch_loader() -> None:
    from torch.utils.data import DataLoader

    original = DataLoader.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        overrides = _Armed.spec.get("loader")
        if overrides:
            with contextlib.suppress(TypeError):  # a call PyTorch will refuse: leave it be
                bound = signature.bind(self, *args, **kwargs).arguments
                bound.pop("self", None)
                args, kwargs = (), loader_kwargs(dict(bound), overrides)
        original(self, *args, **kwargs)
        if _Armed.setup is not None:
            _Armed.setup.loader_built(self)

    DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _patch_process_start() -> None:
    """Record where the job's code starts processes (trainers of a hogwild job, servers)."""
    from multiprocessing import process

    original = process.BaseProcess.start

    @functools.wraps(original)
    def start(self: Any) -> None:
        if _Armed.setup is not None:
            with contextlib.suppress(Exception):  # recording never breaks the user's start
                _Armed.setup.process_started(self)
        original(self)

    process.BaseProcess.start = start  # type: ignore[method-assign]


def optimizer_classes() -> list[type]:
    """The optimizer classes of ``torch.optim`` (``SGD``, ``Adam``, ...)."""
    from torch.optim.optimizer import Optimizer

    return [
        c
        for c in vars(torch.optim).values()
        if isinstance(c, type) and issubclass(c, Optimizer) and c is not Optimizer
    ]


def _patch_optimizers(flags_by_class: dict[str, dict[str, Any]]) -> None:
    from torch.optim.optimizer import Optimizer

    for cls in optimizer_classes():
        _wrap_optimizer(cls, flags_by_class)
    # an optimizer of another library (bitsandbytes' AdamW) reaches only the base class:
    # recorded, so the job's optimizer is named, but never given PyTorch's flags
    _wrap_optimizer(Optimizer, {})


def _wrap_optimizer(cls: type, flags_by_class: dict[str, dict[str, Any]]) -> None:
    """Wrap ``cls.__init__``: the outermost call injects the flags and records the result.

    ``AdamW.__init__`` calls ``Adam.__init__``, and a user's subclass calls its torch base:
    only the outermost wrapped call (per thread) acts, with ``type(self)`` the class the
    user built.
    """
    original = vars(cls)["__init__"]
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        depth = getattr(_Armed.depth, "opt", 0)
        flags = flags_by_class.get(type(self).__name__)
        if depth == 0 and flags:
            kwargs.update(_unset_flags(signature, flags, self, args, kwargs))
        _Armed.depth.opt = depth + 1
        try:
            original(self, *args, **kwargs)
        finally:
            _Armed.depth.opt = depth
        if depth == 0 and _Armed.setup is not None:
            _Armed.setup.optimizer_built(self)

    cls.__init__ = __init__  # type: ignore[misc]


def _unset_flags(signature: inspect.Signature, flags: dict[str, Any], *call: Any) -> dict[str, Any]:
    """The flags this class accepts that the user's call left unset (``None``)."""
    self, args, kwargs = call
    try:
        given = signature.bind_partial(self, *args, **kwargs).arguments
    except TypeError:
        return {}
    unset = {k: v for k, v in flags.items() if k in signature.parameters and given.get(k) is None}
    if "fused" in unset and given.get("foreach"):
        unset.pop("fused")  # PyTorch refuses both; the user chose foreach
    return unset


def _patch_backward(count: int) -> None:
    original = torch.Tensor.backward

    @functools.wraps(original)
    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        setup = _Armed.setup
        if setup is not None and len(setup.doc["losses"]) < count and self.numel() == 1:
            setup.loss_seen(float(self.detach().float()))  # a host read, inside the warm-up
            setup.backward_seen()  # fabric.backward(loss), accelerator.backward(loss)
            setup.write()
        return original(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    torch.Tensor.backward = backward  # type: ignore[method-assign]


def _patch_forward(spec: dict[str, Any]) -> None:
    """Autocast, channels-last and compile around the outermost module call."""
    original = torch.nn.Module.__call__
    prepared: set[int] = set()

    @functools.wraps(original)
    def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_Armed.depth, "n", 0)
        if depth:
            return original(self, *args, **kwargs)
        if id(self) not in prepared:
            prepared.add(id(self))
            _prepare(self, spec)
        if spec.get("channels_last"):
            args = tuple(_channels_last(a) for a in args)
        _Armed.depth.n = 1
        try:
            with _autocast(spec, args):
                return original(self, *args, **kwargs)
        finally:
            _Armed.depth.n = 0

    torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]


def _prepare(module: torch.nn.Module, spec: dict[str, Any]) -> None:
    if spec.get("channels_last"):
        module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if spec.get("compile"):
        module.forward = _timed_first_call(torch.compile(module.forward))  # type: ignore[method-assign]


def _timed_first_call(fn: Any) -> Any:
    """``fn`` whose first call's duration (the compile, mostly) goes to ``compile_s``."""
    import time

    first = [True]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not first[0]:
            return fn(*args, **kwargs)
        first[0] = False
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if _Armed.setup is not None:
                _Armed.setup.doc["compile_s"] = time.perf_counter() - t0
                _Armed.setup.write()

    return call


def _channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value


def _autocast(spec: dict[str, Any], args: tuple[Any, ...]) -> Any:
    dtype_name = spec.get("autocast")
    if not dtype_name:
        return contextlib.nullcontext()
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    return torch.autocast(device, dtype=getattr(torch, str(dtype_name)))
