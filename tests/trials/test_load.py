"""A win the busy machine made is named as such, with its likely quiet figure."""

from __future__ import annotations

from gpuwise.trials.load import load_made, run_load
from gpuwise.trials.outcome import outcome
from gpuwise.trials.plan import Trial

SETUP = {"cpu_count": 2, "processes": 1, "optimizers": [{"torch_threads": 2}], "loaders": []}
"""One process with 2 intra-op threads on 2 cores: the job alone fits its cores."""

HOGS = "python -c while True: pass"


def _meta(others_cores: float, job_cores: float = 0.4) -> dict:
    others = [{"command": HOGS, "processes": 4, "cores": others_cores}]
    return {"machine_load": {"cores": 2, "job_cores": job_cores, "others_cores": others_cores,
                             "others": others}}  # fmt: skip


BASE = [0.300, 0.310, 0.290, 0.305] * 5  # 2 threads beside the hogs: every barrier waits
FAST = [0.0175, 0.0180, 0.0170, 0.0178] * 5  # 1 thread: the 17x of the README's example
THREADS = Trial("intra_op_threads", "compute on 1 intra-op thread(s)", None, None,
                {"torch_threads": 1})  # fmt: skip


def test_fewer_threads_beside_hogs_is_load_made_with_its_quiet_range():
    loads = [run_load(_meta(1.6)) for _ in range(4)]
    out = outcome(THREADS, [BASE[:10], BASE[10:]], [FAST[:10], FAST[10:]], (0.0, 0.0), "", "",
                  loads, SETUP)  # fmt: skip
    assert out.speedup is not None
    assert out.speedup > 15
    assert out.verdict == "load-made"  # not a winner
    assert out.others_cores == 1.6
    assert "other processes took 1.60 of the machine's 2 cores" in out.note
    # 1 thread instead of 2 on 2 quiet cores: 0.5x (the step scales) to 1.0x (it does not)
    assert "0.50x to 1.00x" in out.note
    assert out.why_not == out.note


def test_the_same_win_on_a_quiet_machine_is_the_codes():
    loads = [run_load(_meta(0.05)) for _ in range(4)]
    out = outcome(THREADS, [BASE[:10], BASE[10:]], [FAST[:10], FAST[10:]], (0.0, 0.0), "", "",
                  loads, SETUP)  # fmt: skip
    assert out.verdict == "delivered"
    assert "load-made" not in out.note


def test_a_job_that_oversubscribes_its_own_cores_keeps_its_threads_win():
    # 2 processes x 2 threads on 2 cores: fewer threads help on a quiet machine too
    own = {**SETUP, "processes": 2, "cpu_count": 2}
    assert load_made({"torch_threads": 1}, None, 5.0, [run_load(_meta(1.6))], own) is None


def test_a_gain_beyond_its_bound_on_a_loaded_machine_is_capped_at_the_bound():
    fused = Trial("optimizer_fused", "fused AdamW", "optimizer_bound", 1.4, {"optimizer": {}})
    base = [0.010, 0.011, 0.010, 0.0105] * 5
    fast = [0.0050, 0.0052, 0.0049, 0.0051] * 5  # 2x where removing the stage is worth 1.4x
    loads = [run_load(_meta(1.2)) for _ in range(4)]
    out = outcome(fused, [base[:10], base[10:]], [fast[:10], fast[10:]], (0.0, 0.0), "", "",
                  loads, SETUP)  # fmt: skip
    assert out.verdict == "load-made"
    assert "at most 1.40x" in out.note
    # within its bound, a win on a loaded machine stands, with the load said beside it
    ok = [0.0078, 0.0080, 0.0077, 0.0079] * 5
    kept = outcome(fused, [base[:10], base[10:]], [ok[:10], ok[10:]], (0.0, 0.0), "", "",
                   loads, SETUP)  # fmt: skip
    assert kept.verdict == "delivered"
    assert "measured beside other processes that took 1.20 cores" in kept.note


def test_a_run_without_a_load_record_says_none():
    assert run_load({}) is None
    assert load_made({"torch_threads": 1}, None, 5.0, [None], SETUP) is None
