"""What ``torch.cuda.max_memory_allocated`` holds beyond the step's tensors, on a real GPU.

Trains the built-in ResNet-18 at 64x64 with AdamW (foreach) for three steps per batch size,
with cuDNN on and off, and prints per batch the estimate's ``peak_bytes`` beside the
measured peaks, and the bytes still allocated once every tensor of the run is gone (the
cuBLAS/cuBLASLt workspaces PyTorch keeps for the process). The estimate plus
``calibration.cublas_workspace_bytes`` should meet the cuDNN-off peak; cuDNN's convolution
workspaces are what the cuDNN-on peak adds. Without CUDA it says so and exits 0.

    python benchmarks/memory_workspaces_gpu.py [--batches 8 32 128] [--json]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from gpuwise.sizing.hardware.calibration import cublas_workspace_bytes
from gpuwise.sizing.job.models import resnet18
from gpuwise.sizing.memory.estimate import estimate, make_optimizer

SIDE = 64


def measure(batch: int, cudnn: bool) -> list[int]:
    """Peak allocated bytes of each of three training steps, on a fresh model."""
    torch.backends.cudnn.enabled = cudnn
    torch.manual_seed(0)
    model = resnet18().cuda()
    opt = make_optimizer("adamw", list(model.parameters()), foreach=True)
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        opt.zero_grad(set_to_none=True)
        x = torch.randn(batch, 3, SIDE, SIDE, device="cuda")
        target = torch.randint(0, 1000, (batch,), device="cuda")
        nn.functional.cross_entropy(model(x), target).backward()
        opt.step()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        del x, target
    del model, opt
    torch.backends.cudnn.enabled = True
    return peaks


def main() -> None:
    """Measure, print one line per batch (or one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64, 128])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="batches 8 and 32 only")
    args = parser.parse_args()
    if args.quick:
        args.batches = [8, 32]
    if not torch.cuda.is_available():
        print("memory_workspaces_gpu: no CUDA GPU here; nothing to measure")
        return
    name = torch.cuda.get_device_name()
    rows = []
    for batch in args.batches:
        est = estimate(
            "resnet18", (3, SIDE, SIDE), batch_size=batch, optimizer="adamw", device="cuda"
        )
        off, on = measure(batch, cudnn=False), measure(batch, cudnn=True)
        rows.append(
            {
                "batch": batch,
                "estimate_peak_bytes": est.peak_bytes,
                "cudnn_off_peak_bytes": max(off),
                "cudnn_on_peak_bytes": max(on),
            }
        )
    left = torch.cuda.memory_allocated()  # every tensor of the run is gone: the workspaces
    doc = {
        "device": name,
        "software": f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
        "left_allocated_bytes": left,
        "modelled_workspace_bytes": cublas_workspace_bytes(name),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(
        f"{name}; {doc['software']}; left allocated {left / 2**20:.1f} MiB "
        f"(modelled cuBLAS workspaces {doc['modelled_workspace_bytes'] / 2**20:.1f} MiB)"
    )
    for r in rows:
        est = (r["estimate_peak_bytes"] + doc["modelled_workspace_bytes"]) / 2**20
        print(
            f"batch {r['batch']:>4}: estimate + workspaces {est:7.1f} MiB, measured cuDNN off"
            f" {r['cudnn_off_peak_bytes'] / 2**20:7.1f} MiB,"
            f" on {r['cudnn_on_peak_bytes'] / 2**20:7.1f} MiB"
        )


if __name__ == "__main__":
    main()
