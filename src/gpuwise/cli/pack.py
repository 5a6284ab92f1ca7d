"""``gpuwise pack SRC DST``: pack images into a gpuwise store (see ``gpuwise.data.pack``)."""

from __future__ import annotations

import argparse
from typing import Any

from gpuwise.cli._args import add_json, add_strict, number, option, positive_int
from gpuwise.cli._common import dtype_name, guard, make_console, print_json
from gpuwise.data.pack_sources import MAX_SIDE_PX

PACK_SCHEMA = "gpuwise.pack/1"

HELP = "pack an image folder or numpy arrays into a fast-loading store"
EXAMPLES = """\
  gpuwise pack images/ train.store                     # photos of any size: JPEG bytes kept
  gpuwise pack images/ train.store --size 224          # decoded 224x224 uint8 (fastest)
  gpuwise pack images/ train.store --size 224 --workers 8 --json   # result on stdout
  gpuwise pack images/ train.store --mode jpeg         # keep the JPEG bytes (smallest)
  gpuwise pack data.npz train.store                    # arrays 'images', 'labels', extras
  gpuwise pack images.npy train.store --labels labels.npy --json
"""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``: the first stop signal ends it all."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise pack``."""
    parser.add_argument("src", help="ImageFolder directory (ROOT/CLASS/IMAGE), .npy or .npz")
    parser.add_argument("dst", help="store directory to create")
    parser.add_argument(
        "--mode",
        choices=("auto", "raw", "jpeg"),
        default="auto",
        help="raw: decoded uint8 pixels (fastest to load); jpeg: JPEG bytes (smallest); auto "
        "(default): raw with --size or for arrays, jpeg for an image folder without --size",
    )
    parser.add_argument(
        "--size",
        type=positive_int("pixel count", MAX_SIDE_PX),
        metavar="PX",
        help="output side in pixels, e.g. 224 (image folders: decode to raw pixels of this size)",
    )
    parser.add_argument(
        "--resize",
        choices=("center", "stretch"),
        default="center",
        help="center: shorter side to --size, then centre crop (default); stretch: both sides",
    )
    option(
        parser,
        "--quality",
        type=number("a JPEG quality", 1, 100),
        default=95,
        metavar="Q",
        help="JPEG quality 1 to 100 when images are re-encoded",
    )
    parser.add_argument(
        "--labels", metavar="FILE.npy", help="labels for a .npy image source (one per image)"
    )
    parser.add_argument(
        "--workers",
        type=positive_int("thread count"),
        metavar="N",
        help="decode threads (default: one per core)",
    )
    add_strict(parser, bad="bad image")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store")
    add_json(parser, PACK_SCHEMA)


def _summary(result: dict[str, Any]) -> str:
    from gpuwise.report.units import format_bytes, format_seconds

    lines = [
        f"packed {result['records']} records into {result['path']} ({result['mode']} mode, "
        f"{format_bytes(result['bytes'])}, {format_seconds(result['elapsed_s'])})",
    ]
    for name, spec in (result["fields"] or {}).items():
        shape = "x".join(str(s) for s in spec.get("shape", [])) or "scalar"
        what = "JPEG bytes" if spec["kind"] == "jpeg" else f"{dtype_name(spec['dtype'])} {shape}"
        lines.append(f"  field {name}: {what}")
    if result["classes"]:
        more = "…" if len(result["classes"]) > 5 else ""
        lines.append(
            f"  classes: {len(result['classes'])} ({', '.join(result['classes'][:5])}{more})"
        )
    lines.append(f"  skipped: {len(result['skipped'])}")
    lines.extend(f"    {s['item']}: {s['reason']}" for s in result["skipped"])
    if result.get("notes"):
        lines.append(f"  notes: {len(result['notes'])}")
        lines.extend(f"    {n['item']}: {n['note']}" for n in result["notes"])
    return "\n".join(lines)


@guard
def run(args: argparse.Namespace) -> int:
    """Pack with a progress bar on stderr (a terminal only); print the summary or JSON."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from gpuwise.atomic import check_outputs
    from gpuwise.data.pack import PackConfig, pack
    from gpuwise.data.pack_sources import load_labels

    inputs = [(args.src, "source"), *([(args.labels, "labels file")] if args.labels else [])]
    check_outputs([(args.dst, "store")], inputs)  # `--overwrite` must not remove the source

    config = PackConfig(
        mode=args.mode,
        size=args.size,
        resize=args.resize,
        quality=int(args.quality),
        workers=args.workers,
        strict=args.strict,
        overwrite=args.overwrite,
    )
    labels = None if args.labels is None else load_labels(args.labels)
    console = make_console(stderr=True)
    columns = ("packing", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task("packing", total=None)
        result = pack(
            args.src,
            args.dst,
            config,
            labels=labels,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        ).to_dict()
    if args.json:
        print_json({"schema": PACK_SCHEMA, **result})
    else:
        print(_summary(result))
    return 0
