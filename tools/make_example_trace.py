"""Write the example trace shipped in the package (``gpuwise demo --example-trace``).

A PyTorch profiler (Kineto) trace of the built-in naive example on the CPU: six training
steps, each marked by ``ProfilerStep#N``, gzip-compressed. It is gpuwise's own example run
on generated data, so the package can ship it; `gpuwise analyze` reads it like any trace.

Run from the repository root after changing the example:
    python tools/make_example_trace.py
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from gpuwise.profiling.example import GeneratedImages, train_step, training_setup

OUT = Path("src/gpuwise/profiling/example_data/naive_cpu.pt.trace.json.gz")
STEPS = 6
BATCH = 32


def main() -> None:
    torch.set_num_threads(1)  # the same trace shape whatever the machine's core count
    _device, model, optimizer = training_setup("cpu")
    loader = iter(DataLoader(GeneratedImages(), batch_size=BATCH, shuffle=False))
    train_step(model, optimizer, *next(loader))  # warm-up, outside the trace
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(STEPS + 1):  # one warm-up step, then the recorded ones
                images, labels = next(loader)
                train_step(model, optimizer, images, labels)
                prof.step()
        doc = json.loads(raw.read_text())
    doc.pop("deviceProperties", None)
    for key in ("hostname", "baseTimeNanoseconds"):
        doc.pop(key, None)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(OUT, "wb", mtime=0) as out:
        out.write(json.dumps(doc, separators=(",", ":")).encode())
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes, {len(doc['traceEvents']):,} events)")


if __name__ == "__main__":
    main()
