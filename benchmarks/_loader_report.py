"""Tables and ratios for benchmarks/loader_throughput.py (summaries of its per-run results).

With the loader anchors run in the same sitting (``--anchors``), :func:`goals` checks issue
4's goals against the measured rows: gpuwise's JPEG Loader >= 1.5x FFCV's JPEG loader, its
raw-mode Loader >= 1.2x FFCV's raw one, first batch <= 1 s, PSS <= 1/4 of FFCV's.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

BATCH, OUT = 256, 224
ANCHORED = ("gpuwise_t2", "gpuwise_loader", "gpuwise_raw_loader")  # run beside the anchors
ANCHORS = Path(__file__).resolve().parents[2] / "shared/anchors/loaders/results/pass3-roundrobin.md"
# (gpuwise row, anchors row, column, goal ratio, "ge" / "le"); None: no goal, shown for context
_VERSUS = (
    ("gpuwise_loader", "anchors_ffcv_jpg", "images_per_s_median", 1.5, "ge"),
    ("gpuwise_loader", "anchors_ffcv_jpg", "images_per_cpu_s_median", 1.5, "ge"),
    ("gpuwise_t2", "anchors_ffcv_jpg", "images_per_s_median", 1.5, "ge"),
    ("gpuwise_t2", "anchors_ffcv_jpg", "images_per_cpu_s_median", 1.5, "ge"),
    ("gpuwise_raw_loader", "anchors_ffcv_raw", "images_per_s_median", 1.2, "ge"),
    ("gpuwise_raw_loader", "anchors_ffcv_raw", "images_per_cpu_s_median", 1.2, "ge"),
    ("gpuwise_loader", "anchors_dali_cpu", "images_per_s_median", None, "ge"),
    ("gpuwise_loader", "anchors_pil_w2", "images_per_s_median", None, "ge"),
    ("gpuwise_loader", "anchors_ffcv_jpg", "pss_mb_median", 0.25, "le"),
    ("gpuwise_raw_loader", "anchors_ffcv_raw", "pss_mb_median", 0.25, "le"),
)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    def median(rs: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(values) if values else None

    table = {}
    for name, rs in runs.items():
        if not rs:
            continue
        rate = [r["images_per_s"] for r in rs]
        others = [r["others_cores_busy"] for r in rs if r.get("others_cores_busy") is not None]
        table[name] = {
            "images_per_s_median": round(statistics.median(rate), 1),
            "images_per_s_min": min(rate), "images_per_s_max": max(rate),
            "images_per_cpu_s_median": median(rs, "images_per_cpu_s"),
            "cores_busy_median": median(rs, "cores_busy"),
            "first_batch_s_median": median(rs, "first_batch_s"),
            "pss_mb_median": median(rs, "pss_mb"),
            "process_wall_s_median": median(rs, "process_wall_s"),
            "others_cores_busy_max": max(others) if others else None,
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


def ratios(
    table: dict[str, dict[str, Any]], key: str = "images_per_s_median", anchors: object = None
) -> dict[str, float]:
    """Return gpuwise's speed over each baseline's, by ``key`` (images/s or per CPU-second)."""

    def rate(name: str) -> float:
        return float(table.get(name, {}).get(key) or 0.0)

    bases = ["pil_w0", "pil_w2", "sj_cv2_t2", "sj_full_cv2_t2", "floor_t2"]
    bases += [name for name in table if name.startswith("anchors_")]
    out = {}
    for ours in ANCHORED:
        for base in bases:
            if rate(ours) and rate(base):
                out[f"{ours}_vs_{base}"] = round(rate(ours) / rate(base), 3)
    past = {} if anchors else anchor_rows(3 if key == "images_per_s_median" else 5)
    if rate("sj_cv2_t2") and "ffcv_jpeg" in past and "sj_cv2_t2" in past:
        # FFCV is not run here: scale its anchor figure by today's speed of the shared baseline
        ffcv_today = rate("sj_cv2_t2") * past["ffcv_jpeg"] / past["sj_cv2_t2"]
        for ours in ("gpuwise_t2", "gpuwise_loader"):
            if rate(ours):
                out[f"{ours}_vs_ffcv_jpeg_estimated"] = round(rate(ours) / ffcv_today, 3)
    return out


def _cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def render(table: dict[str, dict[str, Any]], doc: dict[str, Any]) -> str:
    manifest = doc["manifest"]
    lines = [
        f"data: {manifest['count']} JPEGs q{manifest['quality']}, {manifest['mean_kb']} KB, "
        f"{manifest['mean_megapixels']} MP mean; batch {BATCH}, RandomResizedCrop {OUT} + flip",
        "| method | images/s median | min | max | images/CPU-s | cores busy | first batch s "
        "| process s | PSS MB | others' cores max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in table.items():
        lines.append(
            f"| {name} | {r['images_per_s_median']:.0f} | {r['images_per_s_min']:.0f} | "
            f"{r['images_per_s_max']:.0f} | {_cell(r['images_per_cpu_s_median'], '.0f')} | "
            f"{_cell(r['cores_busy_median'], '.2f')} | {_cell(r['first_batch_s_median'], '.2f')}"
            f" | {_cell(r['process_wall_s_median'], '.1f')} | {_cell(r['pss_mb_median'], '.0f')}"
            f" | {_cell(r['others_cores_busy_max'], '.2f')} |"
        )
    lines.append("ratios by images/s (what a trainer sees; noisy when the host is shared):")
    lines += [f"  {k}: {v:.2f}x" for k, v in doc["ratios"].items()]
    lines.append("ratios by images per CPU-second (robust to other processes on the host):")
    lines += [f"  {k}: {v:.2f}x" for k, v in doc["ratios_per_cpu_s"].items()]
    if "goals" in doc:
        lines.append("issue 4 goals, measured in this run:")
        lines += [goal_line(g) for g in doc["goals"]]
    elif anchors := anchor_rows():
        lines.append("reference only, from the anchors' own run (another time, same machine kind):")
        lines += [f"  {k}: {v:.0f} images/s" for k, v in anchors.items()]
    return "\n".join(lines)


def goals(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 4's goals against rows measured in the same run.

    Returns:
        One ``{"name", "value", "goal", "op", "met"}`` per goal whose rows were measured
        (``goal`` None: a ratio shown for context); ``op`` is ``">="`` or ``"<="``.
    """
    out = []
    for ours, theirs, key, goal, how in _VERSUS:
        mine, base = table.get(ours, {}).get(key), table.get(theirs, {}).get(key)
        if mine and base:
            value = round(mine / base, 3)
            met = None if goal is None else (value >= goal if how == "ge" else value <= goal)
            name = f"{ours} / {theirs} ({key.removesuffix('_median')})"
            op = ">=" if how == "ge" else "<="
            out.append({"name": name, "value": value, "goal": goal, "op": op, "met": met})
    for ours in ("gpuwise_loader", "gpuwise_raw_loader", "gpuwise_t2"):
        first_s = table.get(ours, {}).get("first_batch_s_median")
        if first_s is not None:
            name = f"{ours} first batch s"
            out.append({"name": name, "value": first_s, "goal": 1.0, "op": "<=",
                        "met": first_s <= 1.0})  # fmt: skip
    return out


def goal_line(goal: dict[str, Any]) -> str:
    """One line of the goals list: value, goal and whether it is met."""
    if goal["goal"] is None:
        return f"  {goal['name']}: {goal['value']:.2f}"
    verdict = "met" if goal["met"] else "NOT met"
    return f"  {goal['name']}: {goal['value']:.2f} (goal {goal['op']} {goal['goal']}: {verdict})"
