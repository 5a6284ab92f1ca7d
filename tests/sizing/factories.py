"""Small model factories that tests name as ``tests.sizing.factories:NAME``."""

from __future__ import annotations

import torch
from torch import nn

D_IN, HIDDEN, D_OUT = 32, 64, 10


def tiny_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(D_IN, HIDDEN, bias=False), nn.ReLU(), nn.Linear(HIDDEN, D_OUT, bias=False)
    )


def mlp_with_bias() -> nn.Module:
    return nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT))


def tiny_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def broken() -> nn.Module:
    raise ValueError("weights file missing")


def not_a_module() -> int:
    return 42


class _TinyLm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(1000, 32)
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 1000)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.tokens(ids)))


def tiny_lm() -> nn.Module:
    """A token model: integer ids of a 1,000-word vocabulary."""
    return _TinyLm()


class _DropPathBlock(nn.Module):
    """Stochastic depth as timm-style models write it: Python decisions on tensor values."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate
        self.fc = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.rand(1).item() < self.rate:
            return x
        return x + self.fc(x)


def drop_path_net() -> nn.Module:
    """Per-block drop rates from ``linspace(...).item()``, as timm builds them."""
    rates = [r.item() for r in torch.linspace(0.0, 0.1, 4)]
    return nn.Sequential(*[_DropPathBlock(r) for r in rates], nn.Linear(32, 10))


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.abs().max().item()


def data_dependent() -> nn.Module:
    """``.item()`` of a value computed from the batch: cannot be traced."""
    return nn.Sequential(nn.Linear(32, 32), _DataDependent())


def dropout_mlp() -> nn.Module:
    """Four repeated blocks with dropout, for ``--checkpoint`` (recomputed dropout)."""
    blocks = [nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1)) for _ in range(4)]
    return nn.Sequential(nn.Linear(D_IN, 64), nn.Sequential(*blocks), nn.Linear(64, D_OUT))


def _tiny_hf(config_name: str, model_name: str, **extra: object) -> nn.Module:
    """A two-layer Hugging Face model of width 64 and a 256-token vocabulary."""
    import transformers

    sizes: dict[str, object] = {
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
    }
    config = getattr(transformers, config_name)(**{**sizes, **extra})
    model: nn.Module = getattr(transformers, model_name)(config)
    return model


def tiny_llama() -> nn.Module:
    """A two-layer Hugging Face Llama (grouped-query attention, RMSNorm, SwiGLU)."""
    return _tiny_hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2)


def wide_vocab_llama() -> nn.Module:
    """``tiny_llama`` with an 8,192-token vocabulary: the logits outweigh the layers."""
    return _tiny_hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, vocab_size=8192)


def tiny_bert() -> nn.Module:
    """A two-layer Hugging Face BERT with dropout and eager attention."""
    return _tiny_hf("BertConfig", "BertForMaskedLM", attn_implementation="eager")


def tiny_gpt2() -> nn.Module:
    """A two-layer Hugging Face GPT-2 (``Conv1D`` projections, fused ``c_attn``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128)
    return GPT2LMHeadModel(config)


def wide_mlp() -> nn.Module:
    """A first layer of 8,192 weights: above bitsandbytes' 4,096-value 8-bit threshold."""
    return nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, D_OUT))


class OwnLinear(nn.Linear):
    """A model's own linear layer (as some Hugging Face models define): ``x @ W.T + b``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The same product, written out."""
        out = x @ self.weight.T
        return out if self.bias is None else out + self.bias


def llama_own_linear() -> nn.Module:
    """``tiny_llama`` whose layers' linear maps are ``OwnLinear`` (an ``nn.Linear`` subclass)."""
    net = tiny_llama()
    for name, module in list(net.named_modules()):
        if type(module) is nn.Linear and name != "lm_head":  # the head stays tied
            bias, dtype = module.bias is not None, module.weight.dtype
            own = OwnLinear(module.in_features, module.out_features, bias, dtype=dtype)
            parent, _, leaf = name.rpartition(".")
            setattr(net.get_submodule(parent), leaf, own)
    return net


def tiny_llama_tied() -> nn.Module:
    """``tiny_llama`` with ``tie_word_embeddings=True``: the head is the embedding's weight."""
    return _tiny_hf(
        "LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, tie_word_embeddings=True
    )
