"""Fixes in the user's own terms: their optimizer class, their framework's arguments.

The fix catalog (``fixes.py``) writes plain PyTorch. When the Run knows what the job built
(its ``setup`` section, recorded at construction time by the profiler), this module
rewrites the fixes that touch those objects: the optimizer fix names the user's own class
with the flag PyTorch offers for it on that device (and is dropped when it is already
set); loader fixes become ``TrainingArguments`` arguments for the Hugging Face Trainer and
``DataModule`` loader arguments for Lightning; for Lightning Fabric and Accelerate, whose
scripts build their own loader and optimizer and hand them over, the change is made where
they are built, before ``fabric.setup``/``fabric.setup_dataloaders`` or
``accelerator.prepare``; mixed precision and compile become the framework's own setting.
Each points at the file:line that built the object.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuwise.diagnose.fixes.calls import option_setting
from gpuwise.records import Finding, Fix
from gpuwise.records.trial_spec import JOB_OPTIMIZER, optimizer_flags

HF_LOADER_ARGS = {
    "num_workers": "dataloader_num_workers",
    "pin_memory": "dataloader_pin_memory",
    "persistent_workers": "dataloader_persistent_workers",
    "prefetch_factor": "dataloader_prefetch_factor",
}
"""DataLoader arguments and the ``TrainingArguments`` fields the HF Trainer builds them from."""

PRECISION = {
    "lightning": 'Trainer(precision="bf16-mixed")',
    "hf_trainer": "TrainingArguments(bf16=True)",
    "fabric": 'Fabric(precision="bf16-mixed")',
    "accelerate": 'Accelerator(mixed_precision="bf16")',
}

PRECISION_FP16 = {
    "lightning": 'Trainer(precision="16-mixed")',
    "hf_trainer": "TrainingArguments(fp16=True)",
    "fabric": 'Fabric(precision="16-mixed")',
    "accelerate": 'Accelerator(mixed_precision="fp16")',
}
"""fp16 (tensor cores without bf16); each framework keeps the gradient scaler itself."""

COMPILE = {
    "lightning": "model = torch.compile(model)  # before trainer.fit(model)",
    "hf_trainer": "TrainingArguments(torch_compile=True)",
    "fabric": "model = torch.compile(model)  # before fabric.setup(model, optimizer)",
    "accelerate": 'Accelerator(dynamo_backend="inductor")',
}

ACCUMULATE = {
    "lightning": "Trainer(accumulate_grad_batches=4)",
    "hf_trainer": "TrainingArguments(gradient_accumulation_steps=4)",
    "accelerate": (
        "Accelerator(gradient_accumulation_steps=4), the step inside "
        "`with accelerator.accumulate(model):`"
    ),
}
"""Gradient accumulation where the framework owns it (4 batches per optimizer step)."""

NON_BLOCKING = "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))"
"""Accelerate's copies of pinned batches overlap compute only with ``non_blocking``."""

HANDED_OVER = {
    "fabric": ("fabric.setup_dataloaders(loader)", "fabric.setup(model, optimizer)"),
    "accelerate": ("accelerator.prepare(..., loader)", "accelerator.prepare(model, optimizer)"),
}
"""Frameworks the script hands its own loader and optimizer to: (loader, optimizer) call."""


def _args(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={v!r}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in kwargs.items()
    )


def _at(record: Mapping[str, Any] | None) -> str:
    if not record or not record.get("file"):
        return ""
    return f"  # at {Path(str(record['file'])).name}:{record.get('line')}"


def first_record(setup: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The loader or optimizer record a fix goes on (``key``: ``loaders``, ``optimizers``).

    The first one the job built, or for Accelerate the first it handed to
    ``accelerator.prepare`` (``prepared_at``): the one Accelerate trains with. A loader
    handed over with the prepared optimizer (the same ``prepare`` call, else the same
    ``Accelerator``) comes before the others.
    """
    items = [dict(r) for r in setup.get(key) or [] if isinstance(r, Mapping)]
    prepared = [r for r in items if r.get("prepared_at")]
    if key == "loaders" and prepared:
        opt = first_record(setup, "optimizers") or {}
        handed = opt.get("prepared_at") or {}
        for same in (_call_of, _accelerator_of):
            known = same(handed) if handed else (None, None)
            beside = [r for r in prepared if known[0] and same(r["prepared_at"]) == known]
            if beside:
                return beside[0]
    chosen = prepared or items
    return chosen[0] if chosen else None


def _call_of(prepared_at: Mapping[str, Any]) -> tuple[Any, Any]:
    return prepared_at.get("file"), prepared_at.get("line")


def _accelerator_of(prepared_at: Mapping[str, Any]) -> tuple[Any, Any]:
    site = prepared_at.get("accelerator") or {}
    return (site.get("file"), site.get("line")) if site else (None, None)


def accelerator_record(setup: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where an Accelerate script built its ``Accelerator`` (``{"file", "line"}``), if known.

    The one that prepared the job's optimizer, else its loader (``prepared_at``).
    """
    for key in ("optimizers", "loaders"):
        record = first_record(setup, key) or {}
        site = (record.get("prepared_at") or {}).get("accelerator")
        if isinstance(site, Mapping) and site.get("file"):
            return dict(site)
    return None


def loader_setting(kwargs: Mapping[str, Any], setup: Mapping[str, Any], *, at: bool = True) -> str:
    """The loader arguments ``kwargs`` written where the user's framework takes them.

    Args:
        kwargs: DataLoader arguments.
        setup: The Run's ``setup`` section.
        at: End with a comment naming the file:line that built the loader.
    """
    framework = setup.get("framework", "plain")
    loader = first_record(setup, "loaders")
    if framework == "hf_trainer":
        hf = {HF_LOADER_ARGS[k]: v for k, v in kwargs.items() if k in HF_LOADER_ARGS}
        return f"TrainingArguments({_args(hf)})"
    text = f"DataLoader(..., {_args(kwargs)})"
    if framework == "lightning":
        text = f"LightningDataModule.train_dataloader(): {text}"
    if framework in HANDED_OVER:
        text += f", before {HANDED_OVER[framework][0]}"
    return text + (_at(loader) if at else "")


def optimizer_records(setup: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every optimizer the job built, once per line that built it: each gets its own fix.

    The first is ``first_record``'s (for Accelerate, the one it trains with; only those
    handed to ``accelerator.prepare`` then); a GAN's generator and discriminator optimizers
    are two records. The Hugging Face Trainer builds
    one, from ``TrainingArguments``.
    """
    first = first_record(setup, "optimizers")
    if first is None:
        return []
    if setup.get("framework") == "hf_trainer":
        return [first]
    items = [r for r in setup.get("optimizers") or [] if isinstance(r, Mapping)]
    if first.get("prepared_at"):  # Accelerate trains with what it was handed, not the rest
        items = [r for r in items if r.get("prepared_at")]
    out, seen = [], set()
    for record in [first, *items]:
        key = (record.get("file"), record.get("line"), record.get("class"))
        if key not in seen:
            seen.add(key)
            out.append(dict(record))
    return out


def records_for(
    flags_by_class: Mapping[str, Any], setup: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The optimizer records a trial's per-class flags (``records.trial_spec``) change."""
    records = optimizer_records(setup)
    if JOB_OPTIMIZER in flags_by_class:
        return records[:1]
    return [r for r in records if str(r.get("class")) in flags_by_class]


_TARGET = re.compile(r"^\s*(?:self\.)?([A-Za-z_][A-Za-z0-9_]*)\s*=[^=]")


def optimizer_name(record: Mapping[str, Any]) -> str:
    """``Adam (opt_g)``: the class, with the name the script gave it when its line says."""
    cls = str(record.get("class") or "AdamW")
    target = _TARGET.match(str(record.get("code") or ""))
    return f"{cls} ({target.group(1)})" if target else cls


def optimizer_setting(
    flag: str,
    setup: Mapping[str, Any],
    *,
    at: bool = True,
    record: Mapping[str, Any] | None = None,
) -> str:
    """The optimizer flag on the user's own class, in their framework's terms.

    Args:
        flag: ``fused`` or ``foreach``.
        setup: The Run's ``setup`` section.
        at: End with a comment naming the file:line that built the optimizer.
        record: The optimizer record (default: the job's first, ``first_record``).
    """
    opt = record if record is not None else first_record(setup, "optimizers") or {}
    cls = str(opt.get("class") or "AdamW")
    framework = setup.get("framework", "plain")
    if framework == "hf_trainer":
        if cls == "AdamW" and flag == "fused":
            return 'TrainingArguments(optim="adamw_torch_fused")'
        own = f"torch.optim.{cls}(model.parameters(), ..., {flag}=True)"
        return f"Trainer(..., optimizers=({own}, None))"
    text = f"torch.optim.{cls}(..., {flag}=True)"
    if framework == "lightning":
        text = f"configure_optimizers(): {text}"
    if framework in HANDED_OVER:
        text += f", before {HANDED_OVER[framework][1]}"
    return text + (_at(opt) if at else "")


def framework_setting(
    name: str,
    spec: Mapping[str, Any],
    setup: Mapping[str, Any],
    *,
    kept: Collection[str] = (),
) -> str:
    """The one-line setting a trial's overrides stand for, in the job's framework.

    Args:
        name: The trial's name (the text when nothing else applies).
        spec: The trial's overrides.
        setup: The Run's ``setup`` section.
        kept: ``Accelerator(...)`` arguments the script sets from its own options
            (``trials.change.kept_options`` says how to set them): not written here.
    """
    framework = str(setup.get("framework", "plain"))
    parts = []
    if "loader" in spec:
        parts.append(loader_setting(spec["loader"], setup, at=False))
        if framework == "accelerate" and spec["loader"].get("pin_memory"):
            parts.append(NON_BLOCKING)
    if spec.get("torch_threads"):
        parts.append(f"torch.set_num_threads({spec['torch_threads']})")
    by_class = optimizer_flags(spec)
    several = len(records_for(by_class, setup)) > 1
    for record in records_for(by_class, setup):
        flags = by_class.get(str(record.get("class"))) or by_class.get(JOB_OPTIMIZER) or {}
        for flag in (f for f, on in flags.items() if on):
            parts.append(optimizer_setting(flag, setup, at=several, record=record))
    if spec.get("cudnn_benchmark"):
        lightning = framework == "lightning"
        parts.append(
            "Trainer(benchmark=True)" if lightning else "torch.backends.cudnn.benchmark = True"
        )
    if spec.get("tf32"):
        hf = framework == "hf_trainer"
        parts.append(
            "TrainingArguments(tf32=True)" if hf else 'torch.set_float32_matmul_precision("high")'
        )
    own = framework == "accelerate"
    if spec.get("autocast") and not (own and "mixed_precision" in kept):
        plain = "with torch.autocast(device, dtype=torch.bfloat16): loss = model(x)"
        parts.append(PRECISION.get(framework, plain))
    if spec.get("channels_last"):
        parts.append("model = model.to(memory_format=torch.channels_last)")
    if spec.get("compile") and not (own and "dynamo_backend" in kept):
        parts.append(COMPILE.get(framework, "model = torch.compile(model)"))
    return "; ".join(parts) or name


def in_user_terms(findings: Sequence[Finding], setup: Mapping[str, Any] | None) -> list[Finding]:
    """The findings with their fixes rewritten for the job's optimizer and framework.

    Args:
        findings: Diagnosed findings (plain-PyTorch fixes).
        setup: The Run's ``setup`` section, or ``None`` (the findings come back unchanged).

    Returns:
        New findings; only the fixes that touch the captured objects differ.
    """
    if not setup:
        return list(findings)
    return [
        dataclasses.replace(f, fixes=tuple(new for fix in f.fixes for new in _rewrite(fix, setup)))
        for f in findings
    ]


_WORKERS = re.compile(r"num_workers=(\d+)")


def _rewrite(fix: Fix, setup: Mapping[str, Any]) -> list[Fix]:
    framework = setup.get("framework", "plain")
    if "fused=True" in fix.how and "torch.optim" in fix.how:
        return _optimizer_fix(fix, setup)
    workers = _WORKERS.search(fix.how)
    if workers and "DataLoader(" in fix.how:
        kwargs: dict[str, Any] = {"num_workers": int(workers.group(1)), "persistent_workers": True}
        if "pin_memory=True" in fix.how:
            kwargs["pin_memory"] = True
        if kwargs.get("pin_memory") and framework == "accelerate":
            how = f"{loader_setting(kwargs, setup, at=False)}; {NON_BLOCKING}"
            return [Fix(fix.action, how + _at(first_record(setup, "loaders")))]
        return [Fix(fix.action, loader_setting(kwargs, setup))]
    if "pin_memory=True" in fix.how and framework == "hf_trainer":
        return [Fix(fix.action, "TrainingArguments(dataloader_pin_memory=True); "
                    "batches then cross with non_blocking copies")]  # fmt: skip
    if "pin_memory=True" in fix.how and framework == "accelerate":
        how = f"{loader_setting({'pin_memory': True}, setup, at=False)}; {NON_BLOCKING}"
        return [Fix(fix.action, how + _at(first_record(setup, "loaders")))]
    if "pin_memory=True" in fix.how and framework in HANDED_OVER:
        return [Fix(fix.action, loader_setting({"pin_memory": True}, setup))]
    at = _at(accelerator_record(setup)) if framework == "accelerate" else ""
    if "torch.compile(" in fix.how and framework in COMPILE:
        return [Fix(fix.action, COMPILE[framework] + at)]
    if "torch.autocast(" in fix.how and framework in PRECISION:
        fp16 = "torch.float16" in fix.how
        site = (accelerator_record(setup) or {}) if framework == "accelerate" else {}
        option = option_setting(
            site.get("file"), site.get("line"), "Accelerator", "mixed_precision",
            "fp16" if fp16 else "bf16",
        )  # fmt: skip
        if option is not None:  # the script exposes Accelerate's option: it is kept, and used
            return [Fix(fix.action, option + at)]
        return [Fix(fix.action, (PRECISION_FP16 if fp16 else PRECISION)[framework] + at)]
    return [fix]


def _optimizer_fix(fix: Fix, setup: Mapping[str, Any]) -> list[Fix]:
    records = optimizer_records(setup)
    if not records:
        return [fix]
    named = len(records) > 1  # several optimizers: each line names its own
    out: list[Fix] = []
    for record in records:
        for made in _one_optimizer_fix(record, setup, named):
            if made not in out:
                out.append(made)
    return out


def _one_optimizer_fix(opt: Mapping[str, Any], setup: Mapping[str, Any], named: bool) -> list[Fix]:
    cls, offers = str(opt.get("class")), list(opt.get("offers") or [])
    name = optimizer_name(opt) if named else cls
    if opt.get("fused"):
        return []  # already fused: nothing to paste
    if "fused" in offers:
        return [
            Fix(
                f"Update all parameters of {name} in one fused kernel",
                optimizer_setting("fused", setup, record=opt),
            )
        ]
    if "foreach" in offers and not opt.get("foreach"):
        action = (
            f"Update {name}'s parameters in a few foreach kernels ({cls} has no fused update here)"
        )
        return [Fix(action, optimizer_setting("foreach", setup, record=opt))]
    device = opt.get("device", "this device")
    framework = str(setup.get("framework", "plain"))
    accumulate = ACCUMULATE.get(framework, "gradient accumulation")
    at = _at(accelerator_record(setup)) if framework == "accelerate" else ""
    return [
        Fix(
            f"{name} offers no fused or foreach update on {device} (or runs it already); "
            "spread the update's fixed cost over more samples",
            f"a larger batch (see the batch fix) or fewer optimizer steps per sample "
            f"({accumulate}){at}",
        )
    ]
