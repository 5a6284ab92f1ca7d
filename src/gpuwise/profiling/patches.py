"""The torch patches behind the step hooks (see the hook protocol in ``hooks.py``).

Each patched function asks ``get_tracker()`` for the LoopTracker that receives events and
passes straight through when there is none, so an installed patch costs one call when no
profile is active. ``apply()`` returns a ``Patches`` object whose ``remove()`` restores
everything.
"""

from __future__ import annotations

import contextlib
import functools
import os
import types
from collections.abc import Callable
from typing import Any

import torch

from gpuwise.profiling import batch_probe

Tracker = Callable[[], Any]

_WRAPPED = "__gpuwise_wrapped__"


class Patches:
    """What ``apply()`` changed, so that ``remove()`` can restore it."""

    def __init__(self, get_tracker: Tracker | None = None) -> None:
        self._restore: list[Callable[[], None]] = []
        self.get_tracker = get_tracker

    def set(self, owner: Any, name: str, value: Any) -> None:
        """Replace ``owner.name`` by ``value``, remembering how to undo it."""
        own = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, value)
        if own:
            self._restore.append(lambda: setattr(owner, name, old))
        else:
            self._restore.append(lambda: delattr(owner, name))

    def add(self, undo: Callable[[], None]) -> None:
        """Remember one more undo action (a hook handle's ``remove``)."""
        self._restore.append(undo)

    def time_loader(self, owner: Any) -> None:
        """Time ``owner``'s iteration as a batch source (its iterator's ``__next__``)."""
        if self.get_tracker is not None:
            wrapper = _iter_wrapper(owner.__iter__, self, self.get_tracker, None)
            self.set(owner, "__iter__", wrapper)

    def remove(self) -> None:
        """Undo every patch, newest first."""
        while self._restore:
            self._restore.pop()()


def apply(get_tracker: Tracker, worker_env: str) -> Patches:
    """Patch DataLoader iteration, optimizer steps and (CUDA builds) host-to-device copies.

    Other batch sources (gpuwise's own loaders) are added with ``Patches.time_loader``.

    Args:
        get_tracker: Returns the LoopTracker to signal, or None to pass through.
        worker_env: Environment variable set while DataLoader workers start.

    Returns:
        The applied patches.
    """
    from torch.utils.data import DataLoader

    patches = Patches(get_tracker)
    timed_iter = _iter_wrapper(DataLoader.__iter__, patches, get_tracker, worker_env)
    patches.set(DataLoader, "__iter__", timed_iter)

    _patch_regions(patches, get_tracker)
    if torch.version.cuda is not None:  # a CPU build cannot copy to a GPU
        patches.set(torch.Tensor, "to", _copy_wrapper(torch.Tensor.to, get_tracker, _to_target))
        patches.set(
            torch.Tensor, "cuda", _copy_wrapper(torch.Tensor.cuda, get_tracker, _cuda_target)
        )
    return patches


def _patch_regions(patches: Patches, get_tracker: Tracker) -> None:
    """Forward (outermost ``Module.__call__``), backward and optimizer-step regions."""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    def stepping(optimizer: Any, args: Any, kwargs: Any) -> None:
        tracker = get_tracker()
        if tracker is not None:
            tracker.region_entered("optimizer")

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        tracker = get_tracker()
        if tracker is not None:
            tracker.region_exited("optimizer")
            tracker.optimizer_stepped(optimizer)

    patches.add(register_optimizer_step_pre_hook(stepping).remove)
    patches.add(register_optimizer_step_post_hook(stepped).remove)
    patches.set(
        torch.nn.Module, "__call__", _forward_wrapper(torch.nn.Module.__call__, get_tracker)
    )
    _patch_own_forwards(patches, get_tracker)
    backward = _region_wrapper(torch.autograd.backward, get_tracker, "backward")
    patches.set(torch.autograd, "backward", backward)
    tensor_backward = _region_wrapper(torch.Tensor.backward, get_tracker, "backward")
    patches.set(torch.Tensor, "backward", tensor_backward)


class _Depth:
    """Region calls open now, per region name: only the outermost call is timed."""

    open: dict[str, int] = {"forward": 0, "backward": 0}  # noqa: RUF012 - shared on purpose


def _region_wrapper(original: Any, get_tracker: Tracker, region: str) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _Depth.open[region]:
            return original(*args, **kwargs)
        tracker = get_tracker()
        if tracker is None:
            return original(*args, **kwargs)
        _Depth.open[region] = 1
        tracker.region_entered(region)
        try:
            return original(*args, **kwargs)
        finally:
            _Depth.open[region] = 0
            tracker.region_exited(region)

    return wrapper


def _forward_wrapper(original: Any, get_tracker: Tracker) -> Any:
    """The outermost module call is the ``forward`` region; it says whether it evaluates."""

    @functools.wraps(original)
    def wrapper(module: Any, *args: Any, **kwargs: Any) -> Any:
        if _Depth.open["forward"]:
            return original(module, *args, **kwargs)
        return _forward_region(original, get_tracker, module, args, kwargs)

    return wrapper


def _forward_region(
    original: Any, get_tracker: Tracker, module: Any, args: Any, kwargs: Any
) -> Any:
    """Run ``original(module, ...)`` as the outermost ``forward`` region (when profiling)."""
    tracker = get_tracker()
    if tracker is None:
        return original(module, *args, **kwargs)
    _Depth.open["forward"] = 1
    tracker.region_entered("forward", evaluating=evaluating(module), model=module)
    try:
        return original(module, *args, **kwargs)
    finally:
        _Depth.open["forward"] = 0
        tracker.region_exited("forward")


def _patch_own_forwards(patches: Patches, get_tracker: Tracker) -> None:
    """Time ``self.forward(x)`` too: the ``forward`` of every module class outside torch.

    A module called as ``self.forward(x)`` (layer-local training, some research code)
    bypasses ``Module.__call__``; its forward time would land in no region. The job's own
    classes (defined before the patch, as the explicit API sees them, or after it, as a
    profiled script defines them: ``__init_subclass__``) get their ``forward`` wrapped; a
    call through ``Module.__call__`` is already inside the region and passes straight on.
    torch's own classes are left alone: they are called through ``__call__``.
    """

    def wrap(cls: Any) -> None:
        own = vars(cls).get("forward")
        plain = isinstance(own, types.FunctionType)  # not a staticmethod, partial or builtin
        if plain and not getattr(own, _WRAPPED, False) and _outside_torch(cls):
            patches.set(cls, "forward", _method_forward_wrapper(own, get_tracker))

    pending = list(torch.nn.Module.__subclasses__())
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls not in seen:
            seen.add(cls)
            wrap(cls)
            pending.extend(cls.__subclasses__())
    chained = vars(torch.nn.Module).get("__init_subclass__")

    def __init_subclass__(cls: Any, /, **kwargs: Any) -> None:
        if chained is not None:
            chained.__func__(cls, **kwargs)
        else:
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
        wrap(cls)

    patches.set(torch.nn.Module, "__init_subclass__", classmethod(__init_subclass__))


def _outside_torch(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module != "torch" and not module.startswith("torch.")


def _method_forward_wrapper(original: Any, get_tracker: Tracker) -> Any:
    """A module's own ``forward``: the ``forward`` region when no module call is open.

    TorchScript compiles a method from its source and looks its names up in the function's
    globals and closure; the wrapper therefore runs with the original's globals, and every
    name it uses itself is a closure cell with a name no user code has.
    """
    _gpuwise_original, _gpuwise_tracker, _gpuwise_open = original, get_tracker, _Depth.open
    _gpuwise_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
    _gpuwise_region = _forward_region

    def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
        if _gpuwise_open["forward"] or _gpuwise_compiling():  # inside a module call, or traced
            return _gpuwise_original(module, *args, **kwargs)
        return _gpuwise_region(_gpuwise_original, _gpuwise_tracker, module, args, kwargs)

    code, closure = forward.__code__, forward.__closure__
    wrapper = types.FunctionType(code, original.__globals__, "forward", None, closure)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, _WRAPPED, True)
    return wrapper


def evaluating(module: Any) -> bool:
    """Whether a module call is evaluation: no gradients, ``eval()`` mode, a trainable model.

    Under ``inference_mode`` any call evaluates; under ``no_grad`` a model in ``eval()``
    mode does. A model none of whose parameters require grad (a frozen teacher, a target
    network) is part of the training step that calls it.
    """
    inference = torch.is_inference_mode_enabled()
    if torch.is_grad_enabled() and not inference:
        return False
    if getattr(module, "training", True) and not inference:
        return False
    return any(p.requires_grad for p in module.parameters())


def _iter_wrapper(
    original: Any, patches: Patches, get_tracker: Tracker, worker_env: str | None
) -> Any:
    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        iterator = _marked(worker_env, original, self)
        cls = type(iterator)
        if not getattr(cls.__next__, _WRAPPED, False):
            with contextlib.suppress(TypeError):  # a built-in iterator type cannot be patched
                patches.set(cls, "__next__", _next_wrapper(cls.__next__, get_tracker))
        return iterator

    return __iter__


def _marked(worker_env: str | None, original: Any, loader: Any) -> Any:
    """Call ``original(loader)`` with ``worker_env`` set: worker processes started now skip."""
    if worker_env is None:
        return original(loader)
    had = os.environ.get(worker_env)
    os.environ[worker_env] = "1"
    try:
        return original(loader)
    finally:
        if had is None:
            os.environ.pop(worker_env, None)
        else:
            os.environ[worker_env] = had


def _next_wrapper(original: Any, get_tracker: Tracker) -> Any:
    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        tracker = get_tracker()
        if tracker is None:
            return original(self)
        tracker.batch_requested()
        try:
            batch = original(self)
        except BaseException:
            tracker.batch_failed()
            raise
        tracker.batch_ready(batch_size_of(batch))
        batch_probe.first_batch(self, batch)  # the data kind, once per dataset
        return batch

    setattr(__next__, _WRAPPED, True)
    return __next__


def batch_size_of(batch: Any) -> int | None:
    """The first dimension of the batch's first tensor (one level of list/tuple/dict)."""
    if isinstance(batch, (list, tuple)):
        batch = batch[0] if batch else None
    elif isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return int(batch.shape[0])
    return None


def _copy_wrapper(original: Any, get_tracker: Tracker, target: Callable[..., Any]) -> Any:
    @functools.wraps(original)
    def copy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        tracker = get_tracker()
        device = None if tracker is None or self.is_cuda else target(args, kwargs)
        if device is None:
            return original(self, *args, **kwargs)
        pageable = not self.is_pinned()
        nbytes = self.nelement() * self.element_size()
        tracker.copy_started()
        stream = torch.cuda.current_stream(device)
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record(stream)
        out = original(self, *args, **kwargs)
        end.record(stream)
        tracker.copy_done(nbytes, pageable=pageable, timing=(start, end))
        return out

    return copy


def _to_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    """The CUDA device a ``Tensor.to`` call copies to, or None when it stays on the host."""
    arg = kwargs.get("device", args[0] if args else None)
    if isinstance(arg, torch.Tensor):
        arg = arg.device
    if isinstance(arg, bool) or not isinstance(arg, (str, int, torch.device)):
        return None  # a dtype, or no device at all
    device = torch.device("cuda", arg) if isinstance(arg, int) else torch.device(arg)
    return device if device.type == "cuda" else None


def _cuda_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    """The device of a ``Tensor.cuda`` call."""
    arg = kwargs.get("device", args[0] if args else None)
    if arg is None:
        return torch.device("cuda")
    return torch.device("cuda", arg) if isinstance(arg, int) else torch.device(arg)
