"""``gpuwise pack SRC DST``: pack images into a gpuwise store (see ``gpuwise.data.pack``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = "pack an image folder or numpy arrays into a fast-loading store"
EXAMPLES = """\
  gpuwise pack images/ train.store --size 224          # decoded 224x224 uint8 (fastest)
  gpuwise pack images/ train.store --mode jpeg         # keep the JPEG bytes (smallest)
  gpuwise pack data.npz train.store                    # arrays 'images', 'labels', extras
  gpuwise pack images.npy train.store --labels labels.npy --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise pack``."""
    parser.add_argument("src", help="ImageFolder directory (ROOT/CLASS/IMAGE), .npy or .npz")
    parser.add_argument("dst", help="store directory to create")
    parser.add_argument(
        "--mode", choices=("raw", "jpeg"), default="raw", help="raw: decoded uint8 (default)"
    )
    parser.add_argument("--size", type=int, help="raw mode: output side in pixels, e.g. 224")
    parser.add_argument(
        "--resize",
        choices=("center", "stretch"),
        default="center",
        help="center: shorter side to --size, then centre crop (default); stretch: both sides",
    )
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality when encoding")
    parser.add_argument("--labels", help=".npy of labels for a .npy image source")
    parser.add_argument("--workers", type=int, help="threads (default: all cores)")
    parser.add_argument("--strict", action="store_true", help="fail on the first bad image")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _summary(result: dict[str, Any]) -> str:
    size_mb = result["bytes"] / 1e6
    lines = [
        f"packed {result['records']} records into {result['path']} "
        f"({result['mode']} mode, {size_mb:.1f} MB, {result['seconds']:.1f} s)",
    ]
    for name, spec in (result["fields"] or {}).items():
        shape = "x".join(str(s) for s in spec.get("shape", [])) or "scalar"
        what = "JPEG bytes" if spec["kind"] == "jpeg" else f"{spec['dtype']} {shape}"
        lines.append(f"  field {name}: {what}")
    if result["classes"]:
        more = "…" if len(result["classes"]) > 5 else ""
        lines.append(
            f"  classes: {len(result['classes'])} ({', '.join(result['classes'][:5])}{more})"
        )
    lines.append(f"  skipped: {len(result['skipped'])}")
    lines.extend(f"    {s['item']}: {s['reason']}" for s in result["skipped"])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Pack, with a progress bar unless --json; print the summary."""
    import numpy as np
    from rich.console import Console
    from rich.progress import Progress

    from gpuwise.data.pack import PackConfig, pack

    config = PackConfig(
        mode=args.mode,
        size=args.size,
        resize=args.resize,
        quality=args.quality,
        workers=args.workers,
        strict=args.strict,
        overwrite=args.overwrite,
    )
    labels = None if args.labels is None else np.load(args.labels, allow_pickle=False)
    console = Console(stderr=True)
    with Progress(console=console, disable=args.json, transient=True) as bar:
        task = bar.add_task("packing", total=None)
        result = pack(
            args.src,
            args.dst,
            config,
            labels=labels,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        ).to_dict()
    print(json.dumps(result, indent=1) if args.json else _summary(result))
    return 0
