"""Run every GPU-only check in one command and write one JSON of figures (``make gpu-check``).

On a machine with a CUDA GPU it runs, each in its own process with a time limit:

* ``pytest -m gpu`` (the prefetcher's overlap on a side stream, CUDA-event copy timing,
  the CUDA-only paths of the hooks and the loader);
* the memory estimate against ``torch.cuda.max_memory_allocated`` (``memory_estimate.py``,
  five models and more);
* NVML sampling and energy (``gpuwise monitor --once --json`` for a few samples);
* the profile hooks' overhead, the loader and the end-to-end benchmarks on the GPU;
* cuDNN's layout transposes against the roofline's charge, and the cuBLAS workspaces
  beside the estimate's peak (``layout_transposes_gpu.py``, ``memory_workspaces_gpu.py``);
* the estimate's step time and peak for built-in models against the GPU (``sizing_gpu.py``);
* each operator class's rate beside the step-time model's charge (``operator_rates_gpu.py``).

It prints a pass/fail table and writes ``gpu-check.json`` (``--out``): the device, versions,
and per check its command, exit code, seconds and the figures its ``--json`` printed.
Without a CUDA GPU it says so, writes the JSON with ``"gpu": null``, and exits 0.

Usage:
    python tools/gpu_check.py [--out gpu-check.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "gpuwise.gpu_check/1"
ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 900


@dataclass(frozen=True)
class Check:
    """One GPU-only check: a name, a command, and whether its stdout is JSON."""

    name: str
    argv: tuple[str, ...]
    json_out: bool = False


def checks(quick: bool) -> list[Check]:
    py = sys.executable
    q = ("--quick",) if quick else ()
    return [
        Check("pytest -m gpu", (py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider")),
        Check(
            "memory estimate vs allocator peak",
            (py, "benchmarks/memory_estimate.py", *q, "--json"),
            True,
        ),
        Check(
            "NVML sampling and energy", (py, "-m", "gpuwise", "monitor", "--once", "--json"), True
        ),
        Check("profile hooks overhead", (py, "benchmarks/profile_overhead.py", *q, "--json"), True),
        Check("loader throughput", (py, "benchmarks/loader_throughput.py", *q, "--json"), True),
        Check("end to end", (py, "benchmarks/end_to_end.py", *q, "--json"), True),
        Check("layout transposes", (py, "benchmarks/layout_transposes_gpu.py", *q, "--json"), True),
        Check("allocator workspaces", (py, "benchmarks/memory_workspaces_gpu.py", "--json"), True),
        Check("sizing vs the GPU", (py, "benchmarks/sizing_gpu.py", *q, "--json"), True),
        Check("operator rates", (py, "benchmarks/operator_rates_gpu.py", *q), True),
    ]


def gpu() -> dict[str, Any] | None:
    """The CUDA device this machine offers, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_total_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def run(check: Check, limit_s: float = LIMIT_S) -> dict[str, Any]:
    begin = time.monotonic()
    try:
        done = subprocess.run(
            check.argv, cwd=ROOT, capture_output=True, text=True, timeout=limit_s, check=False
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = 124, str(exc.stdout or ""), f"timed out after {limit_s:g} s"
    result: dict[str, Any] = {
        "name": check.name,
        "command": " ".join(check.argv[1:]),
        "exit_code": code,
        "seconds": round(time.monotonic() - begin, 1),
        "passed": code == 0,
    }
    if check.json_out and code == 0:
        try:
            result["figures"] = json.loads(out)
        except ValueError:
            result["figures"] = None
    if code != 0:
        result["error_tail"] = (err or out)[-2000:]
    return result


def table(results: list[dict[str, Any]]) -> str:
    width = max(len(r["name"]) for r in results)
    lines = [f"{'check':<{width}}  result  seconds"]
    for r in results:
        mark = "pass" if r["passed"] else f"FAIL ({r['exit_code']})"
        lines.append(f"{r['name']:<{width}}  {mark:<6}  {r['seconds']:>7.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check.json", help="the JSON file to write")
    parser.add_argument("--quick", action="store_true", help="the benchmarks' quick modes")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only the checks whose name contains TEXT (repeatable; default: all)",
    )
    parser.add_argument(
        "--limit-s",
        type=float,
        default=LIMIT_S,
        metavar="S",
        help=f"time limit of each check in seconds (default: {LIMIT_S})",
    )
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"schema": SCHEMA, "python": platform.python_version(), "gpu": gpu()}
    if doc["gpu"] is None:
        doc["checks"] = []
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"gpu-check: no CUDA GPU on this machine; nothing to check (wrote {args.out})")
        return 0
    chosen = [c for c in checks(args.quick) if not args.only or any(t in c.name for t in args.only)]
    doc["checks"] = []
    for check in chosen:  # the file is rewritten after each check: a killed run keeps the rest
        doc["checks"].append(run(check, args.limit_s))
        doc["passed"] = all(r["passed"] for r in doc["checks"])
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"gpu-check on {doc['gpu']['name']} (torch {doc['gpu']['torch']})")
    print(table(doc["checks"]))
    print(f"wrote {args.out}")
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
