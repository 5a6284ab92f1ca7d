"""Loader throughput: JPEG decode + RandomResizedCrop 224 + flip -> uint8 batches of 256.

Budget (shared DESIGN.md): the gpuwise JPEG mode must reach at least the best published
CPU pipelines on the same machine, per core; issue 4 sets >= 1.5x FFCV's JPEG loader,
which the anchors measured at 0.83x of plain simplejpeg + OpenCV on 2 threads here.

Measured side by side in one call, each method in a fresh process, methods interleaved
round-robin (the host is shared and drifts), median of the runs:

  pil_w0, pil_w2     the plain PyTorch way: Dataset opening files with PIL, crop + bilinear
                     resize + flip, torch DataLoader with 0 / 2 workers, default collate
  sj_cv2_t2          the anchors' plain method (e): simplejpeg decode at the smallest of its
                     DCT scales that keeps the crop >= 224 px, OpenCV INTER_AREA resize + flip
                     into a reused batch, 2 threads, from a packed JPEG file (np.memmap)
  sj_full_cv2_t2     the same with a full-size decode (faster here: the 7/8..5/8 scales are
                     slow C paths in libjpeg-turbo)
  floor_t2           simplejpeg full decode only (no crop, resize, collate), 2 threads:
                     the floor of any full-decode pipeline
  gpuwise_t2         gpuwise.data.jpeg.decode_crop on the same packed file, 2 threads
  gpuwise_loader     gpuwise.data.loader.Loader(store, 256, num_threads=2, crop=224) over a
                     store packed in JPEG mode (when the store and loader are installed)

Per method: images/s (median, min, max), images per CPU-second, time to first batch and the
PSS of the process tree. FFCV and DALI figures are printed from the anchors' result file
beside the repository when present, as reference only: they come from another run.

Data: a synthetic set like the anchors' (4,000 q90 JPEGs, sides 200-500 px, 10 classes),
generated once into ``--data-dir`` (default: <system temp dir>/gpuwise-bench), never into
the repository. Usage:

  python benchmarks/loader_throughput.py [--runs 5] [--seconds 6] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _jpeg_dataset

BATCH, OUT = 256, 224
METHODS = ("pil_w0", "pil_w2", "sj_cv2_t2", "sj_full_cv2_t2", "floor_t2", "gpuwise_t2",
           "gpuwise_loader")  # fmt: skip
ANCHORS = Path(__file__).resolve().parents[2] / "shared/anchors/loaders/results/pass3-roundrobin.md"


# ------------------------------------------------------------------------------ data
def prepare(data_dir: Path, count: int) -> Path:
    """Generate the JPEG set, the packed file and (if possible) a gpuwise store."""
    root = data_dir / f"jpeg{count}"
    _jpeg_dataset.make_jpeg_set(root, count)
    _jpeg_dataset.write_packed(root, data_dir / f"packed{count}")
    store = data_dir / f"store{count}"
    if not store.exists():
        try:
            from gpuwise.data.pack import PackConfig, pack

            pack(root, store, PackConfig(mode="jpeg", workers=2))
        except Exception as err:  # the store is optional for this benchmark
            print(f"(no gpuwise store: {err})", file=sys.stderr)
    return root


# ------------------------------------------------------------------------------ methods
Batches = Callable[[int], Iterator[object]]


def pil_method(data_dir: Path, count: int, workers: int) -> Batches:
    import torch
    from PIL import Image

    from gpuwise.data.jpeg import sample_box

    paths, labels = _jpeg_dataset.list_images(data_dir / f"jpeg{count}")

    class Folder(torch.utils.data.Dataset[tuple[np.ndarray, int]]):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, k: int) -> tuple[np.ndarray, int]:
            rng = np.random.default_rng()  # fresh entropy per sample, as workers would
            with Image.open(paths[k]) as im:
                im = im.convert("RGB")
                top, left, h, w = sample_box(rng, im.height, im.width)
                im = im.crop((left, top, left + w, top + h)).resize((OUT, OUT), Image.BILINEAR)
                if rng.random() < 0.5:
                    im = im.transpose(Image.FLIP_LEFT_RIGHT)
                return np.array(im), int(labels[k])

    loader = torch.utils.data.DataLoader(
        Folder(), batch_size=BATCH, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0, drop_last=True,
    )  # fmt: skip
    return lambda epoch: iter(loader)


def threaded_method(data_dir: Path, count: int, kind: str) -> Batches:
    from concurrent.futures import ThreadPoolExecutor

    import cv2
    import simplejpeg

    from gpuwise.data.jpeg import decode_crop, header, sample_box

    cv2.setNumThreads(1)
    blob, spans, labels = _jpeg_dataset.open_packed(data_dir / f"packed{count}")
    pool = ThreadPoolExecutor(2)
    out = np.empty((BATCH, OUT, OUT, 3), np.uint8)

    def plain_full(k: int, dst: np.ndarray, rng: np.random.Generator) -> None:
        img = simplejpeg.decode_jpeg(blob[spans[k, 0] : spans[k, 1]], colorspace="RGB",
                                     fastdct=True, fastupsample=True)  # fmt: skip
        top, left, h, w = sample_box(rng, img.shape[0], img.shape[1])
        cv2.resize(img[top : top + h, left : left + w], (OUT, OUT), dst=dst,
                   interpolation=cv2.INTER_AREA)  # fmt: skip
        if rng.random() < 0.5:
            cv2.flip(dst, 1, dst=dst)

    def plain_scaled(k: int, dst: np.ndarray, rng: np.random.Generator) -> None:
        # the anchors' method (e): simplejpeg picks the smallest of its 16 DCT scales that
        # keeps the crop >= 224 px, then INTER_AREA
        buf = blob[spans[k, 0] : spans[k, 1]]
        height, width = header(buf)
        top, left, h, w = sample_box(rng, height, width)
        s = min(1.0, max(OUT / h, OUT / w))
        img = simplejpeg.decode_jpeg(buf, colorspace="RGB", fastdct=True, fastupsample=True,
                                     min_height=math.ceil(height * s),
                                     min_width=math.ceil(width * s))  # fmt: skip
        fy, fx = img.shape[0] / height, img.shape[1] / width
        y0, x0 = int(top * fy), int(left * fx)
        y1, x1 = max(y0 + 1, round((top + h) * fy)), max(x0 + 1, round((left + w) * fx))
        cv2.resize(img[y0:y1, x0:x1], (OUT, OUT), dst=dst, interpolation=cv2.INTER_AREA)
        if rng.random() < 0.5:
            cv2.flip(dst, 1, dst=dst)

    def floor(k: int, dst: np.ndarray, rng: np.random.Generator) -> None:
        simplejpeg.decode_jpeg(blob[spans[k, 0] : spans[k, 1]], colorspace="RGB",
                               fastdct=True, fastupsample=True)  # fmt: skip

    def ours(k: int, dst: np.ndarray, rng: np.random.Generator) -> None:
        decode_crop(blob[spans[k, 0] : spans[k, 1]], dst, rng)

    kinds = {"sj_cv2_t2": plain_scaled, "sj_full_cv2_t2": plain_full, "floor_t2": floor}
    one = kinds.get(kind, ours)

    def fill(idx: np.ndarray, lo: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        for j, k in enumerate(idx):
            one(int(k), out[lo + j], rng)

    def epoch_iter(epoch: int) -> Iterator[object]:
        order = np.random.default_rng(epoch).permutation(len(spans))
        for b in range(len(order) // BATCH):
            idx = np.sort(order[b * BATCH : (b + 1) * BATCH])
            half = BATCH // 2
            jobs = [
                pool.submit(fill, idx[:half], 0, b * 2),
                pool.submit(fill, idx[half:], half, b * 2 + 1),
            ]
            for job in jobs:
                job.result()
            yield out, labels[idx]

    return epoch_iter


def loader_method(data_dir: Path, count: int) -> Batches:
    from gpuwise.data.loader import Loader
    from gpuwise.data.store import open_store

    store = open_store(data_dir / f"store{count}")
    loader = Loader(store, BATCH, num_threads=2, crop=OUT, drop_last=True)
    return lambda epoch: iter(loader)


def make_method(name: str, data_dir: Path, count: int) -> Batches:
    if name.startswith("pil_w"):
        return pil_method(data_dir, count, int(name[-1]))
    if name == "gpuwise_loader":
        return loader_method(data_dir, count)
    return threaded_method(data_dir, count, name)


# ------------------------------------------------------------------------------ measuring
def tree_cpu_pss() -> tuple[float, float | None]:
    """CPU seconds (user + system) and PSS in MB of this process and its live children."""
    import psutil

    procs = [psutil.Process()]
    procs += procs[0].children(recursive=True)
    cpu, pss = 0.0, 0.0
    for p in procs:
        try:
            times = p.cpu_times()
            cpu += times.user + times.system
            pss += getattr(p.memory_full_info(), "pss", float("nan"))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return cpu, (pss / 2**20 if pss == pss else None)


def measure(name: str, data_dir: Path, count: int, seconds: float) -> dict:
    """Time one method's steady state after its first batch and two warm-up batches."""
    batches = make_method(name, data_dir, count)  # imports and set-up, not timed
    t0 = time.perf_counter()  # first batch: from creating the iterator, as in issue 4
    epoch, it = 0, iter(batches(0))

    def next_batch() -> object:
        nonlocal epoch, it
        while True:
            try:
                return next(it)
            except StopIteration:
                epoch += 1
                it = iter(batches(epoch))

    first = next_batch()
    first_s = time.perf_counter() - t0
    images = np.asarray(first[0])  # type: ignore[index]
    if images.shape[1:] != (OUT, OUT, 3) or images.dtype != np.uint8:
        raise SystemExit(f"{name}: bad batch {images.dtype} {images.shape}")
    for _ in range(2):
        next_batch()
    cpu0, _ = tree_cpu_pss()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds or n < 3 * BATCH:
        n += len(next_batch()[0])  # type: ignore[index]
    wall = time.perf_counter() - start
    cpu1, pss = tree_cpu_pss()
    return {
        "method": name, "images": n, "wall_s": round(wall, 3),
        "images_per_s": round(n / wall, 1),
        "images_per_cpu_s": round(n / (cpu1 - cpu0), 1) if cpu1 > cpu0 else None,
        "cores_busy": round((cpu1 - cpu0) / wall, 2),
        "first_batch_s": round(first_s, 3), "pss_mb": round(pss, 1) if pss else None,
    }  # fmt: skip


def run_worker(name: str, data_dir: Path, count: int, seconds: float) -> list[dict]:
    """Run one method in a fresh interpreter; returns [] when it fails (reason on stderr)."""
    cmd = [sys.executable, __file__, "--worker", name, "--data-dir", str(data_dir),
           "--count", str(count), "--seconds", str(seconds)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(f"{name}: failed ({proc.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return []
    return [json.loads(lines[-1][7:])]


# ------------------------------------------------------------------------------ report
def summarise(runs: dict[str, list[dict]]) -> dict[str, dict]:
    table = {}
    for name, rs in runs.items():
        if not rs:
            continue
        rate = [r["images_per_s"] for r in rs]
        table[name] = {
            "images_per_s_median": round(statistics.median(rate), 1),
            "images_per_s_min": min(rate), "images_per_s_max": max(rate),
            "images_per_cpu_s_median": statistics.median(r["images_per_cpu_s"] or 0 for r in rs),
            "cores_busy_median": statistics.median(r["cores_busy"] for r in rs),
            "first_batch_s_median": statistics.median(r["first_batch_s"] for r in rs),
            "pss_mb_median": statistics.median(r["pss_mb"] or 0 for r in rs) or None,
            "runs": len(rs),
        }  # fmt: skip
    return table


ANCHOR_KEYS = {
    "(c) FFCV .beton JPEG": "ffcv_jpeg",
    "(c') FFCV .beton raw": "ffcv_raw",
    "(d) DALI CPU": "dali_cpu",
    "(e) simplejpeg + cv2, packed store, 2": "sj_cv2_t2",
    "(b) PIL + DataLoader, 2": "pil_w2",
}


def anchor_rows(column: int = 3) -> dict[str, float]:
    """A column of the anchors' committed table (another run; reference only).

    Column 3 is the median images/s, column 5 the median images per CPU-second.
    """
    if not ANCHORS.exists():
        return {}
    rows = {}
    for line in ANCHORS.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        for prefix, key in ANCHOR_KEYS.items():
            if len(cells) > 4 and cells[1].startswith(prefix):
                rows[key] = float(cells[column].replace(",", ""))
    return rows


def ratios(table: dict[str, dict], key: str = "images_per_s_median") -> dict[str, float]:
    """Return gpuwise's speed over each baseline's, by ``key`` (images/s or per CPU-second)."""

    def rate(name: str) -> float:
        return float(table.get(name, {}).get(key) or 0.0)

    out = {}
    for ours in ("gpuwise_t2", "gpuwise_loader"):
        for base in ("pil_w0", "pil_w2", "sj_cv2_t2", "sj_full_cv2_t2", "floor_t2"):
            if rate(ours) and rate(base):
                out[f"{ours}_vs_{base}"] = round(rate(ours) / rate(base), 3)
    anchors = anchor_rows(3 if key == "images_per_s_median" else 5)
    if rate("sj_cv2_t2") and "ffcv_jpeg" in anchors and "sj_cv2_t2" in anchors:
        # FFCV is not run here: scale its anchor figure by today's speed of the shared baseline
        ffcv_today = rate("sj_cv2_t2") * anchors["ffcv_jpeg"] / anchors["sj_cv2_t2"]
        for ours in ("gpuwise_t2", "gpuwise_loader"):
            if rate(ours):
                out[f"{ours}_vs_ffcv_jpeg_estimated"] = round(rate(ours) / ffcv_today, 3)
    return out


def render(
    table: dict[str, dict], rat: dict[str, float], per_cpu: dict[str, float], manifest: dict
) -> str:
    lines = [
        f"data: {manifest['count']} JPEGs q{manifest['quality']}, {manifest['mean_kb']} KB, "
        f"{manifest['mean_megapixels']} MP mean; batch {BATCH}, RandomResizedCrop {OUT} + flip",
        "| method | images/s median | min | max | images/CPU-s | cores busy | first batch s "
        "| PSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in table.items():
        lines.append(
            f"| {name} | {r['images_per_s_median']:.0f} | {r['images_per_s_min']:.0f} | "
            f"{r['images_per_s_max']:.0f} | {r['images_per_cpu_s_median']:.0f} | "
            f"{r['cores_busy_median']:.2f} | "
            f"{r['first_batch_s_median']:.2f} | {r['pss_mb_median'] or 'n/a'} |"
        )
    lines.append("ratios by images/s (what a trainer sees; noisy when the host is shared):")
    lines += [f"  {k}: {v:.2f}x" for k, v in rat.items()]
    lines.append("ratios by images per CPU-second (robust to other processes on the host):")
    lines += [f"  {k}: {v:.2f}x" for k, v in per_cpu.items()]
    anchors = anchor_rows()
    if anchors:
        lines.append("reference only, from the anchors' own run (another time, same machine kind):")
        lines += [f"  {k}: {v:.0f} images/s" for k, v in anchors.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "gpuwise-bench")  # fmt: skip
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--quick", action="store_true", help="5 short runs on 1,000 images")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(measure(args.worker, args.data_dir, args.count, args.seconds)))
        return 0
    if args.quick:
        args.count, args.seconds = 1000, 1.5
    args.data_dir.mkdir(parents=True, exist_ok=True)
    root = prepare(args.data_dir, args.count)
    manifest = json.loads((root / "manifest.json").read_text())
    methods = [m for m in args.methods.split(",") if m]
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for _ in range(args.runs):  # round-robin: drifts of the shared host hit every method
        for m in methods:
            runs[m] += run_worker(m, args.data_dir, args.count, args.seconds)
    table = summarise(runs)
    rat = ratios(table)
    per_cpu = ratios(table, "images_per_cpu_s_median")
    if args.json:
        doc = {"manifest": manifest, "methods": table, "ratios": rat,
               "ratios_per_cpu_s": per_cpu, "raw": runs}  # fmt: skip
        print(json.dumps(doc))
    else:
        print(render(table, rat, per_cpu, manifest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
