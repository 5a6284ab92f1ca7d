"""Built-in models for sizing, written compactly here so that no torchvision is needed.

Each is the standard architecture at its published size: ResNet-18/50 (He et al. 2015,
11.7 M / 25.6 M parameters), ViT-B/16 (Dosovitskiy et al. 2020, 86.6 M), BERT-base
(Devlin et al. 2018, encoder plus masked-LM head, 109.5 M) and GPT-2 small (Radford et al.
2019, 124 M with the output layer tied to the token embedding), and a small MNIST MLP
(0.67 M) that shows where a GPU stops paying off. Attention uses
``scaled_dot_product_attention``, as current PyTorch models do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class InputSpec:
    """What one sample fed to a model looks like.

    Attributes:
        kind: ``"image"`` (float tensor) or ``"tokens"`` (int64 token ids).
        shape: Shape of one sample, without the batch dimension.
        vocab_size: Number of token ids (``"tokens"`` only).
        num_classes: Classes the loss draws targets from (``"image"`` only).
    """

    kind: str
    shape: tuple[int, ...]
    vocab_size: int | None = None
    num_classes: int | None = None


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in model: its factory and its default input."""

    factory: Callable[[], nn.Module]
    input_spec: InputSpec


def _conv_bn(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(c_out))


class _Block(nn.Module):
    """Residual block: basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 with 4x expansion)."""

    def __init__(self, c_in: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        c_out = width * 4 if bottleneck else width
        if bottleneck:
            convs = [_conv_bn(c_in, width, 1), _conv_bn(width, width, 3, stride)]
            convs.append(_conv_bn(width, c_out, 1))
        else:
            convs = [_conv_bn(c_in, width, 3, stride), _conv_bn(width, c_out, 3)]
        self.convs = nn.ModuleList(convs)
        self.shortcut = _conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else None
        self.c_out = c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for i, conv in enumerate(self.convs):
            y = conv(y)
            if i < len(self.convs) - 1:
                y = F.relu(y)
        skip: torch.Tensor = x if self.shortcut is None else self.shortcut(x)
        return F.relu(y + skip)


class ResNet(nn.Module):
    """ResNet for 1000-class images (the torchvision layout)."""

    def __init__(self, depths: tuple[int, ...], bottleneck: bool, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        c_in = 64
        for stage, depth in enumerate(depths):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                block = _Block(c_in, 64 * 2**stage, stride, bottleneck)
                blocks.append(block)
                c_in = block.c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images, shape (B, num_classes)."""
        x = self.blocks(self.stem(x))
        logits: torch.Tensor = self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return logits


def _dropout(p: float) -> nn.Module:
    """Dropout when ``p`` > 0; no module at all otherwise (nothing traced)."""
    return nn.Dropout(p) if p else nn.Identity()


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool, dropout: float = 0.0) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.causal = causal
        self.dropout = dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, S, D = x.shape  # batch, sequence, model width
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=self.causal, dropout_p=p
        )
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(B, S, D))
        return out


class _TransformerLayer(nn.Module):
    """A transformer layer: pre-norm (ViT, GPT-2) or post-norm (BERT)."""

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool = False,
        pre_norm: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads, causal, dropout)
        self.attn_dropout = _dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        mlp = [nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), _dropout(dropout)]
        self.mlp = nn.Sequential(*mlp)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        out: torch.Tensor
        if self.pre_norm:
            x = x + self.attn_dropout(self.attn(self.norm1(x), mask))
            out = x + self.mlp(self.norm2(x))
        else:
            x = self.norm1(x + self.attn_dropout(self.attn(x, mask)))
            out = self.norm2(x + self.mlp(x))
        return out


class VisionTransformer(nn.Module):
    """ViT: 16x16 patches, a class token, learned positions, a linear head."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.Sequential(*[_TransformerLayer(dim, dim // 64) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images, shape (B, 1000)."""
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        logits: torch.Tensor = self.head(self.norm(self.layers(x))[:, 0])
        return logits


class LanguageModel(nn.Module):
    """Token and position embeddings, transformer layers, an output layer tied to tokens."""

    def __init__(self, vocab: int, context: int, causal: bool, pre_norm: bool, types: int = 0):
        super().__init__()
        dim = 768
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.types = nn.Embedding(types, dim) if types else None
        self.embed_norm = None if pre_norm else nn.LayerNorm(dim)
        layers = [_TransformerLayer(dim, 12, causal, pre_norm) for _ in range(12)]
        self.layers = nn.Sequential(*layers)
        # GPT-2 ends with a LayerNorm; BERT's masked-LM head has dense + GELU + LayerNorm.
        self.head = nn.LayerNorm(dim) if pre_norm else _MlmTransform(dim)
        self.out_bias = nn.Parameter(torch.zeros(vocab)) if not pre_norm else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token (or masked-token) logits, shape (B, S, vocab)."""
        x = self.tokens(ids) + self.positions.weight[: ids.shape[1]]
        if self.types is not None:
            x = x + self.types.weight[0]
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return F.linear(self.head(self.layers(x)), self.tokens.weight, self.out_bias)


class _MlmTransform(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(F.gelu(self.dense(x)))
        return out


class BertQuestionAnswering(nn.Module):
    """BERT encoder with the SQuAD span head (start and end logits per token).

    As NVIDIA's DeepLearningExamples ``BertForQuestionAnswering`` trains it: token,
    position and segment embeddings, post-norm layers with dropout 0.1 on the embeddings,
    the attention probabilities and both residual branches, the additive padding mask
    added to every layer's attention scores, and a 2-way linear head.
    """

    def __init__(self, dim: int, depth: int, vocab: int = 30528, context: int = 512) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.types = nn.Embedding(2, dim)
        self.embed_norm = nn.LayerNorm(dim)
        self.embed_dropout = nn.Dropout(0.1)
        self.layers = nn.Sequential(
            *[_TransformerLayer(dim, dim // 64, pre_norm=False, dropout=0.1) for _ in range(depth)]
        )
        self.span = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Start and end logits, shape (B, S, 2)."""
        x = self.tokens(ids) + self.positions.weight[: ids.shape[1]] + self.types.weight[0]
        x = self.embed_dropout(self.embed_norm(x))
        # padding mask, added to the scores: (B, 1, 1, S), 0 where a token is real
        mask = torch.zeros(ids.shape[0], 1, 1, ids.shape[1], dtype=x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        logits: torch.Tensor = self.span(x)
        return logits


def squad_loss(logits: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """SQuAD's loss: the mean of cross-entropies of the start and the end position."""
    targets = torch.zeros(logits.shape[0], dtype=torch.long)
    start, end = logits.float().unbind(-1)
    return (F.cross_entropy(start, targets) + F.cross_entropy(end, targets)) / 2


def bert_base_squad() -> nn.Module:
    """BERT-base for SQuAD (768 wide, 12 layers; vocabulary padded to 30,528)."""
    return BertQuestionAnswering(768, 12)


def bert_large_squad() -> nn.Module:
    """BERT-large for SQuAD (1,024 wide, 24 layers, 16 heads)."""
    return BertQuestionAnswering(1024, 24)


def resnet18() -> nn.Module:
    """ResNet-18 (11,689,512 parameters)."""
    return ResNet((2, 2, 2, 2), bottleneck=False)


def resnet50() -> nn.Module:
    """ResNet-50 (25,557,032 parameters)."""
    return ResNet((3, 4, 6, 3), bottleneck=True)


def vit_b_16() -> nn.Module:
    """ViT-B/16 at 224x224 (86,567,656 parameters)."""
    return VisionTransformer()


def bert_base() -> nn.Module:
    """BERT-base with its masked-LM head (109,514,298 parameters; vocabulary 30,522)."""
    return LanguageModel(30522, 512, causal=False, pre_norm=False, types=2)


def gpt2_small() -> nn.Module:
    """GPT-2 small (124,439,808 parameters; vocabulary 50,257, 1,024 positions)."""
    return LanguageModel(50257, 1024, causal=True, pre_norm=True)


def mnist_mlp() -> nn.Module:
    """A small MLP for 28x28 digits, 784-512-512-10 (669,706 parameters).

    Small on purpose: it shows where a GPU's launch and transfer overhead outweigh its
    speed (``gpuwise advise mnist_mlp``).
    """
    layers = [nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, 10))


_IMAGE = InputSpec("image", (3, 224, 224), num_classes=1000)

BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "resnet18": BuiltinModel(resnet18, _IMAGE),
    "resnet50": BuiltinModel(resnet50, _IMAGE),
    "vit_b_16": BuiltinModel(vit_b_16, _IMAGE),
    "bert_base": BuiltinModel(bert_base, InputSpec("tokens", (512,), vocab_size=30522)),
    "gpt2_small": BuiltinModel(gpt2_small, InputSpec("tokens", (1024,), vocab_size=50257)),
    "mnist_mlp": BuiltinModel(mnist_mlp, InputSpec("image", (784,), num_classes=10)),
}
"""Built-in model names and their default inputs."""
