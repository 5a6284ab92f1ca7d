"""Step time against published training runs, each source left out of the fit that predicts it.

Every published run that gpuwise can express is sized as its source ran it and timed
with the per-operator-class model (``sizing.speed.class_rates``): NVIDIA Deep Learning
Examples, Lambda's benchmark results (ResNet-50 and BERT SQuAD), timm's benchmark CSVs
(ResNet-50, ViT-B/16), the Zeus traces, torchtune's fine-tuning table and this project's
own H100 and H200 checks. The model's three fitted numbers (``CONV_EFFICIENCY``,
``MEMORY_EFFICIENCY``, ``BYTES_PER_SM_CLOCK``) are fitted on all sources but one, and the
rows of that source are predicted with them; each source takes its turn. So the accuracy
printed is on sources the fit never saw. The shipped model (its numbers fitted on every
row) and the former model (per-generation kernel factors, ``--before`` with a checkout
of the former code) are printed beside.

Rows whose published rate needs more FLOP/s than the card's datasheet peak at the stated
setup are listed and left out: no model of that setup can reproduce them.

    python benchmarks/sizing_sources.py            # traces cached under the temp folder
    python benchmarks/sizing_sources.py --no-cache
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import math
import pickle
import shlex
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _transformer_rows  # noqa: E402

from gpuwise.sizing.hardware import calibration  # noqa: E402
from gpuwise.sizing.hardware.calibration import memory_format, same_card  # noqa: E402
from gpuwise.sizing.hardware.catalog import GpuSpec, load_catalog  # noqa: E402
from gpuwise.sizing.memory.estimate import estimate  # noqa: E402
from gpuwise.sizing.memory.result import MemoryEstimate  # noqa: E402
from gpuwise.sizing.speed import class_rates as cr  # noqa: E402
from gpuwise.sizing.speed.paging import paging_s  # noqa: E402
from gpuwise.sizing.speed.roofline import (  # noqa: E402
    HOST_LAUNCH_S,
    MIN_KERNEL_S,
    TRANSPOSE_KERNELS,
    _flop_rate,
    gpu_rates,
    gpu_step_time,
    transposed,
)

DATA = ROOT / "src" / "gpuwise" / "sizing" / "hardware"
CONFIGS = {"Llama 3.1 8B": ROOT / "tests" / "sizing" / "data" / "llama31_8b_config.json"}
H100_RUN = ROOT / "tests" / "realdata" / "h100_layout_transposes.json"
H200_RUN = ROOT / "benchmarks" / "results" / "sizing-gpu-h200.json"
IMAGENET = 1_281_167
SOURCES = {
    "DeepLearningExamples": "NVIDIA DLE",
    "lambdal": "Lambda",
    "pytorch-image-models": "timm",
    "zeus": "Zeus",
    "torchtune": "torchtune",
    "h100_layout": "gpuwise H100 check",
    "h200_builtin": "gpuwise H200 check",
}
FITTED = ("CONV_EFFICIENCY", "MEMORY_EFFICIENCY", "BYTES_PER_SM_CLOCK")
GRIDS = (np.linspace(0.4, 1.0, 13), np.linspace(0.6, 1.2, 13), np.linspace(4.0, 16.0, 13))


@dataclass(frozen=True)
class Run:
    """One published run: what was trained, where, and its rate (samples/s)."""

    source: str
    model: str
    gpu: GpuSpec
    batch: int
    precision: str
    measured: float
    key: str
    channels_last: bool = False
    compiled: bool = False


def _card(name: str) -> GpuSpec | None:
    if name.startswith(("CPU", "n/a")) or "x NVIDIA" in name:
        return None
    return next((g for g in load_catalog() if same_card(name, g.name)), None)


def _source(text: str) -> str:
    return next((label for key, label in SOURCES.items() if key in text), text.split()[0])


def _precision(text: str) -> str:
    return "fp16" if "fp16" in text else "bf16" if "bf16" in text else "fp32"


def resnet_runs() -> list[Run]:
    """ResNet-50 training and inference rows of ``measured_calibration.csv`` (samples/s)."""
    to_rate = {
        "epoch_time": lambda v: IMAGENET / v,
        "time_to_train_90_epochs": lambda v: IMAGENET * 90 / (v * 3600),
    }
    runs = []
    for m in calibration.load_measurements():
        gpu = _card(m.gpu)
        if "resnet" not in m.model.lower() or m.batch is None or gpu is None:
            continue
        rate: Callable[[float], float] | None = to_rate.get(m.metric)
        if rate is None and "throughput" not in m.metric and "per_second" not in m.metric:
            continue
        training = not m.metric.startswith("infer")
        optimizer = "adadelta" if "zeus" in m.source else "sgd_momentum"
        key = f"resnet50|{m.batch}|{_precision(m.precision)}|{training}|{optimizer}"
        value = rate(m.value) if rate else m.value
        label = "ResNet-50" if training else "ResNet-50 inference"
        nhwc = memory_format(m) == "nhwc"
        runs.append(
            Run(_source(m.source), label, gpu, m.batch, _precision(m.precision), value, key, nhwc)
        )
    return runs


def h100_runs() -> list[Run]:
    """This project's H100 check (ResNet-50, batch 128, four set-ups): steps in ms."""
    import json

    gpu = _card("NVIDIA H100 SXM")
    assert gpu is not None
    runs = []
    for setup, row in json.loads(H100_RUN.read_text())["results"].items():
        precision, layout = setup.split()
        key = f"resnet50|128|{precision}|True|sgd_momentum"
        rate = 128 / (row["step_ms"] / 1e3)
        nhwc = layout == "nhwc"
        runs.append(Run(SOURCES["h100_layout"], "ResNet-50", gpu, 128, precision, rate, key, nhwc))
    return runs


def h200_runs() -> list[Run]:
    """This project's H200 check: the built-in models' steps (``sizing_gpu.py``)."""
    import json

    from sizing_gpu import CASES

    gpu = _card("NVIDIA H200 SXM")
    assert gpu is not None
    measured = {r["case"]: r["measured_step_s"] for r in json.loads(H200_RUN.read_text())["rows"]}
    runs = []
    for case in CASES:
        if case.label not in measured:
            continue
        key = f"builtin|{case.model}|{case.batch}|{case.precision}|{case.seq}|{case.channels_last}"
        rate = case.batch / measured[case.label]
        runs.append(
            Run(SOURCES["h200_builtin"], case.model, gpu, case.batch, case.precision, rate, key,
                case.channels_last)
        )  # fmt: skip
    return runs


def bert_runs() -> list[Run]:
    """Lambda's BERT SQuAD rows (``measured_transformers.csv``) as DLE's run_squad runs."""
    runs = []
    for m in calibration.load_transformer_rows():
        gpu = _card(m.gpu)
        if gpu is None or m.batch is None:
            continue
        half = m.precision.startswith("amp")
        precision = "fp16" if half else "tf32" if gpu.tflops.get("tf32") else "fp32"
        key = f"bert|{m.model}|{half}"
        runs.append(Run("Lambda", m.model, gpu, m.batch, precision, m.value, key))
    return runs


def timm_vit_runs() -> list[Run]:
    """Timm's ViT-B/16 training rows of ``measured_calibration.csv``."""
    runs = []
    for m in calibration.load_measurements():
        gpu = _card(m.gpu)
        if not m.model.startswith("vit_base_patch16_224") or gpu is None or m.batch is None:
            continue
        key = f"vit|{m.batch}|{_precision(m.precision)}"
        runs.append(Run("timm", "ViT-B/16", gpu, m.batch, _precision(m.precision), m.value, key))
    return runs


def finetune_runs() -> list[Run]:
    """Torchtune's tokens/s rows of ``published_finetune.csv`` (samples/s: tokens / seq)."""
    runs = []
    with (DATA / "published_finetune.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            gpu = _card(row["gpu"])
            if row["metric"] != "train_tokens_per_s" or not row["argv"] or gpu is None:
                continue
            key = f"ft|{row['model']}|{row['seq']}|{row['batch']}|{row['argv']}"
            rate = float(row["value"]) / int(row["seq"])
            label = f"{row['model']} {row['method']}"
            compiled = "--compile" in row["argv"]
            runs.append(
                Run("torchtune", label, gpu, int(row["batch"]), "bf16", rate, key, False, compiled)
            )
    return runs


def _trace_resnet(key: str) -> MemoryEstimate:
    _, batch, precision, training, optimizer = key.split("|")
    return estimate(
        "resnet50",
        batch_size=int(batch),
        precision=precision,
        optimizer=optimizer,
        training=training == "True",
        foreach=optimizer != "adadelta",
    )


def _trace_builtin(key: str) -> MemoryEstimate:
    _, model, batch, precision, seq, channels_last = key.split("|")
    return estimate(
        model,
        batch_size=int(batch),
        precision=precision,
        seq_len=None if seq == "None" else int(seq),
        channels_last=channels_last == "True",
    )


def _trace_bert(key: str) -> MemoryEstimate:
    _, model, half = key.split("|")
    return _transformer_rows._trace(model, half == "True", "eager")


def _trace_vit(key: str) -> MemoryEstimate:
    _, batch, precision = key.split("|")
    # timm's results of PyTorch 1.12 predate SDPA: its attention ran as matmuls and softmax
    return estimate(
        "vit_b_16",
        batch_size=int(batch),
        precision=precision,
        optimizer="sgd_momentum",
        attention="eager",
    )


def _trace_finetune(key: str) -> MemoryEstimate:
    from gpuwise.cli.sizing._model_args import add_model_arguments, job_from_args
    from gpuwise.sizing.memory.estimate import estimate_job

    _, model, seq, batch, argv = key.split("|")
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    parser.add_argument("--compile", action="store_true")
    flags = ["--hf-config", str(CONFIGS[model]), "--seq", seq, "--batch", batch]
    return estimate_job(job_from_args(parser.parse_args([*flags, *shlex.split(argv)])))


TRACERS: dict[str, Callable[[str], MemoryEstimate]] = {
    "resnet50": _trace_resnet,
    "bert": _trace_bert,
    "vit": _trace_vit,
    "ft": _trace_finetune,
    "builtin": _trace_builtin,
}


@functools.cache
def tracing_code() -> str:
    """A digest of the code a trace depends on: a change to it makes the cache miss."""
    digest = hashlib.sha1()
    for folder in ("job", "memory", "step"):
        for path in sorted((ROOT / "src" / "gpuwise" / "sizing" / folder).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Traces:
    """Traces by key, kept in memory and (unless disabled) pickled to a cache folder."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.memo: dict[str, MemoryEstimate] = {}

    def __call__(self, key: str) -> MemoryEstimate:
        """The trace of ``key`` (``TRACERS`` by its first field)."""
        if key in self.memo:
            return self.memo[key]
        path = None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha1((key + tracing_code()).encode()).hexdigest()
            path = self.folder / (name + ".pkl")
        if path is not None and path.exists():
            est: MemoryEstimate = pickle.loads(path.read_bytes())
        else:
            est = replace(TRACERS[key.split("|")[0]](key), job=None)
            if path is not None:
                path.write_bytes(pickle.dumps(est))
        self.memo[key] = est
        return est


@dataclass
class RunArrays:
    """A run's operators timed once at unit efficiencies, for fast refits."""

    compute: np.ndarray
    memory: np.ndarray
    conv: np.ndarray
    transpose_bytes: float
    kernels: int
    paging_s: float
    copy_bw: float
    sm_clock: float


def run_arrays(run: Run, est: MemoryEstimate) -> RunArrays:
    """Per-operator FLOP seconds and bytes for ``run`` (efficiencies applied in ``seconds``)."""
    rates = gpu_rates(run.gpu, run.precision)
    assert rates is not None
    scale = run.batch / est.batch_size
    compute, moved, conv = [], [], []
    transpose = 0.0
    kernels = 0
    for op in est.ops:
        if op.kernels == 0 or (run.compiled and op.fusible):
            continue
        grow = 1.0 if op.phase == "optimizer" else scale
        kind = cr.op_class(op)
        rate = _flop_rate(op, kind, rates, scale, run.precision, est.widths)
        if kind == "conv":
            rate /= cr.CONV_EFFICIENCY
        compute.append(op.flops * grow / rate if op.flops else 0.0)
        moved.append(op.bytes_moved * grow)
        conv.append(kind == "conv")
        kernels += op.kernels
        if not run.channels_last and transposed(op, rates, run.precision):
            transpose += 2 * op.layout_bytes * scale
            kernels += TRANSPOSE_KERNELS.get(op.phase, 2)
    copy = calibration.copy_efficiency(run.gpu.name, run.gpu.bandwidth_gbs)
    sm_clock = (run.gpu.sm_count or 0) * (run.gpu.boost_clock_mhz or 0) * 1e6
    return RunArrays(
        np.array(compute),
        np.array(moved),
        np.array(conv),
        transpose,
        kernels,
        paging_s(run.gpu, est),
        run.gpu.bandwidth_gbs * 1e9 * copy,
        sm_clock,
    )


def seconds(a: RunArrays, params: tuple[float, float, float]) -> float:
    """The step at ``(conv efficiency, memory efficiency, bytes per SM-clock)``."""
    conv, mem, per_sm = params
    bandwidth = a.copy_bw * mem
    if a.sm_clock:
        bandwidth = min(bandwidth, a.sm_clock * per_sm)
    compute = np.where(a.conv, a.compute / conv, a.compute)
    ops = np.maximum(np.maximum(compute, a.memory / bandwidth), MIN_KERNEL_S).sum()
    kernels = ops + a.transpose_bytes / bandwidth
    return float(max(kernels, a.kernels * HOST_LAUNCH_S)) + a.paging_s


def median_error(pairs: list[tuple[float, float]]) -> float:
    """Median |ln(predicted / measured)|."""
    return calibration.median_abs_log_ratio(pairs)


def fit(rows: list[tuple[Run, RunArrays]]) -> tuple[float, float, float]:
    """The three numbers minimising the mean |log ratio| over ``rows`` (coordinate search).

    The mean, not the median: a median's minimum jumps between flat stretches when a
    source is left out.
    """
    params = [cr.CONV_EFFICIENCY, cr.MEMORY_EFFICIENCY, cr.BYTES_PER_SM_CLOCK]

    def error(p: list[float]) -> float:
        t = (p[0], p[1], p[2])
        return statistics.fmean(
            abs(math.log(r.batch / seconds(a, t) / r.measured)) for r, a in rows
        )

    for _ in range(3):
        for i, grid in enumerate(GRIDS):
            params[i] = float(min(grid, key=lambda v: error([*params[:i], v, *params[i + 1 :]])))
    return params[0], params[1], params[2]


def feasible(run: Run, est: MemoryEstimate) -> bool:
    """Whether the published rate needs no more than the card's datasheet matrix peak."""
    need = est.flops_per_step / est.batch_size * run.measured
    peak = max(run.gpu.peak_flops(run.precision) or 0.0, run.gpu.peak_flops("tf32") or 0.0)
    return need <= peak


def _print_rows(results: list[tuple[Run, float, float]]) -> None:
    print(f"{'source':<19} {'model':<22} {'gpu':<22} {'batch':>5} {'prec':<5}", end="")
    print(f" {'measured':>9} {'shipped':>8} {'held out':>8}")
    for r, shipped, held in results:
        print(f"{r.source:<19} {r.model[:22]:<22} {r.gpu.name[:22]:<22} {r.batch:>5}", end="")
        print(f" {r.precision:<5} {r.measured:>9,.1f} {shipped / r.measured:>8.2f}", end="")
        print(f" {held / r.measured:>8.2f}")


def _summary(results: list[tuple[Run, float, float]]) -> None:
    for name, idx in (("shipped numbers (fitted on every row)", 1), ("held out", 2)):
        pairs = [(x[idx], x[0].measured) for x in results]
        out = [x for x in results if not 0.67 <= x[idx] / x[0].measured <= 1.5]
        median = median_error(pairs)
        print(f"{name:<40} n={len(pairs)} median |ln ratio| {median:.3f} (x{math.exp(median):.3f})"
              f", rows outside 0.67-1.5x: {len(out)}")  # fmt: skip
    print("per card, median ratio (held out):")
    for card in sorted({x[0].gpu.name for x in results}):
        ratios = [x[2] / x[0].measured for x in results if x[0].gpu.name == card]
        print(f"  {card:<26} n={len(ratios):>2}  {statistics.median(ratios):.2f}"
              f"  ({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    worst = sorted(results, key=lambda x: -abs(math.log(x[2] / x[0].measured)))[:5]
    print("worst rows (held out):")
    for r, _, held in worst:
        print(f"  {r.source}: {r.model} on {r.gpu.name}, batch {r.batch} {r.precision}:"
              f" {held / r.measured:.2f}")  # fmt: skip
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r, _, held in results:
        groups.setdefault((r.source, r.model, r.precision), []).append((held, r.measured))
    taus = [  # one model, precision and source across at least six cards
        (calibration.kendall_tau(p), len(p), k) for k, p in sorted(groups.items()) if len(p) >= 6
    ]
    for tau, n, (source, model, precision) in taus:
        print(f"Kendall tau across GPUs, {source} {model} {precision}: {tau:.2f} (n={n})")


def main() -> int:
    """Fit leaving each source out, print the rows and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cache", action="store_true", help="trace everything afresh")
    parser.add_argument(
        "--quick", action="store_true", help="the same run (`make bench`): every row is needed"
    )
    args = parser.parse_args()
    cache = None if args.no_cache else Path(tempfile.gettempdir()) / "gpuwise-sizing-sources"
    traces = Traces(cache)
    runs = resnet_runs() + h100_runs() + h200_runs() + bert_runs() + timm_vit_runs()
    runs += finetune_runs()
    rows = []
    for run in runs:
        est = traces(run.key)
        if not feasible(run, est):
            print(f"left out: {run.source} {run.model} on {run.gpu.name}: its rate needs more"
                  " than the card's datasheet peak at the stated set-up")  # fmt: skip
            continue
        rows.append((run, run_arrays(run, est)))
    shipped = (cr.CONV_EFFICIENCY, cr.MEMORY_EFFICIENCY, cr.BYTES_PER_SM_CLOCK)
    results = []
    for source in sorted({r.source for r, _ in rows}):
        params = fit([(r, a) for r, a in rows if r.source != source])
        print(f"fit without {source:<19} " + ", ".join(
            f"{n} {v:.3g}" for n, v in zip(FITTED, params, strict=True)))  # fmt: skip
        for r, a in rows:
            if r.source == source:
                results.append((r, r.batch / seconds(a, shipped), r.batch / seconds(a, params)))
    everything = fit(rows)
    print("fit on every source:          " + ", ".join(
        f"{n} {v:.3g}" for n, v in zip(FITTED, everything, strict=True)))  # fmt: skip
    print("shipped:                      " + ", ".join(
        f"{n} {v:.3g}" for n, v in zip(FITTED, shipped, strict=True)))  # fmt: skip
    print()
    _print_rows(results)
    print()
    _summary(results)
    check = runs[0]
    step = gpu_step_time(traces(check.key), check.gpu, check.precision, batch_size=check.batch)
    assert step is not None  # the library's own path gives the same model
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
