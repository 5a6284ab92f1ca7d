"""A job that shared the machine: its share leads, its timing findings become notes."""

from __future__ import annotations

from gpuwise.diagnose.anatomy.machine import machine_share
from gpuwise.diagnose.machine_rules import shared_machine, shared_machine_note
from gpuwise.records import Finding
from gpuwise.records.anatomy import JobAnatomy

HOGS = {"command": "python -c while True: pass", "processes": 4, "cores": 1.5}


def _load(ran_s: float, waited_s: float, others: float, **more: object) -> dict:
    return {"cores": 2, "job_cores": 0.5, "others_cores": others, "window_s": 4.0,
            "job_ran_s": ran_s, "job_waited_s": waited_s, "others": [HOGS], **more}  # fmt: skip


def _anatomy(share: dict) -> JobAnatomy:
    return JobAnatomy(resources={"machine": share})


def test_the_share_is_what_the_threads_ran_of_the_time_they_were_ready():
    share = machine_share(_load(1.0, 3.0, 1.5), threads=2, cores=2)
    assert share["share_of_asked"] == 0.25  # ran 1 s of 4 s ready
    assert share["basis"] == "run queue"
    assert share["contended"]
    assert share["summary"].startswith("SHARED MACHINE: the job's threads ran 25%")
    assert "python -c while True: pass (4 x, 1.50 cores)" in share["summary"]


def test_a_job_whose_own_threads_oversubscribe_waits_by_its_own_doing():
    # 8 threads on 2 cores alone get a quarter each: 25 % ran is what it would get alone
    share = machine_share(_load(1.0, 3.0, 1.5), threads=8, cores=2)
    assert share["alone_share"] == 0.25
    assert not share["contended"]


def test_waiting_beside_an_idle_machine_is_not_sharing_it():
    share = machine_share(_load(1.0, 3.0, 0.1), threads=2, cores=2)
    assert not share["contended"]
    assert not share["summary"].startswith("SHARED")


def test_without_run_queue_times_the_cores_decide():
    load = _load(0.0, 0.0, 1.5)
    del load["job_ran_s"], load["job_waited_s"]
    share = machine_share(load, threads=2, cores=2)
    assert (share["basis"], share["share_of_asked"], share["contended"]) == ("cores", 0.25, True)


def test_timing_findings_become_notes_and_late_ranks_are_not_called_communication():
    a = _anatomy(machine_share(_load(1.0, 3.0, 1.5), threads=2, cores=2))
    wait = Finding("input_bound", "critical", "Waiting for data 60 %", {"x": 1}, 2.5, ())
    comm = Finding("comm_bound", "critical", "Rank 1 waits in all-reduce", {}, 4.53, ())
    note = shared_machine_note(wait, a, timing=True)
    assert note.severity == "info"
    assert "shared machine: the job's threads ran 25%" in note.summary
    assert note.evidence["share_of_asked"] == 0.25
    late = shared_machine_note(comm, a, timing=True)
    assert late.severity == "info"
    assert "descheduled, not slow to communicate" in late.summary
    memory = Finding("memory_headroom", "warning", "Memory", {}, None, ())
    assert shared_machine_note(memory, a, timing=False) is memory
    lead = shared_machine(a)
    assert lead is not None
    assert (lead.kind, lead.severity) == ("shared_machine", "warning")
    assert "python -c while True: pass" in lead.summary


def test_judged_anyway_keeps_the_verdicts_and_still_says_the_machine_was_shared():
    share = machine_share(_load(1.0, 3.0, 1.5, judge=True), threads=2, cores=2)
    a = _anatomy(share)
    wait = Finding("input_bound", "critical", "Waiting for data", {}, 2.5, ())
    assert shared_machine_note(wait, a, timing=True) is wait
    assert shared_machine(a) is None
    assert "judged anyway" in share["summary"]
