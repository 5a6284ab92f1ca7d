"""The energy counter read at step boundaries: real hooks and recorder against a fake NVML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from gpuwise.distributed.ranks import RankInfo
from gpuwise.profiling.recording import Recording
from gpuwise.profiling.steps.energy import StepCounter
from gpuwise.profiling.steps.files import JsonlRecorder, MemoryRecorder, read_step_files
from gpuwise.records import Run, Sample, Step
from gpuwise.telemetry.fake import NVML_ERROR_GPU_IS_LOST, FakeGpu, FakeNvml, Fault
from gpuwise.telemetry.power.energy import boundary_energy, energy_section
from tests.energy_fakes import PERIOD_S, POWER_W, Clock, quantized


def smooth(t_s: float) -> float:
    return 5000.0 + POWER_W * t_s


def counter(clock: Clock, script=smooth, **kwargs) -> tuple[StepCounter, FakeNvml]:  # type: ignore[no-untyped-def]
    nvml = FakeNvml([FakeGpu(values={"energy_j": script}, **kwargs)], clock=clock)
    return StepCounter(nvml=lambda: nvml, device_index=lambda: 0), nvml


class Sleeper(torch.nn.Module):
    """A linear layer whose forward advances the fake clock by ``step_s``."""

    def __init__(self, clock: Clock, step_s: float) -> None:
        super().__init__()
        self.clock, self.step_s = clock, step_s
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.t_s += self.step_s
        return self.linear(x)  # type: ignore[no-any-return]


def train(recorder: MemoryRecorder, clock: Clock, step_s: float, batches: int = 5) -> None:
    model = Sleeper(clock, step_s)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.ones(batches * 2, 4), torch.ones(batches * 2, 1)), 2)
    recording = Recording(recorder).start()
    try:
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
            opt.step()
    finally:
        recording.stop()


def test_hooks_record_the_counter_when_each_step_closes() -> None:
    clock = Clock()
    energy, nvml = counter(clock)
    recorder = MemoryRecorder(clock=clock, energy=energy)
    train(recorder, clock, step_s=0.25)
    steps = recorder.steps
    assert len(steps) == 5
    assert [s.total_s for s in steps] == pytest.approx([0.25] * 5)
    # read as each step closed: 5000 J + 300 W x the step's end time, in millijoules
    ends = [s.start_s + s.total_s for s in steps]
    assert [s.energy_mj for s in steps] == pytest.approx([(5000 + 300 * t) * 1000 for t in ends])
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 5
    assert nvml.calls["nvmlInit"] == 1
    assert nvml.calls["nvmlShutdown"] == 1  # released when the recording stopped
    out = boundary_energy(steps, steps, counter_period_s=PERIOD_S)
    assert out is not None
    assert out[0].energy_j is None  # no reading at the first step's start
    assert [a.energy_j for a in out[1:]] == pytest.approx([75.0] * 4)
    assert not any(a.approximate for a in out)


def test_a_quantized_counter_gives_exact_totals_and_flags_short_windows() -> None:
    clock = Clock()
    energy, _ = counter(clock, quantized)
    recorder = MemoryRecorder(clock=clock, energy=energy)
    train(recorder, clock, step_s=0.25)
    out = boundary_energy(recorder.steps, recorder.steps, counter_period_s=PERIOD_S)
    assert out is not None
    # ticks at 100 ms: the 250 ms windows see 2 or 3 ticks, and add up to 300 W x 1 s
    assert [a.energy_j for a in out[1:]] == pytest.approx([90.0, 60.0, 90.0, 60.0])
    clock.t_s = 0.0
    energy, _ = counter(clock, quantized)
    short = MemoryRecorder(clock=clock, energy=energy)
    train(short, clock, step_s=0.04)
    out = boundary_energy(short.steps, short.steps, counter_period_s=PERIOD_S)
    assert out is not None
    assert all(a.approximate for a in out)  # 40 ms < the counter's 100 ms period


def test_no_cuda_device_means_one_check_then_a_no_op() -> None:
    loads: list[int] = []

    def load() -> FakeNvml:
        loads.append(1)
        return FakeNvml(1)

    energy = StepCounter(nvml=load, device_index=lambda: None)
    assert [energy() for _ in range(3)] == [None, None, None]
    assert loads == []  # NVML never even imported
    assert energy.reason == "no CUDA device in use"
    cpu = MemoryRecorder()  # the default counter on this CPU-only build
    assert cpu.energy() is None
    assert cpu.energy.reason == "no CUDA device in use"


def test_an_unsupported_counter_turns_reading_off_without_raising() -> None:
    clock = Clock()
    energy, nvml = counter(clock, unsupported=frozenset({"energy_j"}))
    assert energy() is None
    assert energy() is None
    assert "Not Supported" in str(energy.reason)
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # asked once only
    assert nvml.calls["nvmlShutdown"] == 1


def test_an_error_mid_run_stops_reading_and_the_loop_goes_on() -> None:
    clock = Clock()
    fault = Fault("nvmlDeviceGetTotalEnergyConsumption", 3, NVML_ERROR_GPU_IS_LOST)
    nvml = FakeNvml([FakeGpu(values={"energy_j": smooth})], clock=clock, faults=[fault])
    energy = StepCounter(nvml=lambda: nvml, device_index=lambda: 0)
    recorder = MemoryRecorder(clock=clock, energy=energy)
    train(recorder, clock, step_s=0.25)
    assert len(recorder.steps) == 5
    assert [s.energy_mj is not None for s in recorder.steps] == [True, True] + [False] * 3
    assert "GPU is lost" in str(energy.reason)
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 3


def test_step_file_carries_the_reading_only_when_read(tmp_path: Path) -> None:
    clock = Clock()
    energy, _ = counter(clock)
    info = RankInfo(rank=0, world_size=1, local_rank=0)
    recorder = JsonlRecorder(str(tmp_path), info, origin_s=0.0)
    recorder.tracker.timer.clock = recorder.tracker.split.clock = clock
    recorder.tracker.timer.energy = recorder.energy = energy
    train(recorder, clock, step_s=0.25, batches=3)
    records = [json.loads(line) for line in recorder.path.read_text().splitlines()[1:]]
    lines = [json.dumps(r) for r in records if r["type"] == "step"]  # not the FLOP count
    expected = pytest.approx([5075000.0, 5150000.0, 5225000.0])  # 5000 J + 300 W x 0.25 s k
    assert [json.loads(line)["energy_mj"] for line in lines] == expected
    assert [s.energy_mj for s in read_step_files(tmp_path).steps] == expected
    plain = Step(0, 0.0, 0.0, 0.0, 0.1, 0.0)
    assert "energy_mj" not in plain.to_dict()  # documents without readings are unchanged


def test_energy_section_prefers_boundary_readings_over_the_sampler() -> None:
    steps = [
        Step(i, 0.5 * i, 0.0, 0.0, 0.5, 0.0, batch_size=10, energy_mj=(5000 + 100 * i) * 1e3)
        for i in range(5)
    ]
    # the sampler saw a different power (300 W): the boundary readings (200 J a step) win
    samples = [Sample(t_s=0.5 * i, device="gpu0", energy_j=smooth(0.5 * i)) for i in range(6)]
    run = Run(source="profile", steps=steps, samples=samples, meta={"duration_s": 2.5})
    section = energy_section(run)
    assert section["source"] == "step_boundaries"
    assert section["per_step_j"] == pytest.approx(100.0)
    assert section["steps_measured"] == 4  # the first step has no reading at its start
    assert section["approximate"] is False
    unread = Run(
        source="profile",
        steps=[Step(**{**s.to_dict(), "energy_mj": None}) for s in steps],
        samples=samples,
        meta={"duration_s": 2.5},
    )
    fallback = energy_section(unread)
    assert fallback["source"] == "nvml_counter"
    assert fallback["per_step_j"] == pytest.approx(150.0)


def test_ranks_add_up_and_gaps_are_not_bridged() -> None:
    steps = [
        Step(
            i,
            0.5 * i + (1.0 if i >= 2 else 0.0),
            0.0,
            0.0,
            0.5,
            0.0,
            rank=r,
            energy_mj=1e3 * (10 * (r + 1)) * i,
        )
        for r in (0, 1)
        for i in range(4)
    ]
    mine = [s for s in steps if s.rank == 0]
    out = boundary_energy(steps, mine, counter_period_s=PERIOD_S)
    assert out is not None
    # step 2 starts 1 s after step 1 ended: no shared reading; steps 1 and 3 add both ranks
    assert [a.energy_j for a in out] == [None, pytest.approx(30.0), None, pytest.approx(30.0)]
