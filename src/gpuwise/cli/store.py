"""``gpuwise store info|verify DST``: describe or check a gpuwise store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuwise.cli._args import add_json
from gpuwise.cli._common import dtype_name, guard, print_json

HELP = "describe (info) or check the checksums of (verify) a gpuwise store"
EXAMPLES = """\
  gpuwise store info train.store            records, fields, classes, shard sizes
  gpuwise store verify train.store --json   every shard's size and sha256; exit 1 if any is bad
"""

INFO_SCHEMA = "gpuwise.store_info/1"
VERIFY_SCHEMA = "gpuwise.store_verify/1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise store``."""
    parser.add_argument(
        "action", choices=("info", "verify"), help="info: describe it; verify: check checksums"
    )
    parser.add_argument("path", metavar="STORE", help="store directory (made by gpuwise pack)")
    add_json(parser, f"{INFO_SCHEMA} or {VERIFY_SCHEMA}")


def _info_text(info: dict[str, Any]) -> str:
    from gpuwise.report.units import format_bytes

    lines = [
        f"{info['path']}: gpuwise store format {info['format_version']}, {info['mode']} mode",
        f"  records: {info['records']}    size: {format_bytes(info['bytes'])}"
        f"    skipped at pack time: {info['skipped']}",
    ]
    for name, spec in info["fields"].items():
        if spec["kind"] == "jpeg":
            lines.append(f"  field {name}: JPEG bytes ({spec['file']}, index {spec['index']})")
        else:
            shape = "x".join(str(s) for s in spec["shape"]) or "scalar"
            lines.append(f"  field {name}: {dtype_name(spec['dtype'])} {shape} ({spec['file']})")
    if info["classes"]:
        shown = ", ".join(info["classes"][:8])
        more = "…" if len(info["classes"]) > 8 else ""
        lines.append(f"  classes: {len(info['classes'])} ({shown}{more})")
    lines.extend(f"  shard {s['file']}: {s['bytes']} bytes" for s in info["shards"])
    return "\n".join(lines)


def _verify_text(report: dict[str, Any]) -> str:
    lines = [f"{report['path']}: {report['records']} records"]
    for s in report["shards"]:
        lines.append(f"  {'ok ' if s['ok'] else 'BAD'} {s['file']} ({s['bytes']} bytes)")
    lines.append("verified: all checksums match" if report["ok"] else "verify FAILED")
    return "\n".join(lines)


@guard
def run(args: argparse.Namespace) -> int:
    """Open the store (sizes and header checked), then show info or verify checksums."""
    from gpuwise.data.store.read import Store
    from gpuwise.data.store.verify import verify_store

    if args.action == "info":
        info = Store(args.path).info()
        if args.json:
            print_json({"schema": INFO_SCHEMA, **info})
        else:
            print(_info_text(info))
        return 0
    report = verify_store(args.path)
    if args.json:
        print_json({"schema": VERIFY_SCHEMA, **report})
    else:
        print(_verify_text(report))
    for problem in report["problems"]:
        print(f"gpuwise store: error: {problem}", file=sys.stderr)
    return 0 if report["ok"] else 1
