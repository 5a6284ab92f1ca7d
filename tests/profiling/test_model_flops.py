"""The model's FLOPs counted on the job's first iteration, against hand-computed FLOPs.

Each loop runs for real under ``gpuwise.profile()`` (the hooks, a real DataLoader, a real
optimizer); the count is checked to the FLOP against the formulas written out here: a
matrix multiply of (m, k) by (k, n) is 2·m·k·n FLOPs, a convolution 2·B·Cout·H·W·Cin·k·k,
attention 4·B·H·T²·Q forward and 10·B·H·T²·Q backward (five products: the scores again,
dV, dP, dQ, dK). A layer's backward is 2x its forward (the input's and the weight's
gradients), 1x for the first layer, whose input needs no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

from gpuwise.profiling.flop_tally import FlopTally
from gpuwise.profiling.model_flops import matmul_params
from gpuwise.session import profile

pytestmark = pytest.mark.kernels


def _train(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch: int, **options: Any
) -> Any:
    """Train one epoch under gpuwise.profile(); return the Run."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=batch)
    with profile(sample=False, diagnose=False) as prof:
        for x, y in loader:
            with torch.autocast(
                "cpu", dtype=options.get("autocast", torch.bfloat16), enabled="autocast" in options
            ):
                out = model(x)
                loss = nn.functional.cross_entropy(out.float().flatten(0, -2), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
    assert prof.run is not None
    return prof.run


def _count(run: Any) -> dict[str, Any]:
    (count,) = run.extra["model_flops"]["counted"]
    return dict(count)


def test_mlp_counts_forward_and_backward_exactly() -> None:
    torch.manual_seed(0)
    B, D, H, C = 32, 48, 64, 10
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, C))
    run = _train(model, torch.randn(4 * B, D), torch.randint(0, C, (4 * B,)), B)
    count = _count(run)
    forward = 2 * B * D * H + 2 * B * H * C
    backward = 2 * B * D * H + 2 * (2 * B * H * C)  # the first layer: weight gradient only
    assert count["forward_flops"] == forward
    assert count["backward_flops"] == backward
    assert count["model_flops"] == count["hardware_flops"] == forward + backward
    assert count["recompute_flops"] == 0
    assert count["samples"] == B
    assert count["phase"] == "train"
    assert count["precision"] == "fp32"
    assert count["params"] == sum(p.numel() for p in model.parameters())
    assert count["tokens"] is None
    assert len(run.steps) == 4  # no extra step ran


def test_cnn_counts_convolutions_exactly() -> None:
    torch.manual_seed(0)
    B, S, C = 8, 12, 5  # batch, image side, classes
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, C),
    )
    run = _train(model, torch.randn(2 * B, 3, S, S), torch.randint(0, C, (2 * B,)), B)
    conv1 = 2 * B * 8 * S * S * 3 * 3 * 3
    conv2 = 2 * B * 16 * S * S * 8 * 3 * 3
    head = 2 * B * 16 * C
    count = _count(run)
    assert count["forward_flops"] == conv1 + conv2 + head
    assert count["backward_flops"] == conv1 + 2 * conv2 + 2 * head


class Block(nn.Module):
    """A pre-norm transformer block: causal attention through SDPA, then a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """A GPT-2-shaped language model: token and position tables, blocks, a tied head."""

    def __init__(self, vocab: int, seq_len: int, layers: int, width: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1])
        x = self.wte(ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


V, T, L, D, NH, B = 64, 16, 2, 32, 4, 4  # vocab, sequence, layers, width, heads, batch


def _gpt_run() -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = TinyGPT(V, T, L, D, NH)
    ids = torch.randint(0, V, (3 * B, T + 1))
    return model, _train(model, ids[:, :-1], ids[:, 1:], B)


def test_transformer_counts_projections_and_attention_exactly() -> None:
    _, run = _gpt_run()
    count = _count(run)
    per_layer_weights = D * 3 * D + D * D + D * 4 * D + 4 * D * D
    linear = L * per_layer_weights + V * D  # the tied head multiplies by the token table
    tokens = B * T
    attention = 4 * B * NH * T * T * (D // NH)  # per layer, forward (no causal discount)
    assert count["forward_flops"] == 2 * linear * tokens + L * attention
    # every layer's input needs a gradient (the embeddings train): 2x each, 2.5x attention
    assert count["backward_flops"] == 4 * linear * tokens + L * attention * 10 // 4
    assert count["tokens"] == {
        "batch": B,
        "seq_len": T,
        "layers": L,
        "width": D,
        "attention_seq_len": T,
        "attention_from": "kernels",
    }
    assert count["samples"] == B


def test_llm_terms_match_nanogpts_estimate_mfu_formula() -> None:
    """nanoGPT's estimate_mfu: N = parameters less the position table (the token table is
    the tied head); flops_per_token = 6N + 12·L·H·Q·T; MFU = that * tokens/s / peak."""
    from gpuwise.efficiency.model_mfu import counted_mfu_section

    model, run = _gpt_run()
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    assert matmul_params([model]) == n
    per_token = 6 * n + 12 * L * NH * (D // NH) * T
    peak = 1e12  # an injected peak: the comparison is of formulas, not of this CPU
    section = counted_mfu_section(run, peak_flops_s=peak, peak_source="test")
    assert section is not None
    tokens = section["tokens"]
    assert tokens["flops_per_token"] == per_token
    assert tokens["params"] == n
    dt = section["step_s"]  # nanoGPT's dt: one iteration's seconds
    nanogpt_mfu = per_token * T * B / dt / peak  # fwdbwd_per_iter = B sequences of T
    assert tokens["mfu"] == pytest.approx(nanogpt_mfu, rel=1e-12)
    assert tokens["tokens_per_s"] == pytest.approx(B * T / dt, rel=1e-12)
    # the exact count differs from the formula by what the formula leaves out: attention's
    # backward recomputes the scores (14, not 12, per layer), LayerNorm and bias parameters
    # do no matrix multiply
    exact = section["model_flops_per_step"] / (B * T)
    norms_and_biases = n - (L * (D * 3 * D + D * D + 8 * D * D) + V * D)
    assert exact == per_token + 2 * L * D * T - 6 * norms_and_biases


def test_every_module_called_at_the_top_of_the_loop_counts_in_n() -> None:
    """A loop calling its parts one by one (as a LightningModule's training_step may)."""
    torch.manual_seed(0)
    embed, head, loss_fn = nn.Embedding(V, D), nn.Linear(D, V), nn.CrossEntropyLoss()
    params = [*embed.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    ids = torch.randint(0, V, (2 * B, T + 1))
    with profile(sample=False, diagnose=False) as prof:
        for (batch,) in DataLoader(TensorDataset(ids), batch_size=B):
            logits = head(embed(batch[:, :-1]))
            loss_fn(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
            opt.step()
    assert prof.run is not None
    count = _count(prof.run)
    assert count["params"] == V * D + V  # the head; the untied token table is no matmul
    assert count["tokens"]["seq_len"] == T
    assert count["model_flops"] == 3 * 2 * B * T * D * V  # the head's input needs a gradient


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointing_recomputes_into_hardware_flops_only(reentrant: bool) -> None:
    torch.manual_seed(0)
    Bt, Dm = 16, 32

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(Dm, Dm)
            self.block = nn.Sequential(nn.Linear(Dm, Dm), nn.ReLU(), nn.Linear(Dm, Dm), nn.ReLU())
            self.head = nn.Linear(Dm, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = checkpoint(self.block, self.stem(x), use_reentrant=reentrant)
            return self.head(x)

    run = _train(Checkpointed(), torch.randn(2 * Bt, Dm), torch.randint(0, 3, (2 * Bt,)), Bt)
    count = _count(run)
    mm = 2 * Bt * Dm * Dm
    model_flops = (mm + 2 * mm + 2 * Bt * Dm * 3) + (mm + 2 * 2 * mm + 2 * 2 * Bt * Dm * 3)
    assert count["model_flops"] == model_flops
    assert count["recompute_flops"] == 2 * mm  # the block's two multiplies, once more
    assert count["hardware_flops"] == model_flops + 2 * mm


def test_a_whole_checkpointed_model_is_recomputed_inside_the_count() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16, requires_grad=True)  # reentrant checkpointing needs an input grad
    with profile(sample=False, diagnose=False) as prof:
        for _ in range(3):
            checkpoint(model, x, use_reentrant=True).sum().backward()
            opt.step()
    assert prof.run is not None
    (count,) = prof.run.extra["model_flops"]["counted"]
    forward = 2 * 8 * 16 * 16 + 2 * 8 * 16 * 4
    assert count["phase"] == "train"
    assert count["recompute_flops"] == forward
    assert count["model_flops"] == 3 * forward  # x needs a gradient: 2x backward everywhere


def test_autocast_and_half_models_report_their_precision() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    inputs, targets = torch.randn(16, 16), torch.randint(0, 4, (16,))
    count = _count(_train(model, inputs, targets, 8, autocast=torch.bfloat16))
    assert count["precision"] == "bf16"
    assert count["flops_by_precision"] == {"bf16": count["hardware_flops"]}
    assert count["params_dtype"] == "float32"
    half = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).to(torch.bfloat16)
    count = _count(_train(half, inputs.to(torch.bfloat16), targets, 8))
    assert count["precision"] == "bf16"
    assert count["params_dtype"] == "bfloat16"


def test_a_loop_without_a_loader_counts_its_first_iteration() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 8, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(sample=False, diagnose=False) as prof:
        for _ in range(5):
            model(torch.randn(6, 8)).sum().backward()
            opt.step()
    assert prof.run is not None
    count = _count(prof.run)
    assert count["samples"] == 6  # the model's input, no loader to say it
    assert count["model_flops"] == 2 * 6 * 8 * 8 * 2  # forward + weight gradient
    assert len(prof.run.steps) == 5  # one per optimizer step, the first included


def test_an_episode_counts_every_forward_of_its_step() -> None:
    torch.manual_seed(0)
    policy = nn.Linear(4, 2, bias=False)
    opt = torch.optim.Adam(policy.parameters(), lr=0.01)
    with profile(sample=False, diagnose=False) as prof:
        for _ in range(3):  # an episode: 7 batch-1 forwards, then one backward and one step
            loss = sum(policy(torch.randn(1, 4)).sum() for _ in range(7))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert prof.run is not None
    count = _count(prof.run)
    assert count["forward_flops"] == 7 * 2 * 1 * 4 * 2
    assert count["backward_flops"] == 7 * 2 * 1 * 4 * 2  # the weight's gradient only
    assert count["samples"] == 7
    assert [(s.backward_calls, s.optimizer_calls) for s in prof.run.steps] == [(1, 1)] * 3


def test_gradient_accumulation_counts_one_micro_step_and_then_stops_counting() -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    torch.manual_seed(0)
    model = nn.Linear(8, 8, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    modes = []
    with profile(sample=False, diagnose=False) as prof:
        for i, (x,) in enumerate(DataLoader(TensorDataset(torch.randn(48, 8)), batch_size=4)):
            model(x).sum().backward()
            if i % 3 == 2:  # 3 micro-batches per optimizer step
                opt.step()
                opt.zero_grad()
            modes.append(_get_current_dispatch_mode())
    assert prof.run is not None
    (count,) = prof.run.extra["model_flops"]["counted"]
    assert count["model_flops"] == 2 * 4 * 8 * 8 * 2  # one micro-batch: forward, weight grad
    assert count["samples"] == 4
    assert modes[0] is not None  # the first micro-step ran under the count
    assert all(mode is None for mode in modes[1:])  # and nothing after it
    assert [s.batch_size for s in prof.run.steps] == [12] * 4  # 3 micro-batches of 4
    from gpuwise.efficiency.model_mfu import counted_mfu_section

    section = counted_mfu_section(prof.run, peak_flops_s=1e12, peak_source="test")
    assert section is not None
    assert section["model_flops_per_step"] == 3 * count["model_flops"]


def test_inference_without_a_loader_counts_one_forward_and_then_stops_counting() -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    model = nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8)
    modes = []
    with profile(sample=False, diagnose=False) as prof, torch.no_grad():
        for _ in range(5):
            model(x)
            modes.append(_get_current_dispatch_mode())
    assert prof.run is not None
    (count,) = prof.run.extra["model_flops"]["counted"]
    assert (count["phase"], count["model_flops"], count["samples"]) == ("eval", 2 * 4 * 8 * 8, 4)
    assert modes[0] is not None
    assert all(mode is None for mode in modes[1:])


def test_an_evaluation_first_job_still_gets_its_training_count() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4)
    with profile(sample=False, diagnose=False) as prof:
        with torch.no_grad():
            for (x,) in loader:
                model(x)
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
    assert prof.run is not None
    phases = [(c["phase"], c["model_flops"]) for c in prof.run.extra["model_flops"]["counted"]]
    assert phases == [("eval", 2 * 4 * 8 * 4), ("train", 2 * 2 * 4 * 8 * 4)]


def test_the_tally_leaves_results_unchanged() -> None:
    torch.manual_seed(0)
    model = TinyGPT(V, T, L, D, NH)
    ids = torch.randint(0, V, (B, T))
    plain = model(ids)
    with FlopTally() as tally:
        counted = model(ids)
    assert torch.equal(plain, counted)
    assert tally.forward_flops > 0
    assert math.prod(tally.tokens or ()) == B * T


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("tf32", "autocast", "expected"),
    [(True, None, "tf32"), (False, None, "fp32"), (False, torch.float16, "fp16")],
)
def test_cuda_steps_count_their_backward_and_their_tf32_setting(
    tf32: bool, autocast: torch.dtype | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA the autograd engine runs backward on its device thread: still counted."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", tf32)
    Bt, Dm = 16, 64
    model = nn.Sequential(nn.Linear(Dm, Dm), nn.ReLU(), nn.Linear(Dm, 4)).cuda()
    x = torch.randn(Bt, Dm, device="cuda")
    with (
        FlopTally() as tally,
        torch.autocast("cuda", dtype=autocast or torch.float16, enabled=autocast is not None),
    ):
        model(x).float().sum().backward()
    assert tally.device == "cuda"
    assert tally.precision == expected
    assert tally.forward_flops == 2 * Bt * Dm * Dm + 2 * Bt * Dm * 4
    assert tally.backward_flops == 2 * Bt * Dm * Dm + 2 * (2 * Bt * Dm * 4)


def test_the_explicit_api_adds_the_mfu_when_it_diagnoses() -> None:
    torch.manual_seed(0)
    model = nn.Linear(32, 8, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(sample=False) as prof:
        for (x,) in DataLoader(TensorDataset(torch.randn(40, 32)), batch_size=8):
            model(x).sum().backward()
            opt.step()
    assert prof.run is not None
    mfu = prof.run.extra["mfu"]
    assert mfu["source"] == "counted"
    assert mfu["flops_per_sample"] == 2 * 32 * 8 * 2  # forward and the weight's gradient
    assert mfu["mfu"] == pytest.approx(
        mfu["model_flops_per_step"] / (mfu["step_s"] * mfu["peak_tflops_s"] * 1e12)
    )
