from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuwise.sizing.hardware import calibration
from gpuwise.sizing.job.models import bert_base_squad, bert_large_squad, squad_loss
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.live import LiveBytesMode
from gpuwise.sizing.step.attention import attention_mode
from gpuwise.sizing.step.cuda_ops import cuda_dropout


def test_transformer_rows_parse_and_each_names_its_source() -> None:
    rows = calibration.load_transformer_rows()
    assert len(rows) == 36  # 9 cards x 2 precisions x BERT-base/large
    assert {r.model for r in rows} == {"BERT-base", "BERT-large"}
    assert all(r.metric == "train_throughput" and r.unit == "sequences/s" for r in rows)
    assert all(r.batch for r in rows)
    for r in rows:
        assert "lambdal/deeplearning-benchmark @aa5addb" in r.source
        column = "bert_base_squad" if r.model == "BERT-base" else "bert_large_squad"
        assert f"column {column}" in r.source
        assert "--max_seq_length=384" in r.source
    a100 = next(
        r
        for r in rows
        if r.model == "BERT-base" and r.gpu == "NVIDIA A100 80GB SXM" and "amp" in r.precision
    )
    assert (a100.value, a100.batch) == (443.0, 320)
    # held out: none of them is among the calibration rows
    assert not set(rows) & set(calibration.load_measurements())


def test_squad_models_have_bert_sizes() -> None:
    base = sum(p.numel() for p in bert_base_squad().parameters())
    large = sum(p.numel() for p in bert_large_squad().parameters())
    # encoder 12 x 7,087,872 (24 x 12,596,224) + embeddings (vocab 30,528) + 2-way head
    assert base == 12 * 7_087_872 + (30528 + 512 + 2) * 768 + 2 * 768 + 768 * 2 + 2
    assert large == 24 * 12_596_224 + (30528 + 512 + 2) * 1024 + 2 * 1024 + 1024 * 2 + 2


def _traced(fn: object, *shape: int) -> list[str]:
    tracker = LiveBytesMode(cuda_rounding=False)
    tracker.record_ops = True
    with FakeTensorMode(), tracker, tracker.in_phase("forward"):
        x = torch.empty(*shape, dtype=torch.float16)
        fn(x)  # type: ignore[operator]
    return [o.name for o in tracker.ops]


def test_dropout_traces_as_cudas_one_fused_kernel() -> None:
    plain = _traced(lambda x: F.dropout(x, 0.1), 64, 128)
    assert "bernoulli_" in plain  # the CPU decomposition: several passes
    with cuda_dropout():
        fused = _traced(lambda x: F.dropout(x, 0.1), 64, 128)
    assert fused == ["native_dropout"]


def test_fused_attention_keeps_dropout_inside_its_kernel() -> None:
    def attend(q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)

    with attention_mode("sdpa"):
        fused = _traced(attend, 2, 4, 128, 64)
    assert fused == ["_scaled_dot_product_flash_attention_for_cpu"]
    with cuda_dropout(), attention_mode("eager"):
        eager = _traced(attend, 2, 4, 128, 64)
    assert "native_dropout" in eager
    assert "_softmax" in eager


def test_squad_step_moves_fewer_bytes_with_fused_attention() -> None:
    ids = torch.zeros(2, 128, dtype=torch.long)
    kw = {"batch_size": 2, "optimizer": "adamw", "loss_fn": squad_loss}
    eager = estimate(bert_base_squad, ids, attention="eager", **kw)  # type: ignore[arg-type]
    fused = estimate(bert_base_squad, ids, attention="sdpa", **kw)  # type: ignore[arg-type]
    assert eager.flops_per_step > 0
    # the score matrix (2 x 12 x 128 x 128 fp32 = 1.5 MiB a layer) written and read again
    scores = 2 * 12 * 128 * 128 * 4
    moved = sum(o.bytes_moved for o in eager.ops) - sum(o.bytes_moved for o in fused.ops)
    assert moved > 12 * 8 * scores
    assert {o.name for o in fused.ops if o.phase == "forward"}.isdisjoint({"bernoulli_", "div_"})
