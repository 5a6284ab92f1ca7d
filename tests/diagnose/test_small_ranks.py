"""Two torchrun ranks: roles read "rank", and a job too small to judge demotes ``comm_bound``.

Issue 40, shape 7: every process header carries a ``trainer`` key (``None`` under
torch.distributed), which read as "separated trainers" named both ranks "trainer"; and
``too_small`` left ``comm_bound [critical]`` standing, against the docs ("its per-step
findings are notes").
"""

from __future__ import annotations

from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.diagnose.rules import diagnose
from gpuwise.records import Run, Step
from gpuwise.records.ranks import RankView


def _run(step_s: float) -> Run:
    steps = [Step(i, i * step_s, 0.0, 0.0, step_s, 0.0, rank=r) for r in (0, 1) for i in range(20)]
    run = Run("profile", steps=steps)
    run.meta["processes"] = [
        {"pid": 100 + r, "rank": r, "world_size": 2, "local_rank": r, "trainer": None}
        for r in (0, 1)
    ]
    run.ranks = RankView.from_dict(
        {"world_size": 2, "comm": {"exposed_fraction": 0.78, "exposed_s": 0.78 * step_s}}
    )
    return run


def test_torchrun_ranks_are_ranks() -> None:
    anatomy = read_anatomy(_run(0.01))
    assert [(p.role, p.rank, p.pid) for p in anatomy.processes] == [
        ("rank", 0, 100),
        ("rank", 1, 101),
    ]


def test_too_small_demotes_comm_bound_to_a_note() -> None:
    run = _run(0.0003)
    comm = next(f for f in diagnose(run) if f.kind == "comm_bound")
    assert comm.severity == "info"
    assert comm.evidence["too_small"] == "steps of 0.3 ms: fixed costs dominate"
    assert comm.summary.endswith("(steps of 0.3 ms: fixed costs dominate; not judged)")


def test_a_material_job_keeps_comm_bound_critical() -> None:
    comm = next(f for f in diagnose(_run(0.01)) if f.kind == "comm_bound")
    assert comm.severity == "critical"
