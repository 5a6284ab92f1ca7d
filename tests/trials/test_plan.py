"""Which fixes ``gpuwise try`` plans, from the findings and the captured setup."""

from __future__ import annotations

from typing import Any

from gpuwise.records import Finding, Run
from gpuwise.trials.plan import loader_workers, plan_trials
from gpuwise.trials.session import combine


def _run(kinds: dict[str, float], setup: dict[str, Any]) -> Run:
    findings = [Finding(k, "warning", k, {}, bound) for k, bound in kinds.items()]
    return Run("profile", findings=findings, extra={"setup": setup})


def _setup(cls: str = "Adam", offers=("foreach", "fused"), **opt: Any) -> dict[str, Any]:
    return {
        "framework": "plain",
        "cpu_count": 4,
        "processes": 1,
        "loaders": [{"file": "t.py", "line": 3, "num_workers": 0, "pin_memory": False}],
        "optimizers": [
            {"class": cls, "offers": list(offers), "device": "cpu", "conv_params": 0, **opt}
        ],
    }


def test_input_and_optimizer_findings_give_two_trials_best_bound_first():
    plan = plan_trials(_run({"input_bound": 1.3, "optimizer_bound": 1.6}, _setup()))
    names = [t.name for t in plan.trials]
    assert names == ["optimizer_fused", "loader_workers", "intra_op_threads"]
    opt, loader, threads = plan.trials
    assert opt.spec == {"optimizer_class": "Adam", "optimizer": {"fused": True}}
    assert opt.promised == 1.6
    # a CPU device: half the cores load, the other half compute (tried on its own)
    assert loader.spec["loader"]["num_workers"] == 2
    assert "pin_memory" not in loader.spec["loader"]
    assert "torch_threads" not in loader.spec
    assert (threads.spec, threads.promised) == ({"torch_threads": 2}, None)


def test_optimizer_without_fused_gets_foreach_and_a_fused_one_nothing():
    plan = plan_trials(_run({"optimizer_bound": 1.5}, _setup("Adadelta", ("foreach",))))
    assert plan.trials[0].spec["optimizer"] == {"foreach": True}
    fused = plan_trials(_run({"optimizer_bound": 1.5}, _setup(fused=True)))
    assert fused.trials == []
    assert "already runs fused=True" in fused.skipped[0]["reason"]
    lbfgs = plan_trials(_run({"optimizer_bound": 1.5}, _setup("LBFGS", ())))
    assert lbfgs.trials == []
    assert "offers no fused or foreach" in lbfgs.skipped[0]["reason"]
    bnb = _setup("AdamW", (), module="bitsandbytes.optim.adamw")  # another library's class
    other = plan_trials(_run({"optimizer_bound": 1.5}, bnb))
    assert other.trials == []
    reason = other.skipped[0]["reason"]
    assert reason.startswith("bitsandbytes.optim.adamw.AdamW is not a torch.optim class")


def test_loader_with_enough_workers_is_not_tried_and_numerics_need_leave():
    setup = _setup()
    setup["loaders"][0]["num_workers"] = 2
    setup["optimizers"][0]["device"] = "cuda"
    plan = plan_trials(_run({"input_bound": 1.3}, setup))
    assert plan.trials[0].spec["loader"]["num_workers"] == 4  # a GPU job: every core loads
    setup["loaders"][0]["num_workers"] = 4
    plan = plan_trials(_run({"input_bound": 1.3}, setup))
    assert plan.trials == []
    assert any("changes results" in s["reason"] for s in plan.skipped)
    allowed = plan_trials(_run({}, setup), allow_numerics=True)
    names = {t.name for t in allowed.trials}
    assert {"tf32", "autocast_bf16", "compile"} <= names
    assert all(t.changes_results for t in allowed.trials)


def test_cuda_loader_trial_pins_and_uses_every_core():
    setup = _setup()
    setup["optimizers"][0]["device"] = "cuda"
    trial = plan_trials(_run({"input_bound": 2.0}, setup)).trials[0]
    assert trial.spec["loader"] == {
        "num_workers": 4,
        "persistent_workers": True,
        "prefetch_factor": 4,
        "pin_memory": True,
    }


def test_combined_bound_adds_the_stages():
    plan = plan_trials(_run({"input_bound": 1.25, "optimizer_bound": 1.25}, _setup()))
    both = combine(plan.trials)
    # 0.2 + 0.2 of the step removed: at most 1 / 0.6
    assert both.promised == round(1 / 0.6, 3)
    assert both.spec["loader"]["num_workers"] == 2
    assert both.spec["optimizer"] == {"fused": True}


def test_loader_workers_hide_the_wait_within_the_cores():
    assert loader_workers(8, 0.2, cuda=True) == 8  # a GPU job: every core loads
    assert loader_workers(8, 0.2, cuda=False) == 4  # half the cores, the rest compute
    assert loader_workers(2, 0.82, cuda=False) == 2  # 4.6 workers to hide it: every core
    assert loader_workers(8, 0.9, cuda=False) == 8
    assert loader_workers(1, 0.5, cuda=False) == 1


def test_a_flag_the_user_set_is_not_tried_against():
    # the trial would keep the user's own flag (inject.py): a run that changes nothing
    for flags, mine in (({"fused": False}, "fused=False"), ({"foreach": True}, "foreach=True")):
        plan = plan_trials(_run({"optimizer_bound": 1.5}, _setup(**flags)))
        assert plan.trials == []
        assert plan.skipped[0] == {
            "fix": "optimizer",
            "reason": f"your code builds Adam with {mine}; a trial never overrides a flag you set",
        }
