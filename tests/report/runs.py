"""Hand-built Runs for the report tests (deterministic; no other gpuwise layer runs)."""

from __future__ import annotations

from gpuwise.profiling.recording import rank_view
from gpuwise.records import Finding, Fix, Run, Sample, Step
from gpuwise.telemetry.summary import summarize

GIB = 1024**3

H100 = {
    "id": "gpu0",
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": None,
    "memory_total_bytes": 80 * GIB,
    "compute_capability": "9.0",
    "driver_version": "590.48.01",
    "cuda_driver_version": "13.1",
}

INPUT_BOUND = Finding(
    kind="input_bound",
    severity="critical",
    summary="The GPU waits for the next batch 40 % of every step.",
    evidence={"data_wait_fraction": 0.4, "step_mean_s": 0.2, "num_workers": 0},
    max_speedup=1 / 0.6,
    fixes=(
        Fix("Load batches in 2 worker processes", "DataLoader(..., num_workers=2)"),
        Fix("Read a preprocessed store", "gpuwise.data.Loader(store, batch_size=32)"),
    ),
)

PAGEABLE = Finding(
    kind="pageable_h2d",
    severity="warning",
    summary="Host-to-device copies come from pageable memory.",
    evidence={"h2d_pageable_bytes": 3 * 1024**2, "h2d_fraction": 0.1},
    max_speedup=1 / 0.9,
    fixes=(Fix("Pin host memory", "DataLoader(..., pin_memory=True)"),),
)


def uniform_steps(count: int, ranks: int = 1, post_s: float = 0.0) -> list[Step]:
    """Steps of 80 ms data wait, 20 ms copy, 100 ms compute (+ post), batch 32, per rank."""
    total_s = 0.2 + post_s
    return [
        Step(
            index=i,
            start_s=1.0 + i * total_s,
            data_wait_s=0.08,
            h2d_s=0.02,
            compute_s=0.1,
            post_s=post_s,
            rank=rank,
            batch_size=32,
            h2d_bytes=4 * 1024**2,
            h2d_pageable_bytes=3 * 1024**2,
            h2d_count=2,
        )
        for rank in range(ranks)
        for i in range(count)
    ]


def gpu_samples(count: int, interval_s: float = 0.1, device: str = "gpu0") -> list[Sample]:
    """Samples whose utilization cycles 0..90 %, memory grows to 10 GiB, power 300 W."""
    return [
        Sample(
            t_s=i * interval_s,
            device=device,
            utilization_pct=float((i * 10) % 100),
            memory_util_pct=float((i * 3) % 40),
            memory_used_bytes=(i % 11) * GIB,
            memory_total_bytes=80 * GIB,
            power_w=300.0,
            energy_j=300.0 * i * interval_s,
            temperature_c=60.0,
        )
        for i in range(count)
    ]


def make_run(
    *,
    command: list[str] | None = None,
    steps: list[Step] | None = None,
    samples: list[Sample] | None = None,
    findings: list[Finding] | None = None,
) -> Run:
    """A profiled run on one H100: 50 input-bound steps and 60 samples unless given."""
    steps = uniform_steps(50) if steps is None else steps
    samples = gpu_samples(60) if samples is None else samples
    return Run(
        source="profile",
        command=["python", "train.py", "--epochs", "1"] if command is None else command,
        exit_code=0,
        devices=[H100],
        steps=steps,
        samples=samples,
        utilization=summarize(samples, 0.1),
        findings=[INPUT_BOUND, PAGEABLE] if findings is None else findings,
        meta={"interval_s": 0.1, "gpuwise": "0.1.0"},
        ranks=rank_view(steps),  # as the recording builds it: once, from the steps
    )
