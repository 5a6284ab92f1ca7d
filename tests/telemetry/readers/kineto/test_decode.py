"""The fast event decoder (typed records, ``msgspec``) against the reference path.

The reference path decodes every event as a dict with the standard library (or orjson)
and converts it (``decode.event_of``); it is what runs where msgspec is not installed,
and for any run of events that does not fit the typed records. Both must give the same
analysis to the last digit: the same ``gpuwise analyze --json`` document, byte for byte,
on real traces of several shapes (training steps, NCCL ranks, AMD, MTIA, CPU-only) and on
a trace whose events break the typed records in every way the reader tolerates.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwise.telemetry.readers.kineto import decode, read_trace
from tests.trace_events import event, kernel, write_trace

REAL = Path(__file__).resolve().parents[3] / "realdata"
TRACES = (
    "kineto_resnet50_v100_workers0.pt.trace.json.gz",
    "hta_alexnet_a100_pageable_h2d.trace.json.gz",
    "hta_traces/cnn_ddp_a100_nccl.trace.json.gz",
    "hta_traces/amd_mi250_toy_train.trace.json.gz",
    "hta_traces/mtia_inference.trace.json.gz",
    "hta_traces/recsys128_rank0.trace.json.gz",
    "hta_traces/cpu_only.trace.json.gz",
)

CHILD = """
import io, json, sys
from contextlib import redirect_stdout
if sys.argv[1] == "reference":
    sys.modules["msgspec"] = None  # as on an install without it
from gpuwise.cli.main import main
from gpuwise.telemetry.readers.kineto import decode
docs = {}
for path in sys.argv[2:]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["analyze", path, "--json"])
    docs[path] = [code, out.getvalue()]
print(json.dumps({"decoder": decode.DECODER, "docs": docs}))
"""


def _analyses(mode: str, paths: list[Path]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _odd_trace(folder: Path) -> Path:
    """Steps of a training loop with every kind of event the typed records do not fit.

    Each oddity lands in a different run of events: an element that is a number, ``args``
    that are a list, a phase letter no trace format lists, an event without ``ph``, a
    string timestamp, an ``args.stream`` of ``null``, a kernel with no ``args`` at all.
    """
    events: list[Any] = []
    for step in range(40):
        t0 = 1_000_000.0 + step * 10_000
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 9_000))
        for k in range(120):
            at = t0 + 50 * k
            corr = step * 1000 + k + 1
            events.append(event("cpu_op", "aten::mm", at, 20, **{"External id": corr}))
            events.append(event("cuda_runtime", "cudaLaunchKernel", at + 5, 8, correlation=corr))
            events.append(kernel("ampere_sgemm_128x64_nn", at + 30, 40, 7, corr))
            events.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": at + 5, "cat": "ac2g"})
        odd = step % 8
        if odd == 0:
            events.append(17)
        elif odd == 1:
            events.append({**event("kernel", "odd_args", t0 + 8_000, 5), "args": [1, 2]})
        elif odd == 2:
            events.append({"ph": "Q", "name": "no such phase", "ts": t0})
        elif odd == 3:
            events.append({"cat": "kernel", "name": "no phase", "ts": t0, "dur": 3})
        elif odd == 4:
            events.append(event("cpu_op", "aten::add", "soon", 3))
        elif odd == 5:
            events.append(event("kernel", "null_stream", t0 + 8_100, 4, stream=None))
        elif odd == 6:
            events.append({"ph": "X", "cat": "kernel", "name": "bare", "ts": t0 + 8_200, "dur": 2})
    return write_trace(folder, events, name="odd.json")


@pytest.mark.skipif(decode.DECODER != "msgspec", reason="msgspec is not installed here")
def test_fast_and_reference_paths_analyse_alike(tmp_path: Path) -> None:
    paths = [REAL / name for name in TRACES if (REAL / name).exists()]
    assert len(paths) >= 5, "the committed real traces are missing"
    paths.append(_odd_trace(tmp_path))
    fast, ref = _analyses("fast", paths), _analyses("reference", paths)
    assert (fast["decoder"], ref["decoder"]) == ("msgspec", "json")
    for path in map(str, paths):
        code, doc = fast["docs"][path]
        assert code in (0, 1), doc[-500:]
        assert json.loads(doc)["schema"] == "gpuwise.run/1"
        assert fast["docs"][path] == ref["docs"][path], path


def test_odd_events_are_read_as_the_reference_reads_them(tmp_path: Path) -> None:
    """Counted from the writer above: 40 steps of 120 kernels, plus 5 bare/odd kernels
    (odd_args, null_stream twice... see ``_odd_trace``) and 5 non-objects or bad times."""
    tr = read_trace(_odd_trace(tmp_path), strict=False)
    assert len(tr.steps) == 40
    assert tr.facts is not None
    reasons = sorted(s.reason.split(":")[0] for s in tr.skipped)
    # step % 8 == 0 -> 5 numbers; == 4 -> 5 string timestamps
    assert (
        reasons
        == ["complete event without numeric ts/dur"] * 5 + ["event is not a JSON object"] * 5
    )
    # 4800 kernels, then odd_args (5), null_stream (5) and bare (5) are device events too
    assert tr.facts.device_events == 4800 + 15
