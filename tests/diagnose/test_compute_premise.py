"""Compute fixes only where their premise holds in size (issue 40, shapes 1 and 6).

Mixed precision speeds up matmuls: a 4-128-2 MLP at batch 1 (MFU 0.0001 %) gets no bf16 on a
CPU with bf16 hardware, a model at 30 % of the peak does; and a job too small to judge is
told "nothing to fix" with no fix after it.
"""

from __future__ import annotations

from gpuwise.diagnose.rules import diagnose
from gpuwise.records import Run, Step

BF16_CPU = {"id": "cpu", "cores": 2, "flags": ["avx2", "avx512_bf16"]}


def _run(step_s: float, mfu: float | None) -> Run:
    steps = [Step(i, i * step_s, 0.0, 0.0, step_s, 0.0) for i in range(30)]
    run = Run("profile", steps=steps)
    run.devices = [dict(BF16_CPU)]
    if mfu is not None:
        run.extra["mfu"] = {"mfu": mfu, "source": "counted"}
    return run


def _hows(run: Run) -> list[str]:
    return [x.how for f in diagnose(run) for x in f.fixes]


def test_a_model_at_a_millionth_of_the_peak_gets_no_bf16() -> None:
    run = _run(0.01, mfu=1.3e-6)  # 10 ms steps: material, but not in the matmuls
    found = diagnose(run)
    assert found[0].kind == "healthy"
    assert not any("bfloat16" in x.how for f in found for x in f.fixes)


def test_a_model_at_a_third_of_the_peak_gets_bf16() -> None:
    assert "with torch.autocast('cpu', dtype=torch.bfloat16): loss = model(x)" in _hows(
        _run(0.01, mfu=0.3)
    )


def test_too_small_says_nothing_to_fix_and_offers_nothing() -> None:
    run = _run(0.0003, mfu=None)  # 0.3 ms steps, no optimizer, MFU unknown
    found = diagnose(run)
    assert found[0].kind == "healthy"
    assert found[0].summary == (
        "Too small to judge per-step costs (steps of 0.3 ms: fixed costs dominate); nothing to fix"
    )
    assert found[0].fixes == ()
    assert not any("bfloat16" in h for h in _hows(run))


def test_without_a_peak_the_counted_flops_rate_decides() -> None:
    run = _run(0.01, mfu=None)
    counted = {"phase": "eval", "hardware_flops": 1536, "samples": 1}  # one batch-1 forward
    run.extra["model_flops"] = {"counted": [counted]}
    assert not any("bfloat16" in h for h in _hows(run))  # 0.15 MFLOP/s
    big = _run(0.01, mfu=None)
    big.extra["model_flops"] = {"counted": [{**counted, "phase": "train", "hardware_flops": 5e9}]}
    assert any("bfloat16" in h for h in _hows(big))  # 500 GFLOP/s: the step is matmuls
