"""A full disk, on a small tmpfs mounted for the test (needs the right to mount; skips
with the reason otherwise).

Promise: nothing half-written is left. ``pack`` removes its temporary store (although
closing its files fails again on the full disk) and names the path and the cause;
``profile --out`` on a full disk leaves no partial file and exits with the script's code
(1 when the script exited 0: the work asked for did not finish).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.faults.helpers import run

DISK_BYTES = 256 * 1024


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at ``tmp_path/disk``, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for a full disk needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    """Fill the disk to its last byte."""
    with (disk / "filler").open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)


def test_pack_on_a_full_disk_removes_its_temporary_store(tmp_path: Path, full_disk: Path) -> None:
    images = np.random.default_rng(0).integers(0, 255, (64, 64, 64, 3), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", images=images, labels=np.arange(64))  # 786 KB: does not fit
    done = run(["pack", "d.npz", str(full_disk / "s")], tmp_path)
    assert done.returncode == 1
    assert f"cannot write the store {full_disk / 's'}" in done.stderr
    assert os.strerror(errno.ENOSPC) in done.stderr
    assert list(full_disk.iterdir()) == []  # neither the store nor its temporary directory


@pytest.mark.parametrize(("script_code", "expected"), [(3, 3), (0, 1)])
def test_profile_out_on_a_full_disk(
    tmp_path: Path, full_disk: Path, script_code: int, expected: int
) -> None:
    _fill(full_disk)
    out, html = full_disk / "r.json", full_disk / "r.html"
    script = [sys.executable, "-c", f"import sys; sys.exit({script_code})"]
    done = run(["profile", "--out", str(out), "--html", str(html), "--", *script], tmp_path)
    assert done.returncode == expected, done.stderr
    assert f"cannot write the run to '{out}'" in done.stderr
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no partial files


def test_analyze_out_on_a_full_disk_is_one_clear_line(tmp_path: Path, full_disk: Path) -> None:
    script = [sys.executable, "-c", "pass"]
    assert run(["profile", "--out", "base.json", "--", *script], tmp_path).returncode == 0
    _fill(full_disk)
    done = run(["analyze", "base.json", "--json", "--out", str(full_disk / "r.json")], tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("gpuwise analyze: error: cannot write the run to")
    assert "free space or choose another path" in lines[-1]
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]
    assert json.loads((tmp_path / "base.json").read_text())["exit_code"] == 0


def test_monitor_log_on_a_full_disk_says_so_and_removes_its_files(
    tmp_path: Path, full_disk: Path
) -> None:
    _fill(full_disk)
    log, csv = full_disk / "gpu.jsonl", full_disk / "gpu.csv"
    args = ["--log", str(log), "--csv", str(csv)]
    done = run(["monitor", "--fake", "1", "--interval", "0.05", "--duration", "1", *args], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "disk is full" in done.stderr, done.stderr
    assert "check the path and its permissions" not in done.stderr
    assert "gpu.jsonl" in done.stderr
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # none of its files left


def test_monitor_log_on_a_full_disk_keeps_a_log_it_did_not_create(
    tmp_path: Path, full_disk: Path
) -> None:
    log = full_disk / "gpu.jsonl"
    log.write_text('{"old": 1}\n')
    _fill(full_disk)
    done = run(["monitor", "--fake", "1", "--interval", "0.05", "--duration", "1", "--log",
                str(log)], tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "disk is full" in done.stderr
    assert log.read_text().startswith('{"old": 1}\n')  # the user's lines stay
