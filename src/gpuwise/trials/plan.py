"""Which fixes to try on a job: from the baseline's findings and what the job built.

A Trial is one set of overrides (``profiling/inject.py``'s trial protocol) with the finding
it answers and the bound that finding promised. Only fixes that keep the job's results
are planned unless numerics are allowed; the others are listed as skipped, with why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwise.diagnose.fixes.terms import optimizer_records
from gpuwise.records import Finding, Run
from gpuwise.trials import bounds

PREFETCH_FACTOR = 4
"""Batches each loader worker keeps ready (PyTorch's default is 2)."""


@dataclass(frozen=True)
class Trial:
    """One fix to try: overrides injected at construction time.

    Attributes:
        name: Stable id (``loader_workers``, ``pin_memory``, ``optimizer_fused``,
            ``optimizer_foreach``, ``cudnn_benchmark``, ``tf32``, ``autocast_bf16``,
            ``channels_last``, ``compile``).
        action: What it does, in a few words.
        finding: The finding kind it answers (``None``: a setting tried on its own).
        promised: That finding's bound on the job's speedup (``None``: none was given).
        spec: The overrides, the JSON object of the trial handshake.
        changes_results: The fix changes what the job computes (numerics).
        finding_bound: The finding's own bound (its stage removed entirely); ``promised``
            is this fix's, at most that (``bounds.py``).
        bound_basis: How ``promised`` was set.
    """

    name: str
    action: str
    finding: str | None
    promised: float | None
    spec: dict[str, Any] = field(default_factory=dict)
    changes_results: bool = False
    finding_bound: float | None = None
    bound_basis: str = ""


@dataclass(frozen=True)
class Plan:
    """The trials to run, and the fixes left out with the reason."""

    trials: list[Trial]
    skipped: list[dict[str, str]]


def job_device(setup: Mapping[str, Any]) -> str:
    """``cuda`` when the job's optimizer holds CUDA parameters, else ``cpu``."""
    for opt in setup.get("optimizers") or []:
        if str(opt.get("device", "")).startswith("cuda"):
            return "cuda"
    return "cpu"


def plan_trials(run: Run, *, allow_numerics: bool = False) -> Plan:
    """The trials that apply to a diagnosed baseline Run with a ``setup`` section.

    Args:
        run: The diagnosed baseline (``gpuwise profile`` of the job).
        allow_numerics: Also plan fixes that change results (TF32, autocast,
            channels-last, ``torch.compile``).

    Returns:
        The plan: one trial per applicable fix, best promised payoff first.
    """
    setup = run.extra.get("setup") or {}
    found = {f.kind: f for f in run.findings}
    skipped: list[dict[str, str]] = []
    loader = _loader_trial(setup, found, skipped)
    trials = [
        t
        for t in (
            loader,
            _oversubscribed_trial(found) or _threads_trial(setup, loader),
            _pin_trial(setup, found),
            _optimizer_trial(setup, found, skipped),
            _cudnn_trial(setup),
        )
        if t is not None
    ]
    numeric_skips: list[dict[str, str]] = []
    numeric = _numeric_trials(setup, run, numeric_skips)
    if allow_numerics:
        trials += numeric
        skipped += numeric_skips
    elif numeric:
        names = ", ".join(t.name for t in numeric)
        skipped.append({"fix": names, "reason": "changes results; pass --allow numerics"})
    trials.sort(key=lambda t: -(t.promised or 1.0))
    return Plan(trials, skipped)


def _first(setup: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    items = setup.get(key) or []
    return dict(items[0]) if items else None


def loader_workers(cores: int, wait_fraction: float, cuda: bool) -> int:
    """Worker processes for a rank with ``cores`` cores whose steps wait ``wait_fraction``.

    A GPU job gives every core to the loader. On a CPU device the workers share the cores
    with the compute threads: half of them, or as many as it takes to hide the wait when
    batches take longer to arrive than to compute (``f / (1 - f)`` workers, each making one
    batch in the time the wait took), up to every core.
    """
    cores = max(1, cores)
    if cuda:
        return cores
    f = min(max(wait_fraction, 0.0), 0.95)
    return min(cores, max(cores // 2, math.ceil(f / (1 - f))))


def _loader_trial(
    setup: Mapping[str, Any], found: Mapping[str, Finding], skipped: list[dict[str, str]]
) -> Trial | None:
    finding = found.get("input_bound")
    loader = _first(setup, "loaders")
    if finding is None:
        return None
    if loader is None:
        skipped.append({"fix": "loader_workers", "reason": "the batches come from no DataLoader"})
        return None
    cores = int(setup.get("cpu_count") or 1)
    ranks = max(1, int(setup.get("processes") or 1))
    cuda = job_device(setup) == "cuda"
    wait = float(finding.evidence.get("data_wait_fraction") or 0)
    workers = loader_workers(cores // ranks, wait, cuda)
    if int(loader.get("num_workers") or 0) >= workers:
        reason = f"already {loader.get('num_workers')} workers for {cores} cores"
        skipped.append({"fix": "loader_workers", "reason": reason})
        return None
    overrides: dict[str, Any] = {
        "num_workers": workers,
        "persistent_workers": True,
        "prefetch_factor": PREFETCH_FACTOR,
    }
    if cuda:
        overrides["pin_memory"] = True
    action = f"load batches in {workers} worker process{'es' if workers > 1 else ''}"
    bound, basis = finding.max_speedup, ""
    if wait:
        bound, basis = bounds.loader_bound(wait, workers, finding.max_speedup)
    return Trial(
        "loader_workers", action, finding.kind, bound, {"loader": overrides},
        finding_bound=finding.max_speedup, bound_basis=basis,
    )  # fmt: skip


def _threads_trial(setup: Mapping[str, Any], loader: Trial | None) -> Trial | None:
    """On a CPU device: leave the loader workers their cores (fewer intra-op threads).

    Tried on its own, so that a gain of the loader trial is not credited to threads that
    stopped fighting the workers (or the machine's other load) for the cores; the winners'
    combination measures them together. No finding promises a bound for it.
    """
    if loader is None or job_device(setup) == "cuda":
        return None
    cores = int(setup.get("cpu_count") or 1) // max(1, int(setup.get("processes") or 1))
    threads = max(1, cores - int(loader.spec["loader"]["num_workers"]))
    opt = _first(setup, "optimizers") or {}
    if int(opt.get("torch_threads") or cores) <= threads:
        return None
    action = f"compute on {threads} intra-op thread(s), leaving the loader workers their cores"
    return Trial("intra_op_threads", action, None, None, {"torch_threads": threads})


def _oversubscribed_trial(found: Mapping[str, Finding]) -> Trial | None:
    """More threads than cores (``cpu_oversubscribed``): the suggested count in every process.

    Planned on its own, with or without an input finding: processes x threads over the
    cores costs more than any loader or optimizer fix on a small CPU job.
    """
    finding = found.get("cpu_oversubscribed")
    if finding is None:
        return None
    threads = int(finding.evidence.get("threads_suggested") or 1)
    processes = int(finding.evidence.get("trainer_processes") or 1)
    cores = finding.evidence.get("cores")
    each = f" in each of the {processes} processes" if processes > 1 else ""
    action = f"compute on {threads} intra-op thread(s){each} ({cores} cores)"
    return Trial("intra_op_threads", action, finding.kind, None, {"torch_threads": threads})


def _pin_trial(setup: Mapping[str, Any], found: Mapping[str, Finding]) -> Trial | None:
    finding = found.get("pageable_h2d")
    loader = _first(setup, "loaders")
    if finding is None or loader is None or loader.get("pin_memory"):
        return None
    spec = {"loader": {"pin_memory": True}}
    return Trial("pin_memory", "pin the loader's batches", finding.kind, finding.max_speedup, spec)


def _optimizer_trial(
    setup: Mapping[str, Any], found: Mapping[str, Finding], skipped: list[dict[str, str]]
) -> Trial | None:
    """One trial setting each optimizer's own flag: a GAN's two optimizers change together."""
    finding = found.get("optimizer_bound")
    if finding is None:
        return None
    records = optimizer_records(setup)
    if not records:
        skipped.append({"fix": "optimizer", "reason": "no torch.optim optimizer was built"})
        return None
    flagged: list[tuple[dict[str, Any], str]] = []
    for opt in records:
        flag, why = _optimizer_flag(opt)
        if flag is None:
            skipped.append({"fix": "optimizer", "reason": why})
        elif all(str(o.get("class")) != str(opt.get("class")) for o, _ in flagged):
            flagged.append((opt, flag))
    if not flagged:
        return None
    if len(flagged) == 1:
        cls, flag = str(flagged[0][0].get("class")), flagged[0][1]
        spec: dict[str, Any] = {"optimizer_class": cls, "optimizer": {flag: True}}
        action = f"{cls}(..., {flag}=True): the same algorithm in fewer kernels"
        name = f"optimizer_{flag}"
    else:
        spec = {"optimizer_flags": {str(o.get("class")): {f: True} for o, f in flagged}}
        action = " and ".join(f"{o.get('class')}(..., {f}=True)" for o, f in flagged)
        action += ": the same algorithms in fewer kernels"
        flags = {f for _, f in flagged}
        name = f"optimizer_{flags.pop()}" if len(flags) == 1 else "optimizer_flags"
    bound, basis = bounds.optimizers_bound(finding.max_speedup, finding.evidence, flagged)
    return Trial(
        name, action, finding.kind, bound, spec,
        finding_bound=finding.max_speedup, bound_basis=basis,
    )  # fmt: skip


def _optimizer_flag(opt: Mapping[str, Any]) -> tuple[str | None, str]:
    """The flag to try on one optimizer, or ``None`` with the reason it gets none."""
    offers = list(opt.get("offers") or [])
    cls = str(opt.get("class"))
    if opt.get("fused"):
        return None, f"{cls} already runs fused=True"
    flag = "fused" if "fused" in offers else "foreach" if "foreach" in offers else None
    if flag is None or (flag == "foreach" and opt.get("foreach")):
        why = f"{cls} offers no fused or foreach update on {opt.get('device')}"
        module = str(opt.get("module") or "torch.optim")
        if not module.startswith("torch.optim"):
            why = f"{module}.{cls} is not a torch.optim class: PyTorch's fused/foreach don't apply"
        if opt.get("foreach"):
            why = f"{cls} already runs foreach=True and offers no fused update here"
        return None, why
    if flag == "fused" and (opt.get("fused") is False or opt.get("foreach")):
        mine = "fused=False" if opt.get("fused") is False else "foreach=True"
        return None, f"your code builds {cls} with {mine}; a trial never overrides a flag you set"
    return flag, ""


def _cudnn_trial(setup: Mapping[str, Any]) -> Trial | None:
    opt = _first(setup, "optimizers")
    if job_device(setup) != "cuda" or opt is None or not opt.get("conv_params"):
        return None
    action = "let cuDNN pick the fastest convolution algorithm for each shape"
    return Trial("cudnn_benchmark", action, None, None, {"cudnn_benchmark": True})


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would use (``CXX``, else one on PATH)."""
    import os
    import shutil

    names = [os.environ.get("CXX") or "", "g++", "c++", "clang++"]
    return next((path for name in names if name and (path := shutil.which(name))), None)


def _numeric_trials(
    setup: Mapping[str, Any], run: Run, skipped: list[dict[str, str]]
) -> list[Trial]:
    from gpuwise.diagnose.context import Context

    opt = _first(setup, "optimizers")
    if opt is None:
        return []
    cuda = job_device(setup) == "cuda"
    ctx = Context.of(run)
    trials = []
    if cuda:
        trials.append(Trial("tf32", "TF32 matmuls and convolutions", None, None, {"tf32": True}))
    if cuda or ctx.cpu_bf16():
        spec = {"autocast": "bfloat16"}
        trials.append(Trial("autocast_bf16", "bf16 autocast around the model", None, None, spec))
    else:
        skipped.append({"fix": "autocast_bf16", "reason": "this CPU has no bf16 hardware"})
    if opt.get("conv_params"):
        layout = {"channels_last": True}
        trials.append(Trial("channels_last", "channels-last memory format", None, None, layout))
    compiler = cuda or cpp_compiler()
    if compiler:
        action = "torch.compile the model (compile time kept out of the measured steps)"
        trials.append(Trial("compile", action, None, None, {"compile": True}))
    else:
        why = "torch.compile on a CPU needs a C++ compiler (set CXX, or put g++ or clang++ on PATH)"
        skipped.append({"fix": "compile", "reason": why})
    return [
        Trial(t.name, t.action, t.finding, t.promised, t.spec, changes_results=True) for t in trials
    ]
