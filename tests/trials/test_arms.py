"""Which of a run's steps a trial measures."""

from gpuwise.records.run import Run, Step
from gpuwise.trials.arms import extra_warmup, measured_steps


def _run(n: int) -> Run:
    return Run("profile", steps=[Step(i, float(i), 0.0, 0.0, 1.0, 0.0) for i in range(n)])


def test_steps_after_the_warmup_when_the_job_runs_long_enough() -> None:
    assert [s.index for s in measured_steps(_run(100), 10, 20, least_warmup=5)] == list(
        range(10, 30)
    )


def test_a_short_job_gives_its_last_steps_when_the_loader_queue_outlasts_it() -> None:
    # 16 workers x 4 batches, twice: more warm-up than a 40-step job has (seen on a
    # 16-core GPU machine: the trial measured 0 steps and was called failed)
    warmup = 5 + extra_warmup({"loader": {"num_workers": 16, "prefetch_factor": 4}})
    assert warmup == 133
    chosen = measured_steps(_run(40), warmup, 20, least_warmup=5)
    assert [s.index for s in chosen] == list(range(20, 40))


def test_never_a_step_of_the_jobs_own_warmup() -> None:
    chosen = measured_steps(_run(12), 133, 20, least_warmup=5)
    assert [s.index for s in chosen] == list(range(5, 12))
    assert measured_steps(_run(12), 133, 20) == []
