"""The scenario suite's harness: run a scenario under the profiler, and the expected ranges.

Tolerance: the work around the injected delays (a tiny model, collation, the hooks, sleeps
overshooting on a loaded machine) is not injected; ``SLACK_S`` per step and ``OVERSHOOT_S``
per sleep bound it, and the expected range of a phase's share is what those allow when they
fall entirely in the phase or entirely outside it (``share_range``). No bound comes from an
earlier measurement: under load, ``LoadProbe`` measures the overshoot and slowdown during
the same run, and the bounds widen by what it saw.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.fixes.catalog import amdahl
from gpuwise.diagnose.rules import diagnose
from gpuwise.profiling.runner import ProfileConfig, profile_command
from gpuwise.records import Finding, Run
from gpuwise.telemetry.host import HostBackend

SCRIPTS = Path(__file__).parent / "scripts"

SLACK_S = 0.010
"""Per-step allowance for work that is not injected (tiny model, collation, the hooks) with
~8 busy processes on 2 cores; measured un-injected time is 1-8 ms a step."""

OVERSHOOT_S = 0.0005
"""Allowance per injected sleep for waking late on a loaded machine (measured 0.1-0.4 ms)."""

INTERVAL_S = 0.2
"""Telemetry interval: a few samples per scenario without taxing the shared cores."""

TIMEOUT_S = 120.0
"""Longest a scenario may take (torch imports take seconds each on a loaded machine)."""


@dataclass(frozen=True)
class Load:
    """How loaded the machine was while a scenario ran (measured beside it, see ``LoadProbe``).

    Attributes:
        overshoot_s: How late a short sleep woke (98th percentile), at least ``OVERSHOOT_S``.
        slowdown: Wall time over CPU time of short busy work (90th percentile), at least 1: the
            non-injected work of a step takes this much longer than on an idle machine.
    """

    overshoot_s: float = OVERSHOOT_S
    slowdown: float = 1.0


IDLE = Load()


class LoadProbe:
    """Measure sleep overshoot and CPU slowdown in a thread while a scenario runs.

    The tolerance of a timing check then comes from the same moment's load (two CPU hogs
    on two cores make sleeps wake several milliseconds late), not from a fixed guess.
    """

    def __init__(self, sleep_s: float = 0.004, busy_s: float = 0.0005) -> None:
        self._sleep_s, self._busy_s = sleep_s, busy_s
        self._late: list[float] = []
        self._ratio: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-probe", daemon=True)

    def __enter__(self) -> LoadProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self._sleep_s)
            t1 = time.perf_counter()
            self._late.append(t1 - t0 - self._sleep_s)
            c0 = time.thread_time()
            while time.thread_time() - c0 < self._busy_s:
                pass
            self._ratio.append((time.perf_counter() - t1) / max(time.thread_time() - c0, 1e-9))

    def load(self) -> Load:
        """The load measured (``IDLE`` when too few readings were taken)."""
        if len(self._late) < 5:
            return IDLE
        late = _quantile(self._late, 0.98)  # the bounds assume every sleep wakes this late
        return Load(max(OVERSHOOT_S, late), max(1.0, _quantile(self._ratio, 0.9)))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def slack_s(load: Load = IDLE) -> float:
    """Seconds a step may take beyond its one injected sleep under ``load``."""
    return SLACK_S * load.slowdown + load.overshoot_s


def share_range(
    part_s: float, rest_s: float, part_sleeps: int = 1, load: Load = IDLE
) -> tuple[float, float]:
    """Range of the share of a step that a phase of ``part_s`` takes, next to ``rest_s``.

    Args:
        part_s: Injected seconds of the phase per step, in ``part_sleeps`` sleeps.
        rest_s: Injected seconds of the other phases per step, in one sleep.
        part_sleeps: How many sleeps make up ``part_s`` (each may overshoot).
        load: The machine's load during the run: scales the overshoot and the slack.

    Returns:
        ``(low, high)``: the slack and overshoot all outside the phase, or all inside it.
    """
    slack_s = SLACK_S * load.slowdown
    part_max_s = part_s + part_sleeps * load.overshoot_s + slack_s
    rest_max_s = rest_s + load.overshoot_s + slack_s
    return part_s / (part_s + rest_max_s), part_max_s / (part_max_s + rest_s)


@dataclass(frozen=True)
class Scenario:
    """One script and the options (``--name value``) that set its injected delays."""

    script: str
    options: dict[str, float | int] = field(default_factory=dict)

    def argv(self, *extra: str) -> list[str]:
        """The command that runs the scenario."""
        flags = [s for k, v in self.options.items() for s in (f"--{k.replace('_', '-')}", str(v))]
        return [sys.executable, str(SCRIPTS / self.script), *flags, *extra]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.options[name]
        except KeyError:
            raise AttributeError(name) from None


class Profiled:
    """Profile each scenario once per module (the workers comparison reuses a run)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[object, ...], Run] = {}
        self._loads: dict[int, Load] = {}

    def __call__(self, argv: list[str], *, cpu_device: bool = True) -> Run:
        """Profile ``argv`` through ``gpuwise profile``'s runner and diagnose the Run.

        Args:
            argv: The command.
            cpu_device: Sample the host as the device, as on a machine without a GPU, so
                that a CPU scenario reads the same on a GPU machine (where an unused GPU
                would rightly be the finding); False: the default backends.
        """
        key = (*argv, cpu_device)
        if key not in self._runs:
            # the code's diagnosis, judged beside whatever else loads the machine
            config = ProfileConfig(
                interval_s=INTERVAL_S, stdout_to_stderr=True, shared_machine="judge"
            )
            with LoadProbe() as probe:
                run = profile_command(
                    argv, config, backends=[HostBackend()] if cpu_device else None
                )
            run.findings = diagnose(run)
            self._runs[key] = run
            self._loads[id(run)] = probe.load()
        return self._runs[key]

    def load(self, run: Run) -> Load:
        """The machine's load measured while ``run`` was profiled."""
        return self._loads.get(id(run), IDLE)


def run_of(profiled: Profiled, script: str, *args: str) -> Run:
    """Profile ``scripts/SCRIPT ARGS`` with this interpreter; it must end well, with an anatomy."""
    run = profiled([sys.executable, str(SCRIPTS / script), *args])
    assert run.exit_code == 0
    assert run.anatomy is not None
    return run


def top(run: Run) -> Finding:
    """The main finding (the diagnosis orders findings by payoff)."""
    assert run.findings, "a profiled run is always diagnosed"
    return run.findings[0]


def kinds(run: Run) -> list[str]:
    return [f.kind for f in run.findings]


def assert_share(
    value: Any, part_s: float, rest_s: float, part_sleeps: int = 1, load: Load = IDLE
) -> None:
    low, high = share_range(part_s, rest_s, part_sleeps, load)
    assert isinstance(value, float)
    assert low <= value <= high, f"share {value:.3f} outside [{low:.3f}, {high:.3f}] ({load})"


def assert_stage_finding(
    finding: Finding,
    kind: str,
    figure: str,
    part: tuple[float, int],
    rest_s: float,
    load: Load = IDLE,
) -> None:
    """The finding names the stage, its share fits the injected times, its bound is Amdahl's.

    Args:
        finding: The finding to check.
        kind: The stage's finding kind.
        figure: The evidence key holding the stage's share of the step.
        part: Injected seconds of the stage per step, and in how many sleeps.
        rest_s: Injected seconds of the rest of the step.
        load: The machine's load measured during the run (default: an idle machine).
    """
    assert finding.kind == kind, f"expected {kind}, got {finding.kind}: {finding.summary}"
    share = finding.evidence[figure]
    assert_share(share, part[0], rest_s, part[1], load)
    assert finding.max_speedup == pytest.approx(amdahl(float(share)), rel=1e-3)
    low, _ = share_range(part[0], rest_s, part[1], load)
    expected = ("critical",) if amdahl(low) >= 1.5 else ("warning", "critical")
    assert finding.severity in expected


def data_wait(s: Scenario) -> tuple[float, int]:
    """Injected data wait per step of a scenario reading ``batch`` slow items: seconds, sleeps."""
    return s.batch * s.item_s, s.batch
