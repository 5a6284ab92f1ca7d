"""The job anatomy of public real training traces (``tests/realdata/public_traces.md``).

Runs only when ``GPUWISE_PUBLIC_TRACES`` points at the folder that
``tests/realdata/fetch_public_traces.sh`` fills. Each expected fact was written from the
trace's raw events first (a few lines of Python over the JSON, repeated here), then
checked against ``gpuwise analyze``:

- ResNet-18 on MI300X, caching allocator off, recorded without a profiler schedule: five
  ``Optimizer.step#SGD.step`` host spans (the device's ``gpu_user_annotation`` copies
  aside), so four whole steps after a 118 ms start-up that holds 564 of the 2821
  allocator calls (``hipFree``, ``hipMalloc``, one ``hipHostMalloc``); each step has one
  backward pass (``MseLossBackward0``) and runs ``aten::_foreach_add_`` inside the
  optimizer step: SGD, foreach. The frees go on in every steady step, so
  ``allocator_calls`` stays the verdict; the optimizer fix, if any, is SGD's own fused
  update, never AdamW's.
- ResNet with activation checkpointing, DDP over RCCL on 8 MI300X: three profiler steps,
  SGD foreach, one backward pass each.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze

ROOT = os.environ.get("GPUWISE_PUBLIC_TRACES")
pytestmark = pytest.mark.skipif(
    not ROOT,
    reason="GPUWISE_PUBLIC_TRACES is not set: run tests/realdata/fetch_public_traces.sh and "
    "set it to the folder it prints",
)

TL = "tracelens/tests/traces/"
NO_CACHING = TL + "mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"
DDP_MI300X = TL + "mi300/resnet_act_checkpoint.json.gz"


def _events(rel: str) -> list[dict[str, Any]]:
    with gzip.open(Path(str(ROOT)) / rel, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _host_steps(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The host's ``Optimizer.step`` spans (start, end µs), in order."""
    return sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith("Optimizer.step#")
        and e.get("cat") in ("cpu_op", "user_annotation")
    )


def test_a_trace_without_a_schedule_steps_by_its_optimizer() -> None:
    events = _events(NO_CACHING)
    # the recording starts at its first event, the profiler's own "Trace" span aside
    t0 = min(float(e["ts"]) for e in events if str(e.get("cat")).lower() != "trace")
    steps = _host_steps(events)
    assert len(steps) == 5
    first_end = steps[0][1]
    alloc = re.compile(r"^hip(Free|Malloc|HostMalloc)$")  # 1360 + 1460 + 1 (pinned)
    calls = [e for e in events if alloc.match(str(e.get("name", "")))]
    before = sum(1 for e in calls if float(e["ts"]) < first_end)
    assert (before, len(calls)) == (564, 2821)

    run = analyze([Path(str(ROOT)) / NO_CACHING])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    tl = t.facts.timeline
    assert t.window_source == "steady_state"
    assert (tl["step_unit"], tl["steps"], tl["steady_steps"]) == ("optimizer_step", 4, 4)
    assert [p["name"] for p in tl["phases"]] == ["startup", "steady", "teardown"]
    assert tl["phases"][0]["end_s"] == pytest.approx((first_end - t0) * 1e-6, abs=1e-6)
    assert t.window_s == pytest.approx((steps[-1][1] - first_end) * 1e-6, abs=1e-6)
    assert (tl["one_time"]["allocs"]["before"], tl["one_time"]["allocs"]["all"]) == (564, 2821)
    assert (tl["optimizer"], tl["optimizer_impl"]) == ("SGD", "foreach")
    assert tl["evaluations_per_step"] == 1
    assert tl["closure_evaluations"] == 0

    a = run.anatomy
    assert a is not None
    assert (a.step_unit, a.applied["optimizer"], a.applied["optimizer_impl"]) == (
        "optimizer_step",
        "SGD",
        "foreach",
    )
    top = run.findings[0]
    assert (top.kind, top.severity) == ("allocator_calls", "critical")
    hows = [x.how for f in run.findings for x in f.fixes if "torch.optim" in x.how]
    assert all("torch.optim.SGD(" in h for h in hows)
    assert "AdamW" not in " ".join(x.how for f in run.findings for x in f.fixes)


def test_profiler_steps_of_a_ddp_job_and_its_optimizer() -> None:
    events = _events(DDP_MI300X)
    profiler = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(profiler) == 3
    foreach = [e for e in events if e.get("name") == "aten::_foreach_add_"]
    assert foreach

    run = analyze([Path(str(ROOT)) / DDP_MI300X])
    assert run.trace is not None
    assert run.trace.facts is not None
    tl = run.trace.facts.timeline
    assert (tl["step_unit"], tl["steps"]) == ("profiler_step", 3)
    assert (tl["optimizer"], tl["optimizer_impl"]) == ("SGD", "foreach")
    assert tl["evaluations_per_step"] == 1
    assert run.anatomy is not None
    assert run.anatomy.processes[0].role == "rank"
    assert run.findings[0].kind == "comm_bound"
