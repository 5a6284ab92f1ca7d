"""Frozen parameters and LoRA adapters, added to a model the way PEFT adds them.

``freeze_parameters`` takes name patterns: a plain name is a prefix (``layers`` freezes
``layers.0.weight``), a pattern with ``*``/``?``/``[`` is a glob over the whole name or a
module path (``model.layers.*.mlp``), and a pattern starting with ``!`` keeps what it
matches trainable (``--freeze '*' --freeze '!lm_head'``).

``add_lora`` replaces each target linear layer by the base layer (frozen) plus two
adapter matrices, ``lora_A`` (in x r) and ``lora_B`` (r x out), computing
``base(x) + lora_B(lora_A(dropout(x))) * alpha / r`` as PEFT's ``LoraModel`` does, and
freezes every other parameter (PEFT's ``bias="none"``). Targets match a module whose
name is a target or ends with ``.target``; the defaults per architecture are PEFT's
(``q_proj``/``v_proj`` for Llama, ``c_attn`` for GPT-2, ``query``/``value`` for BERT);
``all-linear`` is every linear layer but the output head.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gpuwise.errors import UsageError

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "opt": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj"),
    "phi3": ("qkv_proj",),
    "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "bloom": ("query_key_value",),
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "vit": ("query", "value"),
    "t5": ("q", "v"),
}
"""PEFT's default LoRA targets per ``config.model_type`` (peft
``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``)."""
BUILTIN_TARGETS = ("qkv",)
"""gpuwise's built-in transformers keep attention's projections in one ``qkv`` layer."""
_HALF = (torch.float16, torch.bfloat16)
OUTPUT_HEADS = ("lm_head", "head", "classifier", "out", "span")


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters to add (``--lora RANK[:TARGETS[:DROPOUT]]``).

    Attributes:
        rank: The adapters' rank r.
        targets: Module names to adapt (empty: the architecture's PEFT defaults);
            ``("all-linear",)`` for every linear layer but the output head.
        dropout: ``lora_dropout`` (PEFT's default 0: no dropout tensors).
    """

    rank: int
    targets: tuple[str, ...] = ()
    dropout: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LoraSpec:
        """``"16"``, ``"16:q_proj,v_proj"`` or ``"8:all-linear:0.05"``.

        Raises:
            UsageError: Not a positive rank, optional targets and optional dropout.
        """
        rank_text, _, rest = text.partition(":")
        targets_text, _, dropout_text = rest.partition(":")
        try:
            rank = int(rank_text)
            dropout = float(dropout_text) if dropout_text else 0.0
        except ValueError:
            rank, dropout = 0, 0.0
        if rank < 1 or not 0.0 <= dropout < 1.0:
            raise UsageError(
                f"--lora {text!r}: expected RANK[:TARGETS[:DROPOUT]], a positive rank, "
                "comma-separated module names and a dropout in [0, 1), e.g. 16:q_proj,v_proj"
            )
        targets = tuple(t for t in targets_text.split(",") if t)
        return cls(rank, targets, dropout)

    def describe(self) -> str:
        """``r=16 on q_proj,v_proj`` (targets as given, or ``PEFT defaults``)."""
        on = ",".join(self.targets) if self.targets else "PEFT defaults"
        drop = f", dropout {self.dropout:g}" if self.dropout else ""
        return f"r={self.rank} on {on}{drop}"


class LoraLinear(nn.Module):
    """A frozen linear layer plus its LoRA adapters (PEFT's ``lora.Linear``)."""

    def __init__(self, base: nn.Module, in_features: int, out_features: int, spec: LoraSpec):
        super().__init__()
        self.base_layer = base
        dtype = _weight(base).dtype
        # PEFT's autocast_adapter_dtype=True: adapters of a half-precision model are fp32
        kwargs: dict[str, Any] = {
            "bias": False,
            "dtype": torch.float32 if dtype in _HALF else dtype,
        }
        self.lora_A = nn.Linear(in_features, spec.rank, **kwargs)
        self.lora_B = nn.Linear(spec.rank, out_features, **kwargs)
        nn.init.zeros_(self.lora_B.weight)
        self.lora_dropout = nn.Dropout(spec.dropout) if spec.dropout else nn.Identity()
        self.scaling = 1.0  # alpha / r; its value does not change memory or FLOPs

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``base(x) + lora_B(lora_A(dropout(x))) * scaling``."""
        result: torch.Tensor = self.base_layer(x, *args, **kwargs)
        result_dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype)
        result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return result.to(result_dtype)


def _weight(module: nn.Module) -> torch.Tensor:
    weight = getattr(module, "weight", None)
    assert isinstance(weight, torch.Tensor)
    return weight


def linear_features(module: nn.Module) -> tuple[int, int] | None:
    """(in, out) of a layer that computes a linear map, else None.

    ``nn.Linear`` and every subclass of it (a model's own ``Linear`` that only changes
    initialisation or casting still computes ``x @ W.T + b``), and transformers'
    ``Conv1D`` (GPT-2), which stores its weight as (in, out).
    """
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and _weight(module).dim() == 2:
        rows, cols = _weight(module).shape  # Conv1D stores (in, out)
        return int(rows), int(cols)
    return None


def default_targets(model: nn.Module) -> tuple[str, ...]:
    """PEFT's default targets for ``model``'s architecture.

    Raises:
        UsageError: An architecture PEFT has no default for; lists its linear layers.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type in DEFAULT_TARGETS:
        return DEFAULT_TARGETS[model_type]
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if linear_features(m)}
    if set(BUILTIN_TARGETS) <= names:
        return BUILTIN_TARGETS
    raise UsageError(
        f"--lora: no default target modules for {model_type or type(model).__name__}; name "
        f"them, e.g. --lora 16:{','.join(sorted(names)[:2]) or 'q_proj,v_proj'} "
        f"(linear layers here: {', '.join(sorted(names)) or 'none'})"
    )


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def add_lora(model: nn.Module, spec: LoraSpec) -> int:
    """Add LoRA adapters to ``model`` in place and freeze everything else.

    Args:
        model: The model (built inside the trace's fake mode, or real).
        spec: Rank, targets and dropout.

    Returns:
        Number of layers adapted.

    Raises:
        UsageError: No module matches the targets.

    Example:
        >>> net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
        >>> add_lora(net, LoraSpec(2, ("0",)))
        1
        >>> sum(p.numel() for p in net.parameters() if p.requires_grad)
        32
    """
    targets = spec.targets or default_targets(model)
    every = targets == ("all-linear",)
    chosen = []
    for name, module in model.named_modules():
        features = linear_features(module)
        if features is None or not name:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if (every and leaf not in OUTPUT_HEADS) or (not every and _matches(name, targets)):
            chosen.append((name, module, features))
    if not chosen:
        raise UsageError(
            f"--lora: no linear layer is named {', '.join(targets)}; pass the names with "
            "--lora RANK:NAME,NAME"
        )
    for param in model.parameters():
        param.requires_grad_(False)
    for name, module, (fan_in, fan_out) in chosen:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, leaf, LoraLinear(module, fan_in, fan_out, spec))
    return len(chosen)


def _match(name: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    return name.startswith(pattern)


def freeze_parameters(net: nn.Module, patterns: tuple[str, ...]) -> int:
    """Stop gradients of the parameters matching ``patterns`` (``!PATTERN`` keeps them).

    Patterns are applied in order over the parameters' current state, so after
    ``add_lora`` (which freezes all but the adapters) ``!lm_head`` makes the head
    trainable again.

    Args:
        net: The model, changed in place.
        patterns: Prefixes or globs; a leading ``!`` makes matches trainable.

    Returns:
        Parameters frozen or unfrozen.

    Raises:
        UsageError: A pattern matches no parameter; lists the top-level names.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> freeze_parameters(net, ("*", "!1.bias"))
        4
        >>> [n for n, p in net.named_parameters() if p.requires_grad]
        ['1.bias']
    """
    named = list(net.named_parameters())
    changed = set()
    for pattern in patterns:
        keep = pattern.startswith("!")
        body = pattern[1:] if keep else pattern
        hits = [(n, p) for n, p in named if _match(n, body)]
        if not hits:
            names = sorted({n.split(".")[0] for n, _ in named})
            raise UsageError(
                f"--freeze {pattern} matches no parameter; top-level names: {', '.join(names)}"
                " (a plain name is a prefix; use * for globs, ! to keep trainable)"
            )
        for name, param in hits:
            param.requires_grad_(keep)
            changed.add(name)
    return len(changed)
