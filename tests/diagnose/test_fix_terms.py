"""Fixes in the user's terms: their optimizer class and their framework's arguments."""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.fixes.feed import loader_workers
from gpuwise.diagnose.fixes.terms import in_user_terms
from gpuwise.diagnose.step_rules import fused_optimizer
from gpuwise.records import Finding


def _findings() -> list[Finding]:
    return [
        Finding("optimizer_bound", "warning", "opt", {}, 1.5, (fused_optimizer(),)),
        Finding("input_bound", "warning", "in", {}, 1.5, (loader_workers(4, 1),)),
    ]


def _setup(framework: str = "plain", cls: str = "SGD", **opt: Any) -> dict[str, Any]:
    return {
        "framework": framework,
        "loaders": [{"file": "/x/train.py", "line": 12, "num_workers": 0}],
        "optimizers": [
            {"file": "/x/train.py", "line": 20, "class": cls, "device": "cpu",
             "offers": ["foreach", "fused"], **opt}
        ],
    }  # fmt: skip


def _hows(findings: list[Finding]) -> list[list[str]]:
    return [[fix.how for fix in f.fixes] for f in findings]


def test_without_a_setup_nothing_changes():
    assert in_user_terms(_findings(), None) == _findings()


def test_an_sgd_user_gets_sgd_with_the_flag_pytorch_offers_and_the_line():
    opt, loader = _hows(in_user_terms(_findings(), _setup()))
    assert opt == ["torch.optim.SGD(..., fused=True)  # at train.py:20"]
    assert loader == [
        "DataLoader(..., num_workers=4, persistent_workers=True, pin_memory=True)  # at train.py:12"
    ]


def test_foreach_only_class_gets_foreach_and_a_fused_user_is_not_told_again():
    setup = _setup(cls="Adadelta", offers=["foreach"])
    assert _hows(in_user_terms(_findings(), setup))[0] == [
        "torch.optim.Adadelta(..., foreach=True)  # at train.py:20"
    ]
    fused = in_user_terms(_findings(), _setup(cls="AdamW", fused=True))
    assert fused[0].fixes == ()
    assert not any("fused=True" in how for hows in _hows(fused) for how in hows)


def test_hf_trainer_user_gets_training_arguments():
    opt, loader = _hows(in_user_terms(_findings(), _setup("hf_trainer", cls="AdamW")))
    assert opt == ['TrainingArguments(optim="adamw_torch_fused")']
    assert loader == [
        "TrainingArguments(dataloader_num_workers=4, dataloader_persistent_workers=True, "
        "dataloader_pin_memory=True)"
    ]


def test_lightning_user_gets_datamodule_and_configure_optimizers():
    opt, loader = _hows(in_user_terms(_findings(), _setup("lightning")))
    assert opt == ["configure_optimizers(): torch.optim.SGD(..., fused=True)  # at train.py:20"]
    assert loader[0].startswith("LightningDataModule.train_dataloader(): DataLoader(..., ")


def test_diagnose_writes_the_optimizer_fix_for_the_captured_class():
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.records import Run, Step

    steps = [
        Step(i, i * 0.01, 0.0, 0.0, 0.01, 0.0, batch_size=64, forward_s=0.002,
             backward_s=0.003, optimizer_s=0.005, backward_calls=1, optimizer_calls=1)
        for i in range(20)
    ]  # fmt: skip
    run = Run("profile", steps=steps, extra={"setup": _setup(cls="SGD")})
    found = {f.kind: f for f in diagnose(run)}
    hows = [fix.how for fix in found["optimizer_bound"].fixes]
    assert hows[0] == "torch.optim.SGD(..., fused=True)  # at train.py:20"
    assert not any("AdamW" in how for how in hows)
    run.extra["setup"] = _setup(cls="AdamW", fused=True)
    hows = [fix.how for fix in diagnose(run)[0].fixes]
    assert not any("fused=True" in how for how in hows)


def test_fabric_and_accelerate_fixes_are_made_before_the_framework_takes_over():
    opt, loader = _hows(in_user_terms(_findings(), _setup("fabric")))
    assert opt == ["torch.optim.SGD(..., fused=True), before fabric.setup(model, optimizer)"
                   "  # at train.py:20"]  # fmt: skip
    assert loader[0].endswith(", before fabric.setup_dataloaders(loader)  # at train.py:12")
    opt, loader = _hows(in_user_terms(_findings(), _setup("accelerate")))
    assert opt[0].endswith(", before accelerator.prepare(model, optimizer)  # at train.py:20")
    assert ", before accelerator.prepare(..., loader); " in loader[0]


def test_precision_and_compile_in_fabric_and_accelerate_terms():
    from gpuwise.diagnose.fixes.terms import framework_setting

    setup = _setup("fabric")
    assert framework_setting("autocast_bf16", {"autocast": True}, setup) == (
        'Fabric(precision="bf16-mixed")'
    )
    assert "before fabric.setup(model" in framework_setting("compile", {"compile": True}, setup)
    accelerate = _setup("accelerate")
    assert framework_setting("compile", {"compile": True}, accelerate) == (
        'Accelerator(dynamo_backend="inductor")'
    )


def test_framework_is_read_from_the_stack_most_specific_first():
    import os

    from gpuwise.profiling.setup_capture import framework_of

    def site(*parts: str) -> str:
        return os.sep + os.path.join("env", "site-packages", *parts)

    fabric = site("lightning", "fabric", "fabric.py")
    trainer = site("lightning", "pytorch", "trainer", "trainer.py")
    hf = site("transformers", "trainer.py")
    accelerate = site("accelerate", "accelerator.py")
    assert framework_of([fabric, "train.py"]) == "fabric"
    assert framework_of([fabric, trainer, "train.py"]) == "lightning"  # the Trainer on Fabric
    assert framework_of([accelerate, hf, "train.py"]) == "hf_trainer"
    assert framework_of([accelerate, "train.py"]) == "accelerate"


def test_accelerate_fix_goes_on_the_optimizer_and_loader_handed_to_prepare():
    setup = _setup("accelerate", cls="AdamW")
    plain = dict(setup["optimizers"][0])
    prepared = dict(plain, line=21, prepared_at={"file": "/x/train.py", "line": 30})
    setup["optimizers"] = [plain, prepared]  # a reference optimizer beside the prepared one
    setup["loaders"].append(dict(setup["loaders"][0], line=13, prepared_at={"line": 30}))
    opt, loader = _hows(in_user_terms(_findings(), setup))
    assert opt == ["torch.optim.AdamW(..., fused=True), before accelerator.prepare(model, "
                   "optimizer)  # at train.py:21"]  # fmt: skip
    assert loader[0].endswith("DataLoaderConfiguration(non_blocking=True))  # at train.py:13")


def test_an_update_with_no_faster_flag_is_spread_with_the_frameworks_accumulation():
    accelerate = (
        "Accelerator(gradient_accumulation_steps=4), the step inside "
        "`with accelerator.accumulate(model):`"
    )
    for framework, accumulate in [
        ("plain", "gradient accumulation"),
        ("accelerate", accelerate),
        ("lightning", "Trainer(accumulate_grad_batches=4)"),
        ("hf_trainer", "TrainingArguments(gradient_accumulation_steps=4)"),
    ]:
        setup = _setup(framework, cls="LBFGS", offers=[])
        (how,) = _hows(in_user_terms(_findings()[:1], setup))[0]
        spread = "a larger batch (see the batch fix) or fewer optimizer steps per sample"
        assert how == f"{spread} ({accumulate})"


def test_accelerate_settings_point_at_the_accelerator_that_prepared_the_optimizer():
    from gpuwise.diagnose.fixes.terms import first_record
    from gpuwise.records import Fix

    setup = _setup("accelerate", cls="AdamW")
    site = {"file": "/x/train.py", "line": 5}
    setup["optimizers"][0]["prepared_at"] = {"file": "/x/train.py", "line": 30, "accelerator": site}
    other = {"file": "/x/train.py", "line": 40, "accelerator": {"file": "/x/train.py", "line": 35}}
    setup["loaders"] = [
        {"file": "/x/train.py", "line": 12, "prepared_at": other},  # another accelerator's
        {"file": "/x/train.py", "line": 14, "prepared_at": dict(site, line=30, accelerator=site)},
    ]
    assert first_record(setup, "loaders")["line"] == 14  # handed over with the optimizer
    precision = Finding("fp32", "info", "p", {}, 1.5, (Fix("bf16", "with torch.autocast(x)"),))
    pinned = Finding("pageable_h2d", "info", "h", {}, 1.5, (Fix("pin", "pin_memory=True"),))
    (how,), (pin,) = _hows(in_user_terms([precision, pinned], setup))
    assert how == 'Accelerator(mixed_precision="bf16")  # at train.py:5'
    assert pin == (
        "DataLoader(..., pin_memory=True), before accelerator.prepare(..., loader); "
        "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))"
        "  # at train.py:14"
    )


def test_fp16_tensor_cores_get_each_frameworks_fp16_setting():
    from gpuwise.diagnose.fixes.catalog import mixed_precision

    fp16 = mixed_precision("7.0", cpu_bf16=False)
    assert fp16 is not None
    finding = [Finding("fp32", "info", "p", {}, 1.5, (fp16,))]
    for framework, how in [
        ("accelerate", 'Accelerator(mixed_precision="fp16")'),
        ("lightning", 'Trainer(precision="16-mixed")'),
        ("fabric", 'Fabric(precision="16-mixed")'),
        ("hf_trainer", "TrainingArguments(fp16=True)"),
    ]:
        assert _hows(in_user_terms(finding, _setup(framework))) == [[how]]
    bf16 = mixed_precision("8.0", cpu_bf16=False)
    assert bf16 is not None
    bf16_finding = [Finding("fp32", "info", "p", {}, 1.5, (bf16,))]
    assert _hows(in_user_terms(bf16_finding, _setup("accelerate"))) == [
        ['Accelerator(mixed_precision="bf16")']
    ]


def test_accelerate_loader_workers_with_pinned_memory_copy_without_blocking():
    setup = _setup("accelerate")
    _, loader = _hows(in_user_terms(_findings(), setup))
    assert loader == [
        "DataLoader(..., num_workers=4, persistent_workers=True, pin_memory=True), before "
        "accelerator.prepare(..., loader); "
        "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))"
        "  # at train.py:12"
    ]
