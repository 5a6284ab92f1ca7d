"""What this GPU reaches per operator class, beside what the step-time model charges.

Measures, on the CUDA device (CUDA events, median of ``--repeats`` timed batches after
warm-up):

* ``gemm``: one large product per precision (bf16, fp16, TF32, fp32), then every distinct
  matrix-product shape of the built-in models' traced steps (``sizing_gpu.CASES``) in
  bf16, each beside the model's rate for it (the GEMM share times ``gemm_shape_efficiency``);
* ``attention``: ``scaled_dot_product_attention`` forward and backward (the fused kernel
  PyTorch picks) at 128 to 8192 keys, beside ``attention_efficiency``;
* ``memory``: copy, add, multiply-add, GELU, LayerNorm, softmax and a cast, large and
  small, in bytes/s, beside ``memory_bandwidth``;
* ``optimizer``: AdamW foreach and fused over BERT-base's parameters (bytes/s);
* ``h2d``: pinned and pageable host-to-device copies;
* ``launch``: host seconds per launch of a tiny kernel;
* ``classes``: each built-in model's training step under ``torch.profiler``, its kernel
  time summed per operator class (by kernel name), beside the model's ``by_class``.

Writes one JSON document (``--out`` or stdout) and, with ``--csv``, the rows in the
columns of ``measured_calibration.csv`` naming the card, driver, CUDA, cuBLAS/cuDNN and
PyTorch versions. Without CUDA it runs the same code on the CPU at small sizes
(``--device cpu``), which checks the script, not the figures.

    python benchmarks/operator_rates_gpu.py --out rates.json --csv rates.csv
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sizing_gpu import CASES, _autocast

from gpuwise.sizing.hardware.calibration import generation
from gpuwise.sizing.hardware.catalog import GpuSpec, find_gpus
from gpuwise.sizing.job.inputs import input_spec
from gpuwise.sizing.job.model_source import make_batch, make_loss, resolve_model
from gpuwise.sizing.memory.estimate import estimate, make_optimizer
from gpuwise.sizing.speed.attention_rates import attention_efficiency
from gpuwise.sizing.speed.class_rates import class_rates, gemm_shape_efficiency
from gpuwise.sizing.speed.roofline import gpu_step_time

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Timer:
    """Median seconds of one call of ``fn`` on ``device`` (events on CUDA)."""

    def __init__(self, device: str, repeats: int) -> None:
        self.device, self.repeats = device, repeats

    def sync(self) -> None:
        """Wait for the device."""
        if self.device == "cuda":
            torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any], inner: int = 5) -> float:
        """Median seconds of one call over ``repeats`` batches of ``inner`` calls."""
        for _ in range(2):
            fn()
        self.sync()
        times = []
        for _ in range(self.repeats):
            if self.device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                times.append((time.perf_counter() - t0) / inner)
        return statistics.median(times)


def gemm_rows(timer: Timer, device: str, card: GpuSpec, small: bool) -> list[dict[str, Any]]:
    """Large products per precision, then the built-in models' shapes in bf16."""
    rows = []
    n = 512 if small else 8192
    for name in ("bf16", "fp16", "tf32", "fp32"):
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        dtype = DTYPES.get(name, torch.float32)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        s = timer(lambda a=a, b=b: a @ b)
        rates = class_rates(card, name)
        rows.append(
            {
                "what": "gemm",
                "shape": f"{n}x{n}x{n}",
                "precision": name,
                "tflops": 2 * n**3 / s / 1e12,
                "model_tflops": rates.gemm.value / 1e12 if rates else None,
            }
        )
    torch.backends.cuda.matmul.allow_tf32 = False
    rates = class_rates(card, "bf16")
    shapes: dict[tuple[int, int, int, int], int] = {}
    for case in CASES[:1] if small else CASES:
        est = estimate(case.model, batch_size=case.batch, precision="bf16", seq_len=case.seq)
        for op in est.ops:
            if op.matrix and not op.conv and "attention" not in op.name and any(op.dims):
                shapes[op.dims] = shapes.get(op.dims, 0) + op.flops
    top = sorted(shapes, key=shapes.__getitem__, reverse=True)[: 4 if small else 40]
    for bsz, m, n_, k in top:
        if small:
            bsz, m, n_, k = min(bsz, 4), min(m, 256), min(n_, 256), min(k, 256)
        a = torch.randn(bsz, m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(bsz, k, n_, device=device, dtype=torch.bfloat16)
        s = timer(lambda a=a, b=b: torch.bmm(a, b), inner=10)
        eff = gemm_shape_efficiency(bsz, m, n_, k, card.sm_count)
        rows.append(
            {
                "what": "gemm",
                "shape": f"{bsz}x{m}x{n_}x{k}",
                "precision": "bf16",
                "tflops": 2 * bsz * m * n_ * k / s / 1e12,
                "model_tflops": rates.gemm.value * eff / 1e12 if rates else None,
                "model_shape_efficiency": eff,
            }
        )
    return rows


def attention_rows(timer: Timer, device: str, card: GpuSpec, small: bool) -> list[dict[str, Any]]:
    """Fused attention forward and forward+backward by sequence length (bf16, head dim 64)."""
    rows = []
    rates = class_rates(card, "bf16")
    tokens = 2048 if small else 65536
    for seq in (128, 256) if small else (128, 256, 512, 1024, 2048, 4096, 8192):
        bh = max(1, tokens // seq)
        q, k, v = (
            torch.randn(
                bh // 12 or 1, 12, seq, 64, device=device, dtype=torch.bfloat16, requires_grad=True
            )
            for _ in range(3)
        )
        flops_fwd = 4 * q.shape[0] * 12 * seq * seq * 64
        fwd = timer(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        grad = torch.ones_like(out)

        def both(q=q, k=k, v=v, grad=grad) -> None:
            F.scaled_dot_product_attention(q, k, v).backward(grad)

        total = timer(both)
        bwd = max(total - fwd, 1e-9)
        for phase, s, flops in (("forward", fwd, flops_fwd), ("backward", bwd, 2.5 * flops_fwd)):
            share = attention_efficiency(phase, seq, generation(card.name))
            model = rates.gemm.value * share if rates else None
            rows.append(
                {
                    "what": "attention",
                    "shape": f"{q.shape[0]}x12x{seq}x64",
                    "phase": phase,
                    "precision": "bf16",
                    "seq": seq,
                    "tflops": flops / s / 1e12,
                    "model_tflops": model / 1e12 if model else None,
                }
            )
    return rows


def memory_rows(timer: Timer, device: str, card: GpuSpec, small: bool) -> list[dict[str, Any]]:
    """Bytes/s of the common memory-bound kernels, large (256 MiB) and small (4 MiB) fp32."""
    rows = []
    rates = class_rates(card, "bf16")
    for mib in (1, 4) if small else (4, 64, 256):
        numel = mib * 2**20 // 4
        x = torch.randn(numel, device=device)
        y = torch.randn(numel, device=device)
        rows2d = x.view(-1, 1024)
        ln = torch.nn.LayerNorm(1024, device=device)
        ops: dict[str, tuple[Callable[[], Any], float]] = {
            "copy": (x.clone, 2),
            "add": (functools.partial(torch.add, x, y), 3),
            "addcmul_": (functools.partial(x.addcmul_, y, y, value=0.0), 4),
            "gelu": (functools.partial(F.gelu, x), 2),
            "layer_norm": (functools.partial(ln, rows2d), 2),
            "softmax": (functools.partial(rows2d.softmax, -1), 2),
            "to_bf16": (functools.partial(x.to, torch.bfloat16), 1.5),
        }
        with torch.no_grad():
            for name, (fn, passes) in ops.items():
                s = timer(fn, inner=10)
                rows.append(
                    {
                        "what": "memory",
                        "op": name,
                        "mib": mib,
                        "gbs": passes * numel * 4 / s / 1e9,
                        "model_gbs": rates.bandwidth.value / 1e9 if rates else None,
                    }
                )
    return rows


def optimizer_rows(timer: Timer, device: str, small: bool) -> list[dict[str, Any]]:
    """AdamW over BERT-base's parameters: foreach and fused, bytes/s (fp32 master state)."""
    model = (
        resolve_model("bert_base").build().to(device)
        if not small
        else torch.nn.Linear(512, 512, device=device)
    )
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p)
    count = sum(p.numel() for p in params)
    rows = []
    for mode in ("foreach", "fused") if device == "cuda" else ("foreach",):
        opt = torch.optim.AdamW(params, lr=1e-4, **{mode: True})
        s = timer(opt.step, inner=3)
        # param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written (fp32)
        rows.append(
            {
                "what": "optimizer",
                "op": f"AdamW({mode}=True)",
                "params": count,
                "seconds": s,
                "gbs": 7 * 4 * count / s / 1e9,
            }
        )
    return rows


def h2d_rows(timer: Timer, device: str, small: bool) -> list[dict[str, Any]]:
    """Host-to-device copies of a 256 MiB batch, pinned and pageable."""
    if device != "cuda":
        return []
    rows = []
    numel = (4 if small else 256) * 2**20
    for pinned in (True, False):
        host = torch.empty(numel, dtype=torch.uint8, pin_memory=pinned)
        s = timer(lambda host=host: host.to(device, non_blocking=True), inner=3)
        rows.append({"what": "h2d", "pinned": pinned, "gbs": numel / s / 1e9})
    return rows


def launch_rows(device: str) -> list[dict[str, Any]]:
    """Host seconds per launch of a tiny kernel (1000 launches, then one wait)."""
    x = torch.zeros(16, device=device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(1000):
            x.add_(1)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 1000)
    return [{"what": "launch", "seconds_per_kernel": best}]


def kernel_class(name: str) -> str:
    """Operator class of a GPU kernel by its name (``class_rates.OP_CLASSES``)."""
    low = name.lower()
    if any(w in low for w in ("flash", "fmha", "attention", "attn")):
        return "attention"
    if any(w in low for w in ("conv", "fprop", "dgrad", "wgrad", "implicit_gemm", "winograd")):
        return "conv"
    if any(w in low for w in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul", "splitk")):
        return "gemm"
    if any(w in low for w in ("multi_tensor", "fused_adam", "adam")):
        return "optimizer"
    return "memory"


def class_rows(device: str, card: GpuSpec, small: bool, steps: int) -> list[dict[str, Any]]:
    """Each built-in model's step: kernel seconds per class, measured and modelled."""
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for case in CASES[:1] if small else CASES:
        batch = 2 if small else case.batch
        source = resolve_model(case.model)
        spec = input_spec(source, None, case.seq)
        est = estimate(
            case.model,
            batch_size=batch,
            precision=case.precision,
            seq_len=case.seq,
            channels_last=case.channels_last,
        )
        predicted = gpu_step_time(
            est, card, case.precision, with_h2d=False, channels_last=case.channels_last
        )
        with torch.device(device):
            model = source.build()
            x = make_batch(spec, batch)
        if case.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        opt = make_optimizer("adamw", list(model.parameters()), foreach=True)
        loss_fn = make_loss(spec)
        scaler = torch.amp.GradScaler(device, enabled=case.precision == "fp16")

        def step(model=model, x=x, opt=opt, loss_fn=loss_fn, scaler=scaler, case=case) -> None:
            opt.zero_grad(set_to_none=True)
            ctx = (
                _autocast(case.precision)
                if device == "cuda"
                else torch.autocast("cpu", enabled=False)
            )
            with ctx, torch.device(device):
                loss = loss_fn(model(x), (x,))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        for _ in range(3):
            step()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
        measured: dict[str, float] = {}
        for evt in prof.events():
            if device == "cuda" and evt.device_type == torch.autograd.DeviceType.CUDA:
                cls = kernel_class(evt.name)
                seconds = evt.time_range.elapsed_us() / 1e6 / steps
                measured[cls] = measured.get(cls, 0.0) + seconds
        rows.append(
            {
                "what": "classes",
                "case": case.label,
                "measured_s": measured,
                "measured_kernels_s": sum(measured.values()),
                "model_s": predicted.by_class if predicted else None,
                "model_kernels_s": predicted.kernels_s if predicted else None,
            }
        )
        del model, opt, x
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def versions() -> dict[str, Any]:
    """Card, driver and library versions the rows were measured with."""
    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name()
        out["cudnn"] = torch.backends.cudnn.version()
        out["cublas"] = getattr(torch.backends.cuda, "cublas_version", lambda: None)()
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            out["driver"] = smi.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            out["driver"] = None
    return out


def csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures as rows of ``measured_calibration.csv``'s columns."""
    v = doc["versions"]
    source = (
        f"measured by benchmarks/operator_rates_gpu.py: driver {v.get('driver')}, "
        f"CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}, PyTorch {v.get('torch')}"
    )
    gpu = v.get("device") or "cpu"
    out = []
    for r in doc["rows"]:
        base = {"gpu": gpu, "source": source, "batch": ""}
        if r["what"] == "gemm":
            out.append(
                base
                | {
                    "model": "GEMM",
                    "task": r["shape"],
                    "precision": r["precision"],
                    "metric": "achieved_tflops",
                    "value": f"{r['tflops']:.1f}",
                    "unit": "TFLOP/s",
                }
            )
        elif r["what"] == "attention":
            out.append(
                base
                | {
                    "model": f"SDPA {r['phase']}",
                    "task": r["shape"],
                    "precision": "bf16",
                    "metric": "attention_tflops",
                    "value": f"{r['tflops']:.1f}",
                    "unit": "TFLOP/s",
                }
            )
        elif r["what"] == "memory":
            metric = "achieved_bandwidth" if r["op"] == "copy" else "kernel_bandwidth"
            out.append(
                base
                | {
                    "model": r["op"],
                    "task": f"{r['mib']} MiB fp32",
                    "precision": "fp32",
                    "metric": metric,
                    "value": f"{r['gbs']:.0f}",
                    "unit": "GB/s",
                }
            )
        elif r["what"] == "optimizer":
            out.append(
                base
                | {
                    "model": r["op"],
                    "task": f"{r['params']} params",
                    "precision": "fp32",
                    "metric": "optimizer_bandwidth",
                    "value": f"{r['gbs']:.0f}",
                    "unit": "GB/s",
                }
            )
        elif r["what"] == "h2d":
            out.append(
                base
                | {
                    "model": "copy H2D",
                    "task": "pinned" if r["pinned"] else "pageable",
                    "precision": "n/a",
                    "metric": "h2d_bandwidth",
                    "value": f"{r['gbs']:.1f}",
                    "unit": "GB/s",
                }
            )
        elif r["what"] == "launch":
            out.append(
                base
                | {
                    "model": "tiny kernel",
                    "task": "host launch",
                    "precision": "n/a",
                    "metric": "launch_us",
                    "value": f"{1e6 * r['seconds_per_kernel']:.2f}",
                    "unit": "us",
                }
            )
    return out


def catalog_card(name: str) -> GpuSpec:
    """The catalog row of a device name, dropping trailing words until one matches.

    ``NVIDIA H100 80GB HBM3`` is the H100 SXM, the first H100 row.
    """
    words = name.replace("NVIDIA ", "").replace("-", " ").split()
    for end in range(len(words), 0, -1):
        try:
            return find_gpus([" ".join(words[:end])])[0]
        except Exception:
            continue
    return find_gpus(["H100 SXM"])[0]


def main() -> None:
    """Measure every part (each guarded: a failing part is reported, the rest go on)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--gpu", default=None, help="catalog card (default: the device's)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per model")
    parser.add_argument("--only", default="", help="comma-separated parts to run")
    parser.add_argument("--quick", action="store_true", help="3 repeats, 2 profiled steps")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    small = device == "cpu"
    name = args.gpu or (torch.cuda.get_device_name() if device == "cuda" else "H100 SXM")
    card = catalog_card(name)
    if args.quick:
        args.repeats, args.steps = 3, 2
    timer = Timer(device, 3 if small else args.repeats)
    parts: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "gemm": lambda: gemm_rows(timer, device, card, small),
        "attention": lambda: attention_rows(timer, device, card, small),
        "memory": lambda: memory_rows(timer, device, card, small),
        "optimizer": lambda: optimizer_rows(timer, device, small),
        "h2d": lambda: h2d_rows(timer, device, small),
        "launch": lambda: launch_rows(device),
        "classes": lambda: class_rows(device, card, small, 2 if small else args.steps),
    }
    wanted = [p for p in args.only.split(",") if p] or list(parts)
    doc: dict[str, Any] = {
        "benchmark": "operator_rates_gpu",
        "card": card.name,
        "versions": versions(),
        "rows": [],
        "errors": {},
    }
    for part in wanted:
        t0 = time.perf_counter()
        try:
            doc["rows"].extend(parts[part]())
        except Exception as err:
            doc["errors"][part] = f"{type(err).__name__}: {err}"
        print(f"{part}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    if args.csv:
        rows = csv_rows(doc)
        with args.csv.open("w", newline="") as fh:
            cols = [
                "model",
                "task",
                "batch",
                "precision",
                "gpu",
                "metric",
                "value",
                "unit",
                "source",
            ]
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
