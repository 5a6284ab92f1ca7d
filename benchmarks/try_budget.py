"""``gpuwise try`` on real scripts: the run budget and the share of the promised gain delivered.

What it measures: ``gpuwise try --json --steps N --warmup W`` on each job — the real
third-party scripts of ``tests/realscripts`` (fetched at pinned commits by
``python -m tests.realscripts.fetch``; absent ones are listed as skipped), among them a
Lightning and a Hugging Face Trainer script run on made-up local data, and the two
framework examples in ``examples/`` (Lightning, Hugging Face Trainer) — and from each
``gpuwise.try/1`` document:

- the budget: measured steps against ``(2k + 3) x N`` for ``k`` planned trials (warm-up
  steps count as start-up and are shown apart), and the runs they took;
- the bound promised by the fixes tried (the combined one when winners were combined) and
  the speedup measured with its 95 % interval;
- the rule: where the promised bound is at least 1.2x, the measured gain must reach 70 %
  of the promised gain, or the row says why not (no fix applies, a fix gained nothing,
  the fix was not tried and why).

The trials of one job run interleaved on one machine (A/B/A/B), so each speedup is a ratio
measured side by side; the machine's load is printed with each table.

Usage:
    python benchmarks/try_budget.py [--quick] [--steps N] [--warmup W] [--only NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.realscripts.sources import FRAMEWORK_SOURCES, SOURCES  # noqa: E402 - the repository root goes first

BOUND_RULE = 1.2
DELIVERED_SHARE = 0.7
TIMEOUT_S = 900

QUICK_SCRIPT = """\
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.002)  # a remote read
        return torch.full((4,), float(i % 5)), torch.ones(1)


torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Slow(), batch_size=4, shuffle=True):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def jobs(quick: bool) -> list[tuple[str, list[str], Any]]:
    """``(name, argv after python, setup(workdir))`` of every job to try."""
    if quick:
        return [("quick_loader", ["train.py"], lambda d: (d / "train.py").write_text(QUICK_SCRIPT))]
    out: list[tuple[str, list[str], Any]] = []
    for source in (*SOURCES, *FRAMEWORK_SOURCES):
        out.append((source.name, [Path(source.path).name, *source.argv], source))
    out.append(("lightning_example", [str(REPO / "examples" / "try_lightning.py")], None))
    out.append(("hf_trainer_example", [str(REPO / "examples" / "try_hf_trainer.py")], None))
    return out


def prepare(job: Any, work: Path) -> str | None:
    """Copy a real script and its data into ``work``; the reason it cannot run, if any."""
    if job is None:
        return None
    if callable(job):
        job(work)
        return None
    if not job.local.exists():
        return "not fetched: python -m tests.realscripts.fetch"
    for path in (job.path, *(p for p, _ in job.companions)):
        shutil.copy(job.local.parent / Path(path).name, work)
    if job.data is not None:
        job.data(work)
    return None


def try_job(
    argv: list[str], work: Path, steps: int, warmup: int, quick: bool = False
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gpuwise", "try", "--json", "--steps", str(steps)]
    cmd += ["--warmup", str(warmup), "--", sys.executable, *argv]
    # nothing is downloaded: the Hugging Face jobs read the model, tokenizer and data that
    # ``prepare`` wrote, and their caches stay in the job's directory
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.update(HF_DATASETS_OFFLINE="1", HF_HOME=str(work / ".hf"))
    if quick:  # one compute thread: one fix to try (no threads trial), so fewer runs
        env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return dict(json.loads(done.stdout))


def judge(doc: dict[str, Any]) -> dict[str, Any]:
    """The row of one job: budget, promised and measured, and the 70 % rule or why not."""
    if "error" in doc:
        return {"budget_ok": None, "rule": f"not run: {doc['error']}"}
    budget = doc["budget"]
    main = doc["baseline"]["findings"][0]
    best = doc["combined"] or max(
        doc["trials"], key=lambda t: t.get("speedup") or 0.0, default=None
    )
    row: dict[str, Any] = {
        "main_finding": f"{main['kind']} ({_x(main['max_speedup'])})",
        "k": len(doc["trials"]),
        "runs": budget["runs"],
        "steps": f"{budget['measured_steps']}/{budget['max_steps']}",
        "budget_ok": budget["measured_steps"] <= budget["max_steps"],
        "tried": ", ".join(t["name"] for t in doc["trials"]) or "-",
        "promised": None if best is None else best.get("promised"),
        "measured": None if best is None else _interval(best),
        "verdict": None if best is None else best["verdict"],
    }
    row["rule"] = rule(doc, best)
    return row


def rule(doc: dict[str, Any], best: dict[str, Any] | None) -> str:
    """``met``, ``n/a: why`` or ``not met: why`` for the main finding's promised bound."""
    main = doc["baseline"]["findings"][0]
    tried = {t["finding"] for t in doc["trials"]}
    if main["kind"] not in tried and (main["max_speedup"] or 0) >= BOUND_RULE:
        why = "; ".join(f"{s['fix']}: {s['reason']}" for s in doc["skipped"])
        return f"n/a for {main['kind']}: not tried ({why or 'no fix gpuwise injects applies'})"
    if best is None:
        return f"n/a: {main['kind']}, no fix applies"
    promised = best.get("promised")
    if promised is None or promised < BOUND_RULE:
        basis = ""
        if best.get("bound_basis") and best.get("finding_bound") not in (None, promised):
            basis = f" ({best['bound_basis']}; the finding's bound {_x(best['finding_bound'])})"
        return (
            f"n/a: {best['name']} promises {_x(promised)}, under {BOUND_RULE}x{basis}; "
            f"measured {_interval(best)}, {best['verdict']}"
        )
    if best["verdict"] not in ("delivered", "partly"):
        return f"not met: {best['name']} {best.get('why_not') or best['verdict']}"
    share = (best["speedup"] - 1) / (promised - 1)
    if share >= DELIVERED_SHARE and best.get("suspect"):
        return (
            f"met, suspect ({share:.0%} of the promised gain): beats the bound beyond the "
            "noise; the bound understated the stage or the fix changed more (threads)"
        )
    if share >= DELIVERED_SHARE:
        return f"met ({share:.0%} of the promised gain)"
    return f"not met: {best['name']} {best.get('why_not') or best['verdict']}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _interval(t: dict[str, Any]) -> str:
    if t.get("speedup") is None:
        return "n/a"
    return f"{t['speedup']:.2f}x [{t['low']:.2f}, {t['high']:.2f}]"


COLUMNS = ("job", "main_finding", "tried", "runs", "steps", "promised", "measured", "verdict")


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join((*COLUMNS, "70 % rule")) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for r in rows:
        cells = [str(r.get(c) if r.get(c) is not None else "-") for c in COLUMNS]
        cells[COLUMNS.index("promised")] = _x(r.get("promised"))
        lines.append("| " + " | ".join((*cells, r["rule"])) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small job, few steps")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--only", action="append", default=[], help="run only these jobs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--save", metavar="DIR", help="keep each job's gpuwise.try/1 document")
    parser.add_argument("--load", metavar="DIR", help="judge documents kept with --save again")
    args = parser.parse_args(argv)
    steps = args.steps or (8 if args.quick else 40)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    rows = []
    for name, job_argv, job in jobs(args.quick):
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory(prefix="gpuwise-try-bench-") as tmp:
            work = Path(tmp)
            kept = Path(args.load or work) / f"{name}.json"
            missing = None if args.load else prepare(job, work)
            if args.load:
                doc = json.loads(kept.read_text()) if kept.exists() else {"error": "not kept"}
            else:
                doc = (
                    {"error": missing}
                    if missing
                    else try_job(job_argv, work, steps, warmup, args.quick)
                )
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            (Path(args.save) / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
        rows.append({"job": name, **judge(doc)})
        print(f"try_budget: {name}: {rows[-1]['rule']}", file=sys.stderr)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"steps": steps, "warmup": warmup, "load": load, "rows": rows}))
    else:
        where = f"documents kept in {args.load}" if args.load else f"load average {load:.1f}"
        print(f"gpuwise try, {steps} steps after {warmup} warm-up per run; "
              f"{os.cpu_count()} cores, {where}")  # fmt: skip
        print(markdown(rows))
    budget_broken = [r["job"] for r in rows if r.get("budget_ok") is False]
    if budget_broken:
        print(f"try_budget: over the (2k + 3) N step budget: {budget_broken}", file=sys.stderr)
    return 1 if budget_broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
