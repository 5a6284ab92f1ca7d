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
PSS of the process tree (both read from /proc). Without ``--anchors``, FFCV and DALI
figures are printed from the anchors' result file beside the repository when present, as
reference only: they come from another run (and possibly another CPU).

Data: a synthetic set like the anchors' (4,000 q90 JPEGs, sides 200-500 px, 10 classes),
generated once into ``--data-dir`` (default: <system temp dir>/gpuwise-bench), never into
the repository. Usage:

  python benchmarks/loader_throughput.py [--runs 5] [--seconds 6] [--json] [--quick]

Side by side with FFCV and DALI (issue 4): ``--anchors HARNESS --anchors-work WORK`` names
the loader anchors' harness folder and its work dir (the venvs its ``setup_envs.sh`` made).
Then the anchors' methods (``--anchor-methods``, default ffcv_jpg, ffcv_raw, dali_cpu,
pil_w2) run each in a fresh process through the harness's own ``bench.py`` in its own venv,
interleaved round-robin with gpuwise's (default gpuwise_t2, gpuwise_loader and
gpuwise_raw_loader: ``Loader(store, 256, num_threads=2, crop=224)`` over a raw store packed
at ``--raw-size``), all on the same files: the harness's generated ImageFolder, which gpuwise
packs into stores under ``WORK/gpuwise``. Every row counts CPU time and PSS of its process
tree from /proc alike; the report adds the issue's goals (>= 1.5x FFCV JPEG, >= 1.2x FFCV
raw, first batch <= 1 s, PSS <= 1/4 of FFCV's).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _jpeg_dataset
import _loader_anchors
import _loader_report
from _loader_report import ANCHORED, ratios, render, summarise

BATCH, OUT = 256, 224
METHODS = ("pil_w0", "pil_w2", "sj_cv2_t2", "sj_full_cv2_t2", "floor_t2", "gpuwise_t2",
           "gpuwise_loader")  # fmt: skip


# ------------------------------------------------------------------------------ data
def prepare(data_dir: Path, count: int, root: Path | None = None, raw_size: int = 0) -> Path:
    """Generate (or take) the JPEG set, write the packed file and the gpuwise stores."""
    if root is None:
        root = data_dir / f"jpeg{count}"
        _jpeg_dataset.make_jpeg_set(root, count)
    _jpeg_dataset.write_packed(root, data_dir / f"packed{count}")
    stores = {f"store{count}": {"mode": "jpeg"}}
    if raw_size:
        stores[f"raw{raw_size}store{count}"] = {"mode": "raw", "size": raw_size}
    for name, config in stores.items():
        if not (data_dir / name).exists():
            try:
                from gpuwise.data.pack import PackConfig, pack

                pack(root, data_dir / name, PackConfig(workers=2, **config))  # type: ignore[arg-type]
            except Exception as err:  # the stores are optional for this benchmark
                print(f"(no gpuwise store {name}: {err})", file=sys.stderr)
    return root


# ------------------------------------------------------------------------------ methods
Batches = Callable[[int], Iterator[object]]


def pil_method(root: Path, workers: int) -> Batches:
    import torch
    from PIL import Image

    from gpuwise.data.jpeg import sample_box

    paths, labels = _jpeg_dataset.list_images(root)

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


def loader_method(store_dir: Path) -> Batches:
    from gpuwise.data.loader import Loader
    from gpuwise.data.store.read import open_store

    store = open_store(store_dir)
    loader = Loader(store, BATCH, num_threads=2, crop=OUT, drop_last=True)
    return lambda epoch: iter(loader)


def make_method(name: str, data_dir: Path, count: int, root: Path, raw_size: int) -> Batches:
    if name.startswith("pil_w"):
        return pil_method(root, int(name[-1]))
    if name == "gpuwise_loader":
        return loader_method(data_dir / f"store{count}")
    if name == "gpuwise_raw_loader":
        return loader_method(data_dir / f"raw{raw_size}store{count}")
    return threaded_method(data_dir, count, name)


# ------------------------------------------------------------------------------ measuring
def measure(name: str, args: argparse.Namespace) -> dict:
    """Time one method's steady state after its first batch and two warm-up batches."""
    root = args.root or args.data_dir / f"jpeg{args.count}"
    batches = make_method(name, args.data_dir, args.count, root, args.raw_size)  # set-up: untimed
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
    cpu0, busy0 = _loader_anchors.tree_cpu_s(), _loader_anchors.machine_busy_s()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < args.seconds or n < 3 * BATCH:
        n += len(next_batch()[0])  # type: ignore[index]
    wall = time.perf_counter() - start
    cpu1, busy1 = _loader_anchors.tree_cpu_s(), _loader_anchors.machine_busy_s()
    pss = _loader_anchors.tree_pss_mb()
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    others = (busy1 - busy0 - cpu) / wall if busy0 and busy1 and cpu is not None else None
    return {
        "method": name, "images": n, "wall_s": round(wall, 3),
        "images_per_s": round(n / wall, 1),
        "images_per_cpu_s": round(n / cpu, 1) if cpu else None,
        "cores_busy": round(cpu / wall, 2) if cpu is not None else None,
        "first_batch_s": round(first_s, 3), "pss_mb": pss,
        "others_cores_busy": round(max(0.0, others), 3) if others is not None else None,
    }  # fmt: skip


def run_worker(name: str, args: argparse.Namespace) -> list[dict]:
    """Run one method in a fresh interpreter; returns [] when it fails (reason on stderr)."""
    cmd = [sys.executable, __file__, "--worker", name, "--data-dir", str(args.data_dir),
           "--count", str(args.count), "--seconds", str(args.seconds),
           "--raw-size", str(args.raw_size)]  # fmt: skip
    if args.root:
        cmd += ["--root", str(args.root)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(f"{name}: failed ({proc.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return []
    result = json.loads(lines[-1][7:])
    result["process_wall_s"] = round(time.perf_counter() - start, 2)
    return [result]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "gpuwise-bench")  # fmt: skip
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--methods", help=f"default {','.join(METHODS)}; with --anchors "
                    f"{','.join(ANCHORED)}")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="5 short runs on 1,000 images")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--anchors", type=Path, help="the loader anchors' harness folder")
    ap.add_argument("--anchors-work", type=Path, help="its work dir (venvs, data)")
    ap.add_argument("--anchor-methods", default=",".join(_loader_anchors.ANCHOR_METHODS))
    ap.add_argument("--raw-size", type=int, default=256, help="side of the raw store's images")
    ap.add_argument("--quiet-limit", type=float, default=0.3,
                    help="with --anchors: before each run, wait (<= 60 s) until other "
                    "processes use fewer cores than this")  # fmt: skip
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if (args.anchors is None) != (args.anchors_work is None):
        ap.error("--anchors and --anchors-work go together")
    return args


def run_rounds(args: argparse.Namespace, anchors: _loader_anchors.Anchors | None) -> dict:
    """Run every method ``args.runs`` times, round-robin, each in a fresh process."""
    listed = args.methods or ",".join(ANCHORED if anchors else METHODS)
    ours = [m for m in listed.split(",") if m]
    theirs = [m for m in args.anchor_methods.split(",") if m] if anchors else []
    runs: dict[str, list[dict]] = {m: [] for m in ours + [f"anchors_{m}" for m in theirs]}
    for m in theirs:
        if err := anchors.prepare(m):  # type: ignore[union-attr]
            print(f"anchors_{m}: prepare failed: {err}", file=sys.stderr)
    for k in range(args.runs):  # round-robin: drifts of the shared host hit every method
        for m in ours + theirs:
            before = _loader_anchors.wait_quiet(args.quiet_limit, 60.0) if anchors else None
            if m in ours:
                got = run_worker(m, args)
            else:
                result, err = anchors.run(m, args.seconds)  # type: ignore[union-attr]
                if result is None:
                    print(f"anchors_{m}: failed: {err}", file=sys.stderr)
                got, m = ([result] if result else []), f"anchors_{m}"
            for r in got:
                r["others_cores_busy_before"] = before
                print(f"round {k + 1} {m}: {r['images_per_s']} images/s, "
                      f"others' cores {r.get('others_cores_busy')}", file=sys.stderr)  # fmt: skip
            runs[m] += got
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        print("RESULT " + json.dumps(measure(args.worker, args)))
        return 0
    if args.quick:
        args.count, args.seconds = 1000, 1.5
    anchors = None
    if args.anchors:
        anchors = _loader_anchors.Anchors(args.anchors.resolve(), args.anchors_work.resolve())
        manifest = anchors.ensure_dataset()
        args.root, args.count = anchors.jpeg_root(), manifest["count"]
        args.data_dir = anchors.work / "gpuwise"
    args.data_dir.mkdir(parents=True, exist_ok=True)
    uses_raw = "gpuwise_raw_loader" in (args.methods or (",".join(ANCHORED) if anchors else ""))
    root = prepare(args.data_dir, args.count, args.root, args.raw_size if uses_raw else 0)
    if not anchors:
        manifest = json.loads((root / "manifest.json").read_text())
    runs = run_rounds(args, anchors)
    table = summarise(runs)
    doc = {"manifest": manifest, "methods": table, "ratios": ratios(table, anchors=anchors),
           "ratios_per_cpu_s": ratios(table, "images_per_cpu_s_median", anchors)}  # fmt: skip
    if anchors:
        doc["goals"] = _loader_report.goals(table)
        doc["raw_size"] = args.raw_size
    doc["raw"] = runs
    print(json.dumps(doc) if args.json else render(table, doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
