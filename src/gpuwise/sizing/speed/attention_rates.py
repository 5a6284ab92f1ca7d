"""What a fused attention kernel reaches, per phase and sequence length, and the source.

The step-time model charges the fused flash / memory-efficient attention kernels a share
of the card's GEMM rate (``class_rates.gemm_share``), forward and backward, rolling off at
short sequences: on Hopper the H200's own measurement (``HOPPER_ATTENTION``), elsewhere
FlashAttention-2's published A100 shares (``FLASH_SHARE``).
"""

from __future__ import annotations

FLASH_SHARE = {"forward": 0.73, "backward": 0.63}
"""FlashAttention-2 reaches up to 73 % (forward) and 63 % (backward) of the A100's peak
(Dao, FlashAttention-2, 2023, section 4.1)."""
A100_MAMF_SHARE = 271.2 / 312
"""The A100 SXM's best GEMM over its peak (the MAMF row of ``measured_calibration.csv``):
FlashAttention-2's shares over it are its shares of the GEMM rate, 0.84 forward and 0.72
backward."""
FLASH_HALF_SEQ = 128
"""Sequence length at which a fused attention kernel runs at half its long-sequence rate:
an assumption (one 128-key block per 128-query block leaves its pipeline half used)."""

HOPPER_ATTENTION = {"forward": (0.53, FLASH_HALF_SEQ), "backward": (0.54, FLASH_HALF_SEQ)}
"""Fused attention on Hopper, per phase: its long-sequence share of the card's GEMM rate
and the key count at which it reaches half of that. The shares are fitted (least squares
of the log ratio) to this project's H200 rows at 2,048 to 8,192 keys
(``measured_calibration.csv``, ``SDPA forward`` and ``SDPA backward``:
``benchmarks/operator_rates_gpu.py``, bf16, head dim 64, PyTorch 2.11; forward 358-454
TFLOP/s, backward 372-449 at 4,096 and 8,192 keys, over the same card's measured 777
TFLOP/s GEMM): each within 0.89-1.09 of the fit. Left out: the 2,048-key backward (196
TFLOP/s, below the 1,024-key row) and the rows under 2,048 keys, whose kernels are short:
inside the H200's own ViT-B/16, BERT-base and GPT-2 steps (197 to 1,024 keys) attention
took 1.9-2.0 ms, where a roll-off fitted through those rows charged 5.0-5.5 ms; the
roll-off stays FlashAttention-2's (half at ``FLASH_HALF_SEQ``). FlashAttention-2's A100
shares put the H200 at 657 and 567 TFLOP/s at 8,192 keys, 1.45x and 1.26x what it ran.
Published beside it: FlashAttention-2 reaches up to 335 TFLOP/s on an H100 (Dao,
FlashAttention-2, 2023, section 4.1: 34 % of the dense bf16 peak, without Hopper's own
instructions), FlashAttention-3 740 TFLOP/s fp16 with them (Shah et al., 2024: 75 %);
the H200's 454 TFLOP/s forward at 8,192 keys (46 %) lies between the two."""
MEASURED_ATTENTION = {"hopper": HOPPER_ATTENTION}
"""Generations whose fused attention is measured here rather than taken from the A100."""


def attention_source(generation: str) -> str:
    """Where the fused-attention shares of a card of ``generation`` come from.

    Example:
        >>> attention_source("hopper").split(":")[0]
        "this project's H200 check"
    """
    if generation in MEASURED_ATTENTION:
        (fs, fh), (bs, bh) = (MEASURED_ATTENTION[generation][p] for p in ("forward", "backward"))
        return (
            f"this project's H200 check: SDPA at {fs:g} (forward) and {bs:g} (backward) of the "
            f"GEMM rate, half of it at {fh:g} and {bh:g} keys (benchmarks/operator_rates_gpu.py, "
            "measured_calibration.csv)"
        )
    return (
        f"FlashAttention-2's A100 shares ({FLASH_SHARE['forward']:g} forward, "
        f"{FLASH_SHARE['backward']:g} backward of peak; Dao 2023, section 4.1), half at "
        f"{FLASH_HALF_SEQ} keys (assumed)"
    )


def attention_efficiency(phase: str, seq: int, generation: str = "unknown") -> float:
    """Share of the card's GEMM rate a fused attention kernel reaches at ``seq`` keys.

    On Hopper (``generation="hopper"``) the share and its roll-off are the H200's own
    measurement (``HOPPER_ATTENTION``); elsewhere FlashAttention-2's A100 shares
    (``FLASH_SHARE``) rolling off at ``FLASH_HALF_SEQ``.

    Example:
        >>> round(attention_efficiency("forward", 4096), 2)
        0.81
        >>> round(attention_efficiency("forward", 8192, "hopper"), 2)
        0.52
    """
    side = "backward" if phase == "backward" else "forward"
    if generation in MEASURED_ATTENTION:
        share, half = MEASURED_ATTENTION[generation][side]
    else:
        share, half = FLASH_SHARE[side] / A100_MAMF_SHARE, FLASH_HALF_SEQ
    return share * seq / (seq + half) if seq > 0 else share
