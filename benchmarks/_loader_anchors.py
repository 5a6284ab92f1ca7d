"""Drive the loader anchors' harness (FFCV, DALI, PIL) beside gpuwise's loader, in one sitting.

The harness is a folder of its own (``bench.py`` runs one method per process and prints a
``RESULT {json}`` line; ``gen_dataset.py`` writes its synthetic JPEG set; ``setup_envs.sh``
makes one venv per library in a work dir). Nothing of it is imported here: each anchor method
runs as ``<work>/venv-*/bin/python <harness>/bench.py --method M`` with ``LOADERS_BENCH_DIR``
pointing at the work dir, exactly as the harness runs itself.

Also here: CPU-time and memory accounting of a process tree read from ``/proc`` (Linux), the
same figures the harness reports, so every row of the table is counted alike: user + system
seconds of the process, its live descendants and its reaped children, and the sum of their
proportional set sizes (shared pages split between the processes mapping them).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANCHOR_METHODS = ("ffcv_jpg", "ffcv_raw", "dali_cpu", "pil_w2")
_VENVS = {"ffcv_jpg": "venv-ffcv", "ffcv_raw": "venv-ffcv", "dali_cpu": "venv-dali"}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# the harness's result keys -> this benchmark's
_KEYS = {
    "images": "images",
    "wall_s": "wall_s",
    "images_per_s": "images_per_s",
    "images_per_cpu_s": "images_per_cpu_s",
    "cores_busy": "cores_busy",
    "time_to_first_batch_s": "first_batch_s",
    "pss_MB_process_tree_at_end": "pss_mb",
    "other_processes_cores_busy": "others_cores_busy",
    "versions": "versions",
}


# ------------------------------------------------------------------------------ /proc accounting
def _stat(pid: int) -> tuple[int, int, int]:
    """Return (parent pid, own user+system ticks, reaped children's ticks) of one process."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # field 3 (state) onwards
    own = int(fields[11]) + int(fields[12])  # utime, stime
    reaped = int(fields[13]) + int(fields[14])  # cutime, cstime
    return int(fields[1]), own, reaped


def _tree(root_pid: int) -> dict[int, tuple[int, int, int]]:
    """Stat lines of ``root_pid`` and all its live descendants, by pid."""
    stats: dict[int, tuple[int, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stats[int(name)] = _stat(int(name))
            except (OSError, ValueError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree[pid] = stats[pid]
        todo += children.get(pid, [])
    return tree


def tree_cpu_s(root_pid: int | None = None) -> float | None:
    """User + system CPU seconds of a process tree (live descendants and reaped children).

    Returns None where ``/proc`` cannot be read.
    """
    try:
        tree = _tree(root_pid or os.getpid())
    except OSError:
        return None
    return sum(own + reaped for _, own, reaped in tree.values()) / _CLOCK_TICKS if tree else None


def tree_pss_mb(root_pid: int | None = None) -> float | None:
    """Proportional set size of a process and its live descendants, in MB (None if unreadable)."""
    try:
        pids = list(_tree(root_pid or os.getpid()))
        kib = 0
        for pid in pids:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    kib += int(line.split()[1])
                    break
    except (OSError, ValueError):
        return None
    return round(kib / 1024, 1)


def machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (idle and iowait left out)."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


def others_busy_cores(window_s: float = 1.0) -> float | None:
    """Cores kept busy by processes outside this one's tree, sampled over ``window_s``."""
    busy0, own0, t0 = machine_busy_s(), tree_cpu_s(), time.perf_counter()
    time.sleep(window_s)
    busy1, own1, t1 = machine_busy_s(), tree_cpu_s(), time.perf_counter()
    if None in (busy0, busy1, own0, own1):
        return None
    return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0), 3)  # type: ignore[operator]


def wait_quiet(limit_cores: float, max_wait_s: float) -> float | None:
    """Wait until other processes use fewer than ``limit_cores``; return the last reading."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy = others_busy_cores()
        if busy is None or busy < limit_cores or time.monotonic() > deadline:
            return busy
        time.sleep(2.0)


# ------------------------------------------------------------------------------ the harness
@dataclass(frozen=True)
class Anchors:
    """The anchors' harness folder and the work dir holding its venvs and data.

    Attributes:
        harness: Folder with ``bench.py``, ``gen_dataset.py``, ``lbcommon.py``.
        work: Its work dir (``LOADERS_BENCH_DIR``): ``venv-main``, ``venv-ffcv``,
            ``venv-dali`` and ``data/``.
    """

    harness: Path
    work: Path

    def python(self, method: str) -> Path | None:
        """Interpreter of the venv a method runs in, or None when that venv is missing."""
        path = self.work / _VENVS.get(method, "venv-main") / "bin" / "python"
        return path if path.exists() else None

    def jpeg_root(self) -> Path:
        """The ImageFolder tree the harness reads (and gpuwise packs)."""
        return self.work / "data" / "jpeg"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "LOADERS_BENCH_DIR": str(self.work)}

    def _call(
        self, method: str, args: list[str], timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        python = self.python(method)
        if python is None:
            raise FileNotFoundError(f"{_VENVS.get(method, 'venv-main')} missing in {self.work}")
        cmd = [str(python), *args]
        return subprocess.run(
            cmd, cwd=self.harness, env=self._env(), capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip

    def ensure_dataset(self) -> dict[str, Any]:
        """Generate the harness's dataset if missing; return its manifest in our keys."""
        proc = self._call("pil_w2", [str(self.harness / "gen_dataset.py")], 1800)
        if proc.returncode != 0:
            raise RuntimeError(f"gen_dataset.py failed: {proc.stderr.strip()[-500:]}")
        raw = json.loads((self.work / "data" / "manifest.json").read_text())
        return {
            "count": raw["n"], "classes": raw["classes"], "quality": raw["quality"],
            "sides_px": raw["sides"], "total_bytes": raw["total_bytes"],
            "mean_kb": raw["mean_kb"], "mean_megapixels": raw["mean_megapixels"],
            "bytes_per_pixel": raw["bytes_per_pixel"],
            "sha256": raw.get("sha256_of_files_in_generation_order"),
            "source": "anchors' gen_dataset.py",
        }  # fmt: skip

    def prepare(self, method: str) -> str | None:
        """Write a method's one-off files (FFCV's .beton), untimed; return an error or None."""
        if not method.startswith("ffcv_") or self.python(method) is None:
            return None
        args = [str(self.harness / "bench.py"), "--method", method, "--prepare-only"]
        proc = self._call(method, args, 1800)
        return None if proc.returncode == 0 else proc.stderr.strip()[-500:]

    def run(
        self, method: str, seconds: float, timeout_s: float = 900
    ) -> tuple[dict[str, Any] | None, str]:
        """Run one anchor method in a fresh process; return (our-keyed result, error text)."""
        args = [str(self.harness / "bench.py"), "--method", method,
                "--min-seconds", str(seconds)]  # fmt: skip
        start = time.perf_counter()
        try:
            proc = self._call(method, args, timeout_s)
        except (FileNotFoundError, subprocess.TimeoutExpired) as err:
            return None, str(err)
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                raw = json.loads(line[7:])
                result = {ours: raw.get(theirs) for theirs, ours in _KEYS.items()}
                result["method"] = method
                result["process_wall_s"] = round(time.perf_counter() - start, 2)
                return result, ""
        return None, (proc.stderr or proc.stdout).strip()[-500:]
