from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections import namedtuple
from collections.abc import Iterator
from types import SimpleNamespace

import psutil
import pytest

from gpuwise.telemetry import host
from gpuwise.telemetry.host import HostBackend, ProcessTree

CpuTimes = namedtuple("CpuTimes", "user system idle iowait")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeProc:
    def __init__(self, pid: int, cpu_s: float, rss: int) -> None:
        self.pid, self.cpu_s, self.rss = pid, cpu_s, rss

    def oneshot(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def cpu_times(self) -> SimpleNamespace:
        return SimpleNamespace(user=self.cpu_s * 0.75, system=self.cpu_s * 0.25)

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=self.rss)


class FakeTree:
    roots = (1,)

    def __init__(self, procs: list[FakeProc]) -> None:
        self.procs = procs

    def processes(self) -> list[FakeProc]:
        return list(self.procs)


def test_cpu_device_description() -> None:
    backend = HostBackend()
    (device,) = backend.devices()
    assert device["id"] == "cpu"
    assert device["cores"] == psutil.cpu_count(logical=True)
    assert device["memory_total_bytes"] == psutil.virtual_memory().total
    assert device["name"] == host.cpu_model()


def test_system_cpu_percent_from_counter_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    times = iter([CpuTimes(10, 0, 90, 0), CpuTimes(13, 2, 94, 1), CpuTimes(13, 2, 94, 1)])
    monkeypatch.setattr(host.psutil, "cpu_times", lambda: next(times))
    backend = HostBackend()
    (s,) = backend.read(0.5)
    assert s.utilization_pct == pytest.approx(50.0)  # busy 5 of 10 CPU-seconds
    assert s.device == "cpu"
    assert backend.read(1.0)[0].utilization_pct is None  # no tick elapsed: no measurement


def test_memory_is_host_memory() -> None:
    (s,) = HostBackend().read(0.0)
    vm = psutil.virtual_memory()
    assert s.memory_total_bytes == vm.total
    assert s.memory_used_bytes is not None
    assert 0 < s.memory_used_bytes < vm.total
    assert (s.process_cpu_pct, s.process_rss_bytes, s.power_w) == (None, None, None)


def test_process_tree_cpu_and_rss_exact() -> None:
    clock = Clock()
    a, b = FakeProc(1, 2.0, 100), FakeProc(2, 1.0, 50)
    tree = FakeTree([a, b])
    backend = HostBackend(clock=clock)
    backend.tree = tree  # type: ignore[assignment]
    assert backend._read_tree() == (None, 150)  # no baseline yet
    clock.now, a.cpu_s, b.cpu_s = 0.5, 2.4, 1.1
    tree.procs.append(FakeProc(3, 0.25, 25))  # a child born since the last reading
    pct, rss = backend._read_tree()
    assert pct == pytest.approx(100 * (0.4 + 0.1 + 0.25) / 0.5)
    assert rss == 175


def test_empty_tree_has_no_process_metrics() -> None:
    backend = HostBackend(clock=Clock())
    backend.tree = FakeTree([])  # type: ignore[assignment]
    assert backend._read_tree() == (None, None)


@pytest.fixture
def parent_with_child() -> Iterator[subprocess.Popen[bytes]]:
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    yield proc
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait(10)


def test_process_tree_finds_descendants(parent_with_child: subprocess.Popen[bytes]) -> None:
    tree = ProcessTree([parent_with_child.pid], refresh_s=0.0)
    deadline = time.monotonic() + 10
    while len(tree.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = tree.pids()
    assert parent_with_child.pid in pids
    assert len(pids) == 2
    (s,) = HostBackend(tree).read(0.0)
    expected = sum(psutil.Process(p).memory_info().rss for p in pids)
    # two readings, a moment apart, of the same two sleeping processes: any machine; the
    # margin is for what an interpreter may still touch between them, not a machine figure
    assert s.process_rss_bytes == pytest.approx(expected, rel=0.2)


def test_dead_root_gives_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    backend = HostBackend([proc.pid])
    assert backend.read(0.0)[0].process_rss_bytes is None


def test_watch_adds_a_root() -> None:
    tree = ProcessTree()
    tree.watch(os.getpid())
    tree.watch(os.getpid())
    assert tree.roots == (os.getpid(),)
    assert os.getpid() in tree.pids()
