"""The scenario suite's harness: run a scenario under the profiler, and the expected ranges.

Tolerance: the work around the injected delays (a tiny model, collation, the hooks, sleeps
overshooting on a loaded machine) is not injected; ``SLACK_S`` per step and ``OVERSHOOT_S``
per sleep bound it, and the expected range of a phase's share is what those allow when they
fall entirely in the phase or entirely outside it (``share_range``). No bound comes from an
earlier measurement.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.findings import amdahl
from gpuwise.diagnose.rules import diagnose
from gpuwise.profile.runner import ProfileConfig, profile_command
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


def share_range(part_s: float, rest_s: float, part_sleeps: int = 1) -> tuple[float, float]:
    """Range of the share of a step that a phase of ``part_s`` takes, next to ``rest_s``.

    Args:
        part_s: Injected seconds of the phase per step, in ``part_sleeps`` sleeps.
        rest_s: Injected seconds of the other phases per step, in one sleep.
        part_sleeps: How many sleeps make up ``part_s`` (each may overshoot).

    Returns:
        ``(low, high)``: the slack and overshoot all outside the phase, or all inside it.
    """
    part_max_s = part_s + part_sleeps * OVERSHOOT_S + SLACK_S
    rest_max_s = rest_s + OVERSHOOT_S + SLACK_S
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
            config = ProfileConfig(interval_s=INTERVAL_S, stdout_to_stderr=True)
            run = profile_command(argv, config, backends=[HostBackend()] if cpu_device else None)
            run.findings = diagnose(run)
            self._runs[key] = run
        return self._runs[key]


def top(run: Run) -> Finding:
    """The main finding (the diagnosis orders findings by payoff)."""
    assert run.findings, "a profiled run is always diagnosed"
    return run.findings[0]


def kinds(run: Run) -> list[str]:
    return [f.kind for f in run.findings]


def assert_share(value: Any, part_s: float, rest_s: float, part_sleeps: int = 1) -> None:
    low, high = share_range(part_s, rest_s, part_sleeps)
    assert isinstance(value, float)
    assert low <= value <= high, f"share {value:.3f} outside [{low:.3f}, {high:.3f}]"


def assert_stage_finding(
    finding: Finding, kind: str, figure: str, part: tuple[float, int], rest_s: float
) -> None:
    """The finding names the stage, its share fits the injected times, its bound is Amdahl's.

    Args:
        finding: The finding to check.
        kind: The stage's finding kind.
        figure: The evidence key holding the stage's share of the step.
        part: Injected seconds of the stage per step, and in how many sleeps.
        rest_s: Injected seconds of the rest of the step.
    """
    assert finding.kind == kind, f"expected {kind}, got {finding.kind}: {finding.summary}"
    share = finding.evidence[figure]
    assert_share(share, part[0], rest_s, part[1])
    assert finding.max_speedup == pytest.approx(amdahl(float(share)), rel=1e-3)
    low, _ = share_range(part[0], rest_s, part[1])
    expected = ("critical",) if amdahl(low) >= 1.5 else ("warning", "critical")
    assert finding.severity in expected


def data_wait(s: Scenario) -> tuple[float, int]:
    """Injected data wait per step of a scenario reading ``batch`` slow items: seconds, sleeps."""
    return s.batch * s.item_s, s.batch
