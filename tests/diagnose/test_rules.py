import sys
import types

import pytest

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.rules import diagnose
from gpuwise.records import Finding, Run, Sample, Step
from gpuwise.records.ranks import RankView
from gpuwise.records.trace_section import TraceSection
from gpuwise.telemetry.summary import summarize

GIB = 2**30
A100 = {"id": "gpu0", "name": "A100", "memory_total_bytes": 40 * GIB, "compute_capability": "8.0"}
V100 = {"id": "gpu0", "name": "V100", "memory_total_bytes": 32 * GIB, "compute_capability": "7.0"}


def steps(n=10, *, wait=0.0, h2d=0.0, compute=0.1, post=0.0, **kw):
    return [Step(i, i * 0.2, wait, h2d, compute, post, **kw) for i in range(n)]


def gpu_samples(utils, *, memory=GIB, device="gpu0", **kw):
    return [
        Sample(float(i), device, utilization_pct=u, memory_used_bytes=memory, **kw)
        for i, u in enumerate(utils)
    ]


def run_of(step_list=(), samples=(), devices=(), **extra):
    run = Run("api", devices=list(devices), steps=list(step_list), samples=list(samples))
    run.utilization = summarize(run.samples) if run.samples else {}
    if "ranks" in extra:
        run.ranks = RankView.from_dict(extra.pop("ranks"))
    if "trace" in extra:
        run.trace = TraceSection.from_dict(extra.pop("trace"))
    run.extra.update(extra)
    return run


def kinds(found):
    return [f.kind for f in found]


def test_amdahl_and_severity_scale():
    assert fx.amdahl(0.6) == pytest.approx(2.5)
    assert fx.amdahl(0.0) == 1.0
    assert fx.amdahl(1.0) == pytest.approx(100.0)
    assert [fx.severity_for(s) for s in (2.5, 1.5, 1.3, 1.2, 1.1, 1.04)] == [
        "critical",
        "critical",
        "warning",
        "warning",
        "info",
        None,
    ]


def test_input_bound_60_percent_wait_gives_2_5x():
    cpu = {"id": "cpu", "cores": 8}
    found = diagnose(run_of(steps(wait=0.06, compute=0.04), devices=[cpu]))
    top = found[0]
    assert top.kind == "input_bound"
    assert top.severity == "critical"
    assert top.max_speedup == pytest.approx(2.5)
    assert top.evidence["data_wait_fraction"] == pytest.approx(0.6)
    assert top.evidence["data_wait_mean_s"] == pytest.approx(0.06)
    assert top.evidence["steps"] == 10
    assert "num_workers=8" in top.fixes[0].how
    assert "persistent_workers=True" in top.fixes[0].how
    assert "pin_memory" not in top.fixes[0].how  # the CPU is the device: nothing to pin for
    assert any("gpuwise pack" in f.how for f in top.fixes)
    assert "DeviceTransform" in top.fixes[-1].how
    assert not any("DevicePrefetcher" in f.how for f in top.fixes)


def test_loader_workers_are_split_between_local_ranks():
    cpu = {"id": "cpu", "cores": 8}
    two_ranks = steps(wait=0.06, compute=0.04, rank=0) + steps(wait=0.06, compute=0.04, rank=1)
    top = diagnose(run_of(two_ranks, devices=[cpu, A100]))[0]
    assert "num_workers=4" in top.fixes[0].how
    assert "pin_memory=True" in top.fixes[0].how
    assert "DevicePrefetcher" in top.fixes[-1].how


def test_healthy_when_compute_dominates_suggests_bf16_on_ampere():
    found = diagnose(run_of(steps(wait=0.001, compute=0.099), devices=[A100]))
    assert found[0].kind == "healthy"
    assert found[0].max_speedup is None
    assert found[0].evidence["compute_fraction"] == pytest.approx(0.99)
    assert "torch.bfloat16" in found[0].fixes[0].how
    assert "'cuda'" in found[0].fixes[0].how


def test_healthy_on_volta_suggests_fp16_with_scaler():
    found = diagnose(run_of(steps(compute=0.1), devices=[V100]))
    assert "GradScaler" in found[0].fixes[0].how


def test_no_bf16_advice_on_cpu_without_bf16_hardware():
    plain_cpu = {"id": "cpu", "cores": 2, "flags": ["avx2", "fma"]}
    found = diagnose(run_of(steps(compute=0.1), devices=[plain_cpu]))
    assert found[0].kind == "healthy"
    assert not any("autocast" in f.how for f in found[0].fixes)
    bf16_cpu = {"id": "cpu", "cores": 2, "flags": ["avx512_bf16"]}
    found = diagnose(run_of(steps(compute=0.1), devices=[bf16_cpu]))
    assert "torch.autocast('cpu', dtype=torch.bfloat16)" in found[0].fixes[0].how


def test_pageable_copies_on_the_critical_path():
    s = steps(h2d=0.03, compute=0.07, h2d_bytes=1000, h2d_pageable_bytes=900, h2d_count=2)
    top = diagnose(run_of(s, devices=[A100]))[0]
    assert top.kind == "pageable_h2d"
    assert top.severity == "warning"
    assert top.max_speedup == pytest.approx(1 / 0.7, rel=1e-3)
    assert top.evidence["h2d_fraction"] == pytest.approx(0.3)
    assert top.evidence["h2d_pageable_bytes"] == 9000
    assert "pin_memory=True" in top.fixes[0].how
    assert "non_blocking=True" in top.fixes[0].how


def test_pinned_but_heavy_copies_are_h2d_bound():
    s = steps(h2d=0.04, compute=0.06, h2d_bytes=1000, h2d_pageable_bytes=0, h2d_count=1)
    top = diagnose(run_of(s))[0]
    assert top.kind == "h2d_bound"
    assert "uint8" in top.fixes[0].action


def test_postprocess_bound():
    top = diagnose(run_of(steps(compute=0.06, post=0.04)))[0]
    assert top.kind == "postprocess_bound"
    assert top.max_speedup == pytest.approx(1 / 0.6, rel=1e-3)
    assert ".item()" in top.fixes[0].how


def test_findings_sorted_by_payoff():
    found = diagnose(run_of(steps(wait=0.05, compute=0.03, post=0.02)))
    assert kinds(found)[:2] == ["input_bound", "postprocess_bound"]
    assert found[0].max_speedup == pytest.approx(2.0)
    assert found[1].max_speedup == pytest.approx(1.25)


def test_gpu_held_but_idle():
    utils = [0] * 18 + [95, 100]
    found = diagnose(run_of(samples=gpu_samples(utils, memory=20 * GIB)))
    top = found[0]
    assert top.kind == "idle_reserved"
    assert top.severity == "critical"
    assert top.max_speedup is None
    assert top.evidence["idle_fraction"] == pytest.approx(0.9)
    assert top.evidence["zero_utilization_fraction"] == pytest.approx(0.9)
    assert top.evidence["mean_utilization_pct"] == pytest.approx(9.75)
    assert top.evidence["peak_memory_used_bytes"] == 20 * GIB
    assert "gpuwise profile" in top.fixes[1].how


def test_busy_gpu_log_is_healthy():
    found = diagnose(run_of(samples=gpu_samples([97, 99, 100, 98])))
    assert kinds(found) == ["healthy"]


def test_gpu_idle_inside_compute_from_samples():
    samples = gpu_samples([40] * 10, memory=30 * GIB)
    found = diagnose(run_of(steps(compute=0.1), samples, devices=[A100]))
    top = found[0]
    assert top.kind == "gpu_idle_between_phases"
    assert top.evidence["gpu_idle_unexplained_fraction"] == pytest.approx(0.6)
    assert top.max_speedup == pytest.approx(2.5)
    assert "torch.compile" in top.fixes[0].how


def test_small_batch_in_short_steps():
    top = diagnose(run_of(steps(compute=0.004, batch_size=4)))[0]
    assert top.kind == "small_batch"
    assert top.evidence["batch_size"] == 4
    assert top.evidence["samples_per_s"] == pytest.approx(1000.0)


def test_memory_headroom_sizes_the_bigger_batch():
    samples = gpu_samples([99] * 10, memory=4 * GIB)
    found = diagnose(run_of(steps(compute=0.1), samples, devices=[A100]))
    assert found[0].kind == "healthy"
    headroom = next(f for f in found if f.kind == "memory_headroom")
    assert headroom.evidence["memory_used_fraction"] == pytest.approx(0.1)
    assert "up to 9x" in headroom.fixes[0].action  # 0.9 * 40 GiB // 4 GiB


def test_thermal_throttle():
    hot = [("hw_thermal_slowdown",)] * 3 + [()] * 7
    samples = [
        Sample(float(i), "gpu0", utilization_pct=99, throttle_reasons=r, temperature_c=80 + i)
        for i, r in enumerate(hot)
    ]
    found = diagnose(run_of(samples=samples))
    top = found[0]
    assert top.kind == "thermal_throttle"
    assert top.evidence == {"thermal_throttle_fraction": 0.3, "max_temperature_c": 89}


def test_trace_section_drives_gpu_idle_and_host_sync():
    trace = {
        "window_s": 1.0,
        "window_source": "profiler_steps",
        "gpu_busy_fraction": 0.4,
        "dataloader_fraction": 0.05,
        "sync": {
            "events": 3,
            "by_name": {"Stream Sync": 3},
            "runtime_calls": 30,
            "runtime_s": 0.25,
        },
    }
    found = diagnose(run_of(steps(compute=0.1), trace=trace))
    by_kind = {f.kind: f for f in found}
    assert by_kind["gpu_idle_between_phases"].evidence["gpu_idle_unexplained_fraction"] == 0.55
    assert by_kind["gpu_idle_between_phases"].severity == "critical"
    assert by_kind["host_sync"].max_speedup == pytest.approx(1 / 0.75, rel=1e-3)
    assert by_kind["host_sync"].evidence["cuda_sync_stream_sync"] == 3
    assert kinds(found)[0] == "gpu_idle_between_phases"


def test_distributed_findings_are_merged(monkeypatch):
    straggler = Finding("straggler", "warning", "rank 1 is slow", {"rank": 1}, 1.3)
    fake = types.ModuleType("gpuwise.diagnose.ranks.rules")
    fake.findings = lambda run: [straggler]
    monkeypatch.setitem(sys.modules, "gpuwise.diagnose.ranks.rules", fake)
    found = diagnose(run_of(steps(wait=0.01, compute=0.09), ranks={"world_size": 2}))
    assert kinds(found)[0] == "straggler"
    found = diagnose(run_of(steps(wait=0.01, compute=0.09)))
    assert "straggler" not in kinds(found)


def test_run_is_not_modified_but_for_its_anatomy():
    run = run_of(steps(wait=0.06, compute=0.04))
    before = run.to_dict()
    diagnose(run)
    after = run.to_dict()
    assert after.pop("anatomy")["step_s"] == 0.1
    assert after == before


def test_gpu_utilization_is_taken_while_steps_ran():
    # 4 s of idle startup, then 10 steps from t=4 s with the GPU 99 % busy: not idle.
    startup = gpu_samples([0] * 4, memory=30 * GIB)
    busy = [
        Sample(4.0 + i, "gpu0", utilization_pct=99, memory_used_bytes=30 * GIB) for i in range(10)
    ]
    s = [Step(i, 4.0 + i, 0.0, 0.0, 1.0, 0.0) for i in range(10)]
    found = diagnose(run_of(s, startup + busy, devices=[A100]))
    assert kinds(found) == ["healthy"]


def test_a_run_with_nothing_measured_is_not_called_healthy():
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.records import Run

    findings = diagnose(Run("profile", command=["python", "t.py"], exit_code=0))
    assert [f.kind for f in findings] == ["no_measurements"]
    assert findings[0].severity == "warning"
    assert findings[0].evidence == {"steps": 0, "samples": 0}


def test_small_batch_with_costly_samples_is_not_overhead():
    # 8 samples in a 40 ms step: 5 ms a sample, so the step grows with the batch
    found = diagnose(run_of(steps(compute=0.04, batch_size=8)))
    assert "small_batch" not in [f.kind for f in found]


def test_a_failed_rank_is_named_before_any_speed_finding():
    from gpuwise.diagnose.rules import _payoff_key
    from gpuwise.records import Finding

    failed = Finding("rank_failed", "critical", "rank 1 was killed")
    comm = Finding("comm_bound", "critical", "all-reduce exposed", max_speedup=3.0)
    assert sorted([comm, failed], key=_payoff_key) == [failed, comm]


def test_a_profile_without_steps_is_not_judged_on_its_samples():
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.records import Run, Sample

    run = Run("profile", samples=[Sample(t_s=0.0, device="cpu", utilization_pct=33.0)])
    run.utilization = {"cpu": {"mean_utilization_pct": 33.0, "idle_fraction": 0.0}}
    findings = diagnose(run)
    assert [f.kind for f in findings] == ["no_measurements"]
    assert findings[0].evidence == {"steps": 0, "samples": 1}
