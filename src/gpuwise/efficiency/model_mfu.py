"""MFU, HFU and tokens/s of a Run from the FLOPs its processes counted as they ran.

Each profiled process counts its model's FLOPs on its first iteration
(``gpuwise.profiling.model_flops``) and the Run carries the counts as
``run.extra["model_flops"]["counted"]``. Per rank, the FLOPs of a mean steady step are the
counted FLOPs per sample times the step's samples (or, without a batch size, the counted
micro-step times the micro-steps per step), and

* ``mfu = model FLOPs per step / (mean step time * peak)``, without recomputation;
* ``hfu``: the same with the FLOPs the device ran, activation recomputation included;
* in LLM terms, when the inputs were token ids: ``flops_per_token = 6·N + 12·L·H·Q·T``
  (PaLM's appendix B, as nanoGPT's ``estimate_mfu``) times tokens/s, over the peak.

The peak is the catalog's for the precision that carried most of the counted FLOPs (the
autocast dtype, TF32 where PyTorch allowed it, the model's dtype), or on the CPU the rate
measured on this machine (``efficiency.mfu``). A precision with no peak (float64) leaves the
utilizations ``None`` with the reason in ``note``; so does a figure above 100 %. The
whole-job figure is every rank's achieved FLOP/s over the sum of their peaks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuwise.efficiency.mfu import PEAK_UNDER_LOAD, PRECISIONS, device_peak_flops_s
from gpuwise.records import Run, Step, steady_steps
from gpuwise.records.stepstats import headline_steps


def counted_mfu_section(
    run: Run, *, peak_flops_s: float | None = None, peak_source: str | None = None
) -> dict[str, Any] | None:
    """The Run's ``mfu`` section from its counted FLOPs, or ``None`` when none were counted.

    Args:
        run: A Run with ``extra["model_flops"]["counted"]`` and steps.
        peak_flops_s: Peak FLOP/s of one device; default: the catalog's or measured.
        peak_source: Where ``peak_flops_s`` came from, when given.

    Returns:
        ``mfu_section``'s keys (``flops_per_sample``, ``mfu``, ``compute_mfu``, ...) plus
        ``source: "counted"``, ``hardware_flops_per_sample``, ``hfu``,
        ``model_flops_per_step``, ``hardware_flops_per_step``, ``step_s``,
        ``flops_by_precision``, ``ranks`` (one entry per rank) and ``tokens`` (``None``
        unless the inputs were token ids).

    Example:
        >>> counted_mfu_section(run)["mfu"]  # doctest: +SKIP
        0.41
    """
    counts = _per_rank((run.extra.get("model_flops") or {}).get("counted") or [])
    if not counts:
        return None
    first = counts[min(counts)]
    precision = first.get("precision") or "fp32"
    note = None
    if peak_flops_s is None and precision not in PRECISIONS:
        note = f"n/a: the FLOPs ran in {precision}, which has no peak in the catalog"
    elif peak_flops_s is None:
        peak_flops_s, peak_source = device_peak_flops_s(run.devices, precision)
    warmup = int(run.meta.get("warmup_steps", 0))
    steps = steady_steps(headline_steps(run.steps), warmup)
    figures = [
        _rank_figures(r, counts[r], [s for s in steps if s.rank == r], peak_flops_s)
        for r in sorted(counts)
    ]
    ranks = [r for r in figures if r is not None]
    if not ranks:
        return None
    section = _whole_job(ranks, peak_flops_s)
    if _above_one(section, *ranks):
        note = f"n/a: {PEAK_UNDER_LOAD}"
    section.update(
        source="counted",
        phase=first.get("phase"),
        precision=precision,
        flops_by_precision=first.get("flops_by_precision"),
        peak_tflops_s=peak_flops_s / 1e12 if peak_flops_s else None,
        peak_source=peak_source,
        devices=len(ranks),
        ranks=ranks if len(ranks) > 1 else None,
        tokens=_tokens(first, ranks, peak_flops_s),
        note=note,
    )
    if section["tokens"] is not None and _above_one(section["tokens"]):
        section["note"] = note or f"n/a: {PEAK_UNDER_LOAD}"
    return section


def _per_rank(records: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """One count per rank: its training count, else its evaluation count."""
    out: dict[int, Mapping[str, Any]] = {}
    for record in records:
        rank = int(record.get("rank") or 0)
        if rank not in out or (
            out[rank].get("phase") != "train" and record.get("phase") == "train"
        ):
            out[rank] = record
    return out


def _rank_figures(
    rank: int, count: Mapping[str, Any], steps: Sequence[Step], peak: float | None
) -> dict[str, Any] | None:
    if not steps:
        return None
    n = len(steps)
    step_s = sum(s.total_s for s in steps) / n
    compute_s = sum(s.compute_s for s in steps) / n
    samples = count.get("samples")
    sizes = [s.batch_size for s in steps if s.batch_size is not None]
    if samples and len(sizes) == n:
        per_step = sum(sizes) / n / samples  # counted micro-steps per step
        samples_per_step: float | None = sum(sizes) / n
    else:
        per_step = max(1.0, sum(s.backward_calls for s in steps) / n)
        samples_per_step = samples * per_step if samples else None
    model = float(count["model_flops"]) * per_step
    hardware = float(count["hardware_flops"]) * per_step
    return {
        "rank": rank,
        "step_s": step_s,
        "compute_s": compute_s,
        "samples_per_step": samples_per_step,
        "samples_per_s": samples_per_step / step_s if samples_per_step and step_s else None,
        "flops_per_sample": float(count["model_flops"]) / samples if samples else None,
        "hardware_flops_per_sample": float(count["hardware_flops"]) / samples if samples else None,
        "model_flops_per_step": model,
        "hardware_flops_per_step": hardware,
        "achieved_tflops_s": model / step_s / 1e12 if step_s else None,
        "mfu": _ratio(model, step_s, peak),
        "hfu": _ratio(hardware, step_s, peak),
        "compute_mfu": _ratio(model, compute_s, peak),
    }


UTILIZATIONS = ("mfu", "hfu", "compute_mfu")


def _above_one(*figures: dict[str, Any]) -> bool:
    """Set every utilization above 1 to ``None`` (n/a); return whether any was.

    A utilization cannot pass 100 %: above it the peak is wrong for this work (a CPU peak
    measured under load), and no figure is better than an impossible one.
    """
    seen = False
    for figure in figures:
        for key in UTILIZATIONS:
            value = figure.get(key)
            if value is not None and value > 1:
                figure[key] = None
                seen = True
    return seen


def _ratio(flops: float, seconds: float, peak: float | None) -> float | None:
    return flops / (seconds * peak) if seconds > 0 and peak else None


def _whole_job(ranks: Sequence[Mapping[str, Any]], peak: float | None) -> dict[str, Any]:
    """Sums over ranks: achieved FLOP/s over the sum of their peaks."""
    n = len(ranks)

    def total_rate(flops_key: str, time_key: str) -> float | None:
        rates = [r[flops_key] / r[time_key] for r in ranks if r[time_key] > 0]
        return sum(rates) if len(rates) == n else None

    model_rate = total_rate("model_flops_per_step", "step_s")
    hardware_rate = total_rate("hardware_flops_per_step", "step_s")
    compute_rate = total_rate("model_flops_per_step", "compute_s")
    job_peak = peak * n if peak else None

    def mean(key: str) -> float | None:
        values = [r[key] for r in ranks if r[key] is not None]
        return sum(values) / len(values) if len(values) == n else None

    return {
        "flops_per_sample": mean("flops_per_sample"),
        "hardware_flops_per_sample": mean("hardware_flops_per_sample"),
        "samples_per_step": mean("samples_per_step"),
        "model_flops_per_step": mean("model_flops_per_step"),
        "hardware_flops_per_step": mean("hardware_flops_per_step"),
        "step_s": mean("step_s"),
        "achieved_tflops_s": model_rate / 1e12 if model_rate else None,
        "mfu": model_rate / job_peak if model_rate and job_peak else None,
        "hfu": hardware_rate / job_peak if hardware_rate and job_peak else None,
        "compute_mfu": compute_rate / job_peak if compute_rate and job_peak else None,
    }


def llm_flops_per_token(params: int, layers: int, width: int, seq_len: int) -> int:
    """Training FLOPs per token by PaLM's formula: ``6·N + 12·L·H·Q·T``.

    Args:
        params: ``N``, the parameters used in matrix multiplies (no position table).
        layers: ``L``, attention layers.
        width: ``H·Q``, heads times head size.
        seq_len: ``T``, the sequence length attended over.

    Returns:
        FLOPs of forward plus backward per token.

    Example:
        >>> llm_flops_per_token(params=85_000_000, layers=12, width=768, seq_len=1024)
        623246208
    """
    return 6 * params + 12 * layers * width * seq_len


def _tokens(
    count: Mapping[str, Any], ranks: Sequence[Mapping[str, Any]], peak: float | None
) -> dict[str, Any] | None:
    tokens = count.get("tokens")
    params = count.get("params")
    if not isinstance(tokens, Mapping) or not params:
        return None
    seq_len = int(tokens["seq_len"])
    layers, width = int(tokens.get("layers") or 0), int(tokens.get("width") or 0)
    attended = int(tokens.get("attention_seq_len") or seq_len)
    per_token = llm_flops_per_token(int(params), layers, width, attended)
    rates = [r["samples_per_s"] for r in ranks]
    tokens_per_s = seq_len * sum(rates) if all(rates) else None
    job_peak = peak * len(ranks) if peak else None
    return {
        "seq_len": seq_len,
        "params": int(params),
        "layers": layers,
        "width": width,
        "flops_per_token": per_token,
        "tokens_per_s": tokens_per_s,
        "mfu": per_token * tokens_per_s / job_peak if tokens_per_s and job_peak else None,
    }
