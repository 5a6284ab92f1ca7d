from __future__ import annotations

import pytest
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.step.peft import LoraSpec, add_lora, freeze_parameters
from tests.sizing import factories

LLAMA = "tests.sizing.factories:tiny_llama"


def _trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize(
    ("factory", "targets"),
    [
        (factories.tiny_llama, None),  # PEFT's default for llama: q_proj, v_proj
        (factories.tiny_gpt2, None),  # c_attn, a transformers Conv1D
        (factories.tiny_bert, None),  # query, value
        (factories.tiny_llama, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        (factories.tiny_llama, "all-linear"),
    ],
)
def test_adapters_match_peft_parameter_counts(factory, targets) -> None:  # type: ignore[no-untyped-def]
    peft = pytest.importorskip("peft", reason="the real PEFT checks the adapter counts")
    reference = peft.get_peft_model(factory(), peft.LoraConfig(r=4, target_modules=targets))
    ours = factory()
    spec_targets = () if targets is None else (targets,) if isinstance(targets, str) else targets
    add_lora(ours, LoraSpec(4, tuple(spec_targets)))
    assert _trainable(ours) == _trainable(reference)
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in reference.parameters()
    )


def test_lora_estimate_keeps_gradients_and_state_for_the_adapters_only() -> None:
    est = estimate(LLAMA, seq_len=32, batch_size=2, lora=LoraSpec(4), device="cpu")
    adapters = est.trainable_parameter_count
    assert adapters == 2 * ((64 * 4 + 4 * 64) + (64 * 4 + 4 * 32))  # q: 64->64, v: 64->32
    # AdamW: fp32 gradients and two fp32 moments for the adapters, nothing for the rest
    weights = est.parameter_count * 4
    buffers = sum(b.numel() * 4 for b in factories.tiny_llama().buffers())  # RoPE frequencies
    steady = weights + buffers + adapters * 4 + adapters * 8
    assert est.params_grads_optimizer_bytes == steady


def test_freeze_globs_and_exclusions() -> None:
    net = factories.tiny_llama()
    freeze_parameters(net, ("model.layers.*", "!model.layers.1.mlp"))
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    assert "model.layers.1.mlp.up_proj.weight" in trainable
    assert "model.layers.0.mlp.up_proj.weight" not in trainable
    assert "model.layers.1.self_attn.q_proj.weight" not in trainable
    assert "model.embed_tokens.weight" in trainable  # not matched: a glob, not a prefix


def test_plain_freeze_name_is_a_prefix_as_before() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    assert freeze_parameters(net, ("0",)) == 2
    assert [n for n, p in net.named_parameters() if p.requires_grad] == ["1.weight", "1.bias"]


def test_unmatched_pattern_lists_the_names() -> None:
    with pytest.raises(UsageError, match=r"--freeze encoder matches no parameter; .*model"):
        freeze_parameters(factories.tiny_llama(), ("encoder",))


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("16", LoraSpec(16)),
        ("8:q_proj,v_proj", LoraSpec(8, ("q_proj", "v_proj"))),
        ("8:all-linear:0.05", LoraSpec(8, ("all-linear",), 0.05)),
    ],
)
def test_lora_spec_parses(text: str, spec: LoraSpec) -> None:
    assert LoraSpec.parse(text) == spec


@pytest.mark.parametrize("text", ["0", "x", "8:q:2"])
def test_bad_lora_spec_says_the_form(text: str) -> None:
    with pytest.raises(UsageError, match=r"RANK\[:TARGETS\[:DROPOUT\]\]"):
        LoraSpec.parse(text)


def test_lora_without_defaults_asks_for_targets() -> None:
    with pytest.raises(UsageError, match="no default target modules for Sequential"):
        add_lora(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), LoraSpec(2))
