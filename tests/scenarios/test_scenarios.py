"""Labeled scenarios: small CPU training scripts with known delays, profiled end to end.

Each script under ``scripts/`` injects the costs it is about (``time.sleep`` for waits, a
busy loop for CPU work) with durations the test passes on its command line, runs under
``gpuwise profile`` in its own process, and the test checks the verdict (the first finding)
and its key figure against the share of the step those injected durations should take
(tolerances: see ``harness``). A strict expected failure pins a diagnosis limit found by
this suite (see its reason).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpuwise.cli.main import main
from gpuwise.records import Finding, Run, step_stats
from tests.machine import need_cpu
from tests.scenarios.harness import (
    INTERVAL_S,
    TIMEOUT_S,
    LoadProbe,
    Profiled,
    Scenario,
    assert_stage_finding,
    data_wait,
    kinds,
    slack_s,
    top,
)

pytestmark = pytest.mark.slow

CUDA = torch.cuda.is_available()

SLOW_GETITEM = Scenario(
    "slow_getitem.py", {"steps": 30, "batch": 16, "item_s": 0.003, "compute_s": 0.04}
)


@pytest.fixture(scope="module")
def profiled() -> Profiled:
    return Profiled()


def test_slow_getitem_is_input_bound(profiled: Profiled) -> None:
    s = SLOW_GETITEM
    run = profiled(s.argv())
    assert run.exit_code == 0
    assert len(run.steps) == s.steps
    assert {st.batch_size for st in run.steps} == {s.batch}
    load = profiled.load(run)
    assert_stage_finding(
        top(run), "input_bound", "data_wait_fraction", data_wait(s), s.compute_s, load
    )
    assert top(run).evidence["steps"] == s.steps
    assert "num_workers=" in top(run).fixes[0].how


def test_enough_workers_remove_the_input_wait(profiled: Profiled) -> None:
    s = SLOW_GETITEM
    naive = profiled(s.argv())
    advised = re.search(r"num_workers=(\d+)", top(naive).fixes[0].how)
    assert advised is not None
    cores = next(d["cores"] for d in naive.devices if d["id"] == "cpu")  # the CPU is the device
    assert int(advised.group(1)) == cores  # one rank: workers sized to the cores
    workers = min(int(advised.group(1)), 4)  # more only add start-up time here
    if workers < 2:
        pytest.skip("one core: the advised single worker cannot hide this injected wait")
    data_s = s.batch * s.item_s
    assert data_s / workers < s.compute_s  # by design: the advised workers keep up

    fixed = profiled(s.argv("--workers", str(workers)))

    assert fixed.exit_code == 0
    assert len(fixed.steps) == s.steps
    assert top(fixed).kind == "healthy", top(fixed).summary
    # Left to wait for: the first batch (nothing to overlap with) and the slack.
    wait_s = data_s / s.steps + slack_s(profiled.load(fixed))
    assert float(top(fixed).evidence["data_wait_fraction"]) <= wait_s / (wait_s + s.compute_s)
    gained = naive.step_stats()["mean_s"] / fixed.step_stats()["mean_s"]
    assert gained <= top(naive).max_speedup * 1.1  # the Amdahl bound held
    assert gained >= (data_s + s.compute_s) / (s.compute_s + wait_s)


def test_heavy_cpu_postprocess(profiled: Profiled) -> None:
    s = Scenario("postprocess.py", {"steps": 30, "batch": 16, "compute_s": 0.015, "post_s": 0.03})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps
    load = profiled.load(run)
    assert_stage_finding(
        top(run), "postprocess_bound", "post_fraction", (s.post_s, 0), s.compute_s, load
    )
    assert top(run).evidence["post_mean_s"] >= s.post_s


def test_tiny_batches_are_small_batch(profiled: Profiled) -> None:
    s = Scenario("small_batch.py", {"steps": 120, "batch": 4, "overhead_s": 0.005})
    run = profiled(s.argv())
    finding = top(run)
    assert finding.kind == "small_batch", finding.summary
    assert finding.evidence["batch_size"] == s.batch
    step_s = float(finding.evidence["step_mean_s"])
    assert s.overhead_s <= step_s <= s.overhead_s + slack_s(profiled.load(run))
    assert finding.evidence["samples_per_s"] == pytest.approx(s.batch / step_s, rel=1e-3)
    assert "batch" in finding.fixes[0].action.lower()


def test_small_batch_with_per_sample_compute_is_not_overhead(profiled: Profiled) -> None:
    s = Scenario(
        "small_batch.py", {"steps": 25, "batch": 8, "overhead_s": 0.001, "sample_s": 0.005}
    )
    run = profiled(s.argv())
    assert len(run.steps) == s.steps
    assert s.batch * s.sample_s + s.overhead_s < 0.05  # short steps of small batches...
    assert "small_batch" not in kinds(run)  # ...but the per-step overhead does not dominate


def test_compute_bound_control_is_healthy(profiled: Profiled) -> None:
    s = Scenario("healthy.py", {"steps": 30, "batch": 64, "compute_s": 0.03})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps
    finding = top(run)
    assert finding.kind == "healthy", finding.summary
    assert not [f.kind for f in run.findings if f.severity in ("critical", "warning")]
    compute = float(finding.evidence["compute_fraction"])
    assert s.compute_s / (s.compute_s + slack_s(profiled.load(run))) <= compute <= 1.0


def test_crash_midway_keeps_steps_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Scenario(
        "crash.py",
        {"steps": 40, "crash_at": 15, "batch": 8, "item_s": 0.004, "compute_s": 0.015},
    )
    out = tmp_path / "run.json"
    args = [
        "profile",
        "--json",
        "--shared-machine",
        "judge",
        "--interval",
        str(INTERVAL_S),
        "--out",
        str(out),
        "--",
    ]

    with LoadProbe() as probe:
        code = main([*args, *s.argv()])

    assert code == 1  # the script's uncaught exception
    doc = json.loads(capsys.readouterr().out)
    assert (doc["exit_code"], doc["steps"]["count"]) == (1, s.crash_at)
    run = Run.from_dict(json.loads(out.read_text()))
    assert [st.index for st in run.steps] == list(range(s.crash_at))
    finding = top(run)
    assert doc["findings"][0]["kind"] == finding.kind
    load = probe.load()
    assert_stage_finding(
        finding, "input_bound", "data_wait_fraction", data_wait(s), s.compute_s, load
    )


SPAWN_WORKERS = Scenario(
    "spawn_workers.py", {"steps": 30, "batch": 8, "item_s": 0.01, "compute_s": 0.01, "workers": 2}
)


@pytest.mark.timing
def test_spawned_workers_under_main_guard(profiled: Profiled) -> None:
    need_cpu(0.25, "a loop beside two spawned workers that each import torch")
    s = SPAWN_WORKERS
    run = profiled(s.argv())
    assert run.exit_code == 0
    assert len(run.steps) == s.steps
    assert len(run.meta["processes"]) == 1  # the workers recorded nothing
    # The first step waits for the workers to start (seconds: each imports torch) ...
    assert run.steps[0].data_wait_s > s.batch * s.item_s
    assert run.step_stats()["warmup_excluded"] == 1
    # ... and is left out: the verdict is about the steady state, where the workers
    # together deliver a batch every batch * item_s / workers.
    finding = top(run)
    assert finding.kind == "input_bound", finding.summary
    supply_s = s.batch * s.item_s / s.workers
    # a batch is `batch` sleeps in one worker, the workers take turns: each step waits out
    # batch / workers sleeps, and on a loaded machine each of them wakes late
    wait = (supply_s - s.compute_s, s.batch // s.workers)
    load = profiled.load(run)
    assert_stage_finding(finding, "input_bound", "data_wait_fraction", wait, s.compute_s, load)
    assert finding.evidence["data_wait_fraction"] == pytest.approx(
        step_stats(run.steps[1:])["fractions"]["data_wait"], abs=1e-4
    )


@pytest.mark.dist
def test_torchrun_two_ranks(profiled: Profiled) -> None:
    s = Scenario("torchrun_ddp.py", {"steps": 20, "batch": 8, "item_s": 0.004, "compute_s": 0.03})
    script, *flags = s.argv()[1:]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    run = profiled([*launcher, "--nproc-per-node=2", script, *flags])
    assert run.exit_code == 0
    per_rank = {r: [st for st in run.steps if st.rank == r] for r in (0, 1)}
    assert {r: len(v) for r, v in per_rank.items()} == {0: s.steps, 1: s.steps}
    assert len(run.steps) == 2 * s.steps
    assert sorted(p["rank"] for p in run.meta["processes"]) == [0, 1]
    assert {p["world_size"] for p in run.meta["processes"]} == {2}
    load = profiled.load(run)
    assert_stage_finding(
        top(run), "input_bound", "data_wait_fraction", data_wait(s), s.compute_s, load
    )


def test_inference_loop_steps_at_the_loader(profiled: Profiled) -> None:
    s = Scenario("inference.py", {"steps": 25, "batch": 8, "item_s": 0.004, "compute_s": 0.025})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps  # one step per batch, the last one included
    assert all(st.post_s == 0.0 for st in run.steps)  # no optimizer: no postprocess phase
    assert all(st.compute_s >= s.compute_s for st in run.steps)
    load = profiled.load(run)
    assert_stage_finding(
        top(run), "input_bound", "data_wait_fraction", data_wait(s), s.compute_s, load
    )


@pytest.mark.skipif(CUDA, reason="on a GPU the copies are real; see the gpu test")
def test_copies_not_applicable_on_cpu(profiled: Profiled) -> None:
    """On a CPU-only machine ``.to(device)`` copies nothing: no transfer phase, no finding."""
    s = Scenario("pinned_copy.py", {"steps": 25, "batch": 64, "compute_s": 0.02})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps
    assert all(st.h2d_count == 0 and st.h2d_s == 0.0 for st in run.steps)
    assert "h2d" not in run.extra
    assert not {"pageable_h2d", "h2d_bound"} & set(kinds(run))
    assert top(run).kind == "healthy"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="host-to-device copies need a CUDA device")
def test_pageable_vs_pinned_copies_on_gpu(profiled: Profiled) -> None:
    s = Scenario(
        "pinned_copy.py", {"steps": 25, "batch": 32, "compute_s": 0.02, "features": 150528}
    )
    pageable = profiled(s.argv(), cpu_device=False)
    pinned = profiled(s.argv("--pin", "1"), cpu_device=False)
    h2d = pageable.extra["h2d"]
    assert h2d["count"] == 2 * s.steps  # inputs and labels, every step
    assert h2d["pageable_bytes"] == h2d["bytes"] >= s.steps * s.batch * s.features * 4
    assert "pageable_h2d" in kinds(pageable)
    assert pinned.extra["h2d"]["pageable_bytes"] == 0
    assert "pageable_h2d" not in kinds(pinned)


@pytest.mark.skipif(CUDA, reason="on a GPU .item() is a real sync, seen only in traces")
def test_item_every_step_is_no_host_sync_on_cpu(profiled: Profiled) -> None:
    """``.item()`` waits for a GPU; on the CPU the loss is already there: nothing to report.

    The host_sync rule reads Kineto traces; a profiled CPU run has no device to wait on.
    """
    s = Scenario("item_sync.py", {"steps": 30, "batch": 32, "compute_s": 0.03})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps
    assert "host_sync" not in kinds(run)
    finding = top(run)
    assert finding.kind == "healthy", finding.summary
    compute = float(finding.evidence["compute_fraction"])
    assert compute >= s.compute_s / (s.compute_s + slack_s(profiled.load(run)))


def test_sigint_still_leaves_the_report(tmp_path: Path) -> None:
    s = Scenario("interrupted.py", {"warm": 10, "batch": 8, "item_s": 0.004, "compute_s": 0.02})
    marker = tmp_path / "warm"
    cmd = [
        sys.executable,
        "-m",
        "gpuwise",
        "profile",
        "--json",
        "--shared-machine",
        "judge",
        "--interval",
        str(INTERVAL_S),
    ]
    stdout, stderr = tmp_path / "out.json", tmp_path / "err.txt"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(
            [*cmd, "--", *s.argv("--marker", str(marker))],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        try:
            with LoadProbe() as probe:
                _wait_for(marker, proc)
                proc.send_signal(signal.SIGINT)
                code = proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert code == 128 + signal.SIGINT, stderr.read_text()[-2000:]
    doc = json.loads(stdout.read_text())
    assert doc["exit_code"] == 128 + signal.SIGINT
    assert doc["meta"]["signals"] == ["SIGINT"]
    assert doc["steps"]["count"] >= s.warm
    finding = Finding.from_dict(doc["findings"][0])
    load = probe.load()
    assert_stage_finding(
        finding, "input_bound", "data_wait_fraction", data_wait(s), s.compute_s, load
    )


def _wait_for(marker: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not marker.exists():
        assert proc.poll() is None, "the profiled script ended before warming up"
        assert time.monotonic() < deadline, "the profiled script never warmed up"
        time.sleep(0.05)


def test_loop_without_a_data_loader(profiled: Profiled) -> None:
    s = Scenario("no_loader.py", {"steps": 30, "batch": 32, "compute_s": 0.03})
    run = profiled(s.argv())
    assert len(run.steps) == s.steps  # one per optimizer step, the first included
    assert all(st.data_wait_s == 0.0 and st.batch_size is None for st in run.steps)
    finding = top(run)
    assert finding.kind == "healthy", finding.summary
    step_s = run.step_stats()["mean_s"]
    assert s.compute_s <= step_s <= s.compute_s + slack_s(profiled.load(run))
