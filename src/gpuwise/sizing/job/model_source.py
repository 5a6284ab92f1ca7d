"""Turning what the user named (a built-in, ``package.module:factory``, a module) into a model.

Also parses input shapes (``3x224x224``), makes example batches, and turns an exception
raised inside the model's forward into an error that names the layer.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.job import hf_cache, hf_config
from gpuwise.sizing.job.models import BUILTIN_MODELS, InputSpec
from gpuwise.user_code import import_factory

ModelLike = str | nn.Module | Callable[[], nn.Module]

_DATA_DEPENDENT = ("DataDependentOutputException", "DynamicOutputShapeException")
"""Fake-tensor errors of ops whose output depends on values (``.item()``, ``nonzero``)."""


@dataclass(frozen=True)
class ModelSource:
    """A model to size: how to build it, its default input (if known), notes on it."""

    name: str
    build: Callable[[], nn.Module]
    input_spec: InputSpec | None
    hf_config: Any = None
    notes: tuple[str, ...] = ()


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``"3x224x224"`` (or ``"3,224,224"``) into a shape tuple.

    Raises:
        UsageError: The text is not positive integers joined by ``x``.
    """
    parts = text.lower().replace(",", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise UsageError(
            f"input shape {text!r} is not positive integers joined by 'x'; "
            "write one sample's shape without the batch, e.g. 3x224x224"
        )
    return shape


def _import_factory(spec: str) -> Callable[[], nn.Module]:
    return import_factory(spec, returns="an nn.Module")


def _checked(name: str, factory: Callable[[], Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        try:
            model = factory()
        except Exception as err:
            raise UsageError(f"model factory {name!r} raised {type(err).__name__}: {err}") from err
        if not isinstance(model, nn.Module):
            raise UsageError(
                f"model factory {name!r} returned {type(model).__name__}, expected an nn.Module"
            )
        return model

    return build


def _fake_copy(model: nn.Module) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        mode = torch._guards.detect_fake_mode()
        memo: dict[int, Any] = {}
        for p in model.parameters():
            fake = mode.from_tensor(p) if mode else p.detach().clone()
            memo[id(p)] = nn.Parameter(fake, requires_grad=p.requires_grad)
        for b in model.buffers():
            memo[id(b)] = mode.from_tensor(b) if mode else b.clone()
        return copy.deepcopy(model, memo)

    return build


def resolve_model(model: ModelLike) -> ModelSource:
    """Find out how to build ``model`` inside a fake-tensor mode.

    Args:
        model: A built-in name (see ``BUILTIN_MODELS``), ``"package.module:factory"``,
            a Hugging Face ``config.json`` path (``hf_config``), a zero-argument
            factory, or an ``nn.Module`` (copied with fake parameters, so its real memory
            is not touched).

    Returns:
        The model source.

    Raises:
        UsageError: Unknown name, or a factory that cannot be imported.
    """
    if isinstance(model, nn.Module):
        return ModelSource(type(model).__name__, _fake_copy(model), None)
    if callable(model):
        name = getattr(model, "__qualname__", repr(model))
        return ModelSource(name, _checked(name, model), None)
    if model in BUILTIN_MODELS:
        builtin = BUILTIN_MODELS[model]
        return ModelSource(model, builtin.factory, builtin.input_spec)
    if model.endswith(".json") or model.endswith("/"):
        return _hf_source(model)
    if ":" in model:
        return ModelSource(model, _checked(model, _import_factory(model)), None)
    if hf_cache.is_hub_name(model):
        return replace(_hf_source(str(hf_cache.cached_config(model))), name=model)
    raise UsageError(
        f"unknown model {model!r}; use one of {', '.join(sorted(BUILTIN_MODELS))}, "
        "'package.module:factory', or a Hugging Face name (ORG/NAME) in the local cache"
    )


def _hf_source(path: str) -> ModelSource:
    config = hf_config.read_config(path)
    name = (getattr(config, "architectures", None) or [config.model_type])[0]
    note = hf_config.defaults_note(config)
    notes = (note,) if note else ()
    return ModelSource(name, hf_config.builder(config), hf_config.input_of(config), config, notes)


def shallow(source: ModelSource, layers: int) -> ModelSource:
    """``source`` (built from a config) with ``layers`` decoder layers."""
    config = hf_config.with_layers(source.hf_config, layers)
    return replace(source, build=hf_config.builder(config), hf_config=config)


def make_batch(spec: InputSpec, batch_size: int) -> torch.Tensor:
    """A random batch for ``spec`` (created on the current default device and mode)."""
    shape = (batch_size, *spec.shape)
    if spec.kind == "tokens":
        return torch.randint(0, spec.vocab_size or 2, shape)
    return torch.randn(shape)


def make_loss(
    spec: InputSpec | None, kind: str = "full"
) -> Callable[[Any, tuple[Any, ...]], torch.Tensor]:
    """The loss a training step uses: cross-entropy for built-ins, else ``output.sum()``.

    ``kind`` is how a token model's cross-entropy runs (``choices.parse_loss``): ``full``
    (fp32 logits), ``fused`` (chunked, no fp32 copy kept) or ``chunked[-compiled][:N]``
    (torchtune's: the model returns logits chunks, which the loop drops once the loss is
    computed; the returned function's ``drops_output`` says so).
    """
    route = kind.partition(":")[0]

    def loss(output: Any, inputs: tuple[Any, ...]) -> torch.Tensor:
        if route.startswith("chunked") and spec is not None and spec.kind == "tokens":
            from gpuwise.sizing.step.losses import chunked_cross_entropy

            return chunked_cross_entropy(
                _logit_chunks(output), inputs[0], compiled=route == "chunked-compiled"
            )
        out = _first_tensor(output)
        if spec is not None and spec.kind == "tokens":
            if kind == "fused":
                from gpuwise.sizing.step.losses import fused_cross_entropy

                return fused_cross_entropy(out.flatten(0, 1), inputs[0].flatten())
            return nn.functional.cross_entropy(out.flatten(0, 1).float(), inputs[0].flatten())
        if spec is not None and spec.num_classes:
            targets = torch.randint(0, spec.num_classes, (out.shape[0],))
            return nn.functional.cross_entropy(out.float(), targets)
        return out.float().sum()

    loss.drops_output = route.startswith("chunked")  # type: ignore[attr-defined]
    return loss


def _logit_chunks(output: Any) -> list[torch.Tensor]:
    """The logits chunks a chunked-output model returned (alone, in a tuple or a dict)."""
    if isinstance(output, dict):
        output = output.get("logits", next(iter(output.values()), None))
    elif isinstance(output, tuple) and output and isinstance(output[0], list):
        output = output[0]
    if isinstance(output, list) and all(isinstance(t, torch.Tensor) for t in output):
        return output
    raise UsageError(
        f"--loss chunked: the model returned {type(output).__name__}, not the list of "
        "logits chunks its output head makes; use --loss fused or full"
    )


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        output = output.get("loss", next(iter(output.values()), None))
        return _first_tensor(output)
    if isinstance(output, (tuple, list)) and output:
        return _first_tensor(output[0])
    raise UsageError(
        f"the model returned {type(output).__name__}; expected a tensor, or a tuple, list or "
        "dict holding one (pass loss_fn= to estimate() for other outputs)"
    )


_SHAPE_WORDS = ("shape", "size", "dim", "mat1", "mat2", "expected input", "channels")


def _about_shapes(err: BaseException, text: str) -> bool:
    """Whether an error inside the forward is a shape mismatch (else the input is not blamed)."""
    if type(err).__name__ == "CheckpointError" or "keyword argument" in text:
        return False
    lowered = text.lower()
    return isinstance(err, (IndexError, RuntimeError, ValueError, AssertionError)) and any(
        word in lowered for word in _SHAPE_WORDS
    )


@contextmanager
def layer_errors(
    model: nn.Module, shape_text: str, batch_size: int | None = None
) -> Iterator[None]:
    """Re-raise an error inside ``model``'s forward as a UsageError naming the layer.

    A tensor too large for any size calculation (more than 2**63 bytes) is the batch's
    doing, not the sample shape's, and the message says so.
    """
    stack: list[str] = []
    handles = []

    def leave(*_: Any) -> None:
        stack.pop()

    for name, module in model.named_modules():
        label = f"{name or '(model)'} ({type(module).__name__})"
        handles.append(module.register_forward_pre_hook(lambda *_, x=label: stack.append(x)))
        handles.append(module.register_forward_hook(leave))
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs a traceback for every failed shape check
    try:
        yield
    except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as err:
        where = stack[-1] if stack else "(model)"
        first_line = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
        if type(err).__name__ in _DATA_DEPENDENT:
            raise UsageError(
                f"layer {where} needs real data to decide a shape ({type(err).__name__}: "
                f"{first_line}), so it cannot be traced on fake tensors; measure it with "
                "`gpuwise tune` instead"
            ) from err
        if batch_size is not None and "overflow" in first_line.lower():
            raise UsageError(
                f"batch {batch_size:,} of input {shape_text} is too large to trace: layer "
                f"{where} would hold a tensor past any memory ({type(err).__name__}: "
                f"{first_line}); pass a smaller --batch"
            ) from err
        if not _about_shapes(err, first_line):
            raise UsageError(
                f"layer {where} failed while tracing (input {shape_text}): "
                f"{type(err).__name__}: {first_line}; the input shape is not the cause. "
                "Check that the model runs a plain training step on the CPU"
            ) from err
        raise UsageError(
            f"input {shape_text} does not fit layer {where}: {type(err).__name__}: "
            f"{first_line}; pass the shape of one sample without the batch "
            "(--input CxHxW or --seq N)"
        ) from err
    finally:
        quiet.setLevel(level)
        for handle in handles:
            handle.remove()
