"""``gpuwise store info|verify DST``: describe or check a gpuwise store."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "describe (info) or check the checksums of (verify) a gpuwise store"
EXAMPLES = """\
  gpuwise store info train.store
  gpuwise store verify train.store --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise store``."""
    parser.add_argument("action", choices=("info", "verify"), help="what to do")
    parser.add_argument("path", help="store directory")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _info_text(info: dict[str, Any]) -> str:
    lines = [
        f"{info['path']}: gpuwise store format {info['format_version']}, {info['mode']} mode",
        f"  records: {info['records']}    size: {info['bytes'] / 1e6:.1f} MB"
        f"    skipped at pack time: {info['skipped']}",
    ]
    for name, spec in info["fields"].items():
        if spec["kind"] == "jpeg":
            lines.append(f"  field {name}: JPEG bytes ({spec['file']}, index {spec['index']})")
        else:
            shape = "x".join(str(s) for s in spec["shape"]) or "scalar"
            lines.append(f"  field {name}: {spec['dtype']} {shape} ({spec['file']})")
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


def run(args: argparse.Namespace) -> int:
    """Open the store (sizes and header checked), then show info or verify checksums."""
    from gpuwise.data.store import Store

    store = Store(args.path)
    if args.action == "info":
        info = store.info()
        print(json.dumps(info, indent=1) if args.json else _info_text(info))
        return 0
    report = store.verify()
    print(json.dumps(report, indent=1) if args.json else _verify_text(report))
    for problem in report["problems"]:
        print(f"gpuwise store: error: {problem}", file=sys.stderr)
    return 0 if report["ok"] else 1
