"""The typed trace section rebuilds every real trace's JSON section with the same values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.diagnose.context import Context
from gpuwise.diagnose.ranks.trace import merge_traces
from gpuwise.diagnose.rules import diagnose
from gpuwise.records import Run
from gpuwise.records.trace import RankFacts, StreamIdle
from gpuwise.records.trace_section import TraceSection
from gpuwise.telemetry.readers.kineto import read_trace

REAL = Path(__file__).resolve().parents[1] / "realdata"
TRACES = sorted(REAL.glob("*.trace.json.gz")) + sorted(REAL.glob("hta_traces/*.trace.json.gz"))


def _section(*paths: Path) -> dict[str, object]:
    section = analyze(list(paths)).to_dict()["trace"]
    assert isinstance(section, dict)
    return section


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_real_sections_come_back_with_the_same_keys_and_values(path: Path) -> None:
    section = _section(path)
    back = TraceSection.from_dict(section).to_dict()
    assert json.dumps(back) == json.dumps(section)  # same keys, order and float values


def test_two_rank_traces_rebuild_the_rank_table_and_straggler() -> None:
    ranks = [REAL / "hta_traces" / f"recsys128_rank{r}.trace.json.gz" for r in (1, 0)]
    section = _section(*ranks)
    typed = TraceSection.from_dict(section)
    assert typed.ranks is not None
    assert [r.rank for r in typed.ranks] == [0, 1]
    assert all(isinstance(r, RankFacts) for r in typed.ranks)
    assert typed.distributed is not None
    assert typed.distributed["ranks_read"] == 2
    assert json.dumps(typed.to_dict()) == json.dumps(section)


def test_facts_are_rebuilt_as_records() -> None:
    section = _section(REAL / "hta_traces" / "cnn_ddp_a100_nccl.trace.json.gz")
    facts = TraceSection.from_dict(section).facts
    assert facts is not None
    assert all(isinstance(s, StreamIdle) for s in facts.idle_by_stream)
    comm = section["communication"]
    assert isinstance(comm, dict)
    assert facts.communication.overlap_fraction == comm["overlap_fraction"]
    assert facts.share(facts.busy_s) == pytest.approx(1.0 - section["temporal"]["idle"])  # type: ignore[index]


def test_a_partial_section_takes_the_defaults() -> None:
    typed = TraceSection.from_dict({"window_s": 12.9})
    assert typed.window_s == 12.9
    assert typed.facts is None
    assert typed.ranks is None


def test_a_run_document_read_back_keeps_its_trace_typed_and_equal() -> None:
    run = analyze([REAL / "hta_traces" / "cnn_ddp_a100_nccl.trace.json.gz"])
    doc = json.loads(json.dumps(run.to_dict()))
    back = Run.from_dict(doc)
    assert isinstance(back.trace, TraceSection)
    assert "trace" not in back.extra
    assert json.dumps(back.to_dict()) == json.dumps(doc)


def test_the_reader_hands_over_the_typed_section_and_its_seconds_come_back_exact() -> None:
    path = REAL / "hta_traces" / "recsys128_rank0.trace.json.gz"
    read = read_trace(path, strict=False).to_section()
    assert isinstance(read, TraceSection)
    assert read.facts is not None
    back = TraceSection.from_dict(json.loads(json.dumps(read.to_dict()))).facts
    assert back is not None
    assert (back.busy_s, back.compute_s) == (read.facts.busy_s, read.facts.compute_s)
    assert back == read.facts


def _old_document(run: Run) -> dict[str, Any]:
    """The Run document as written before the section stored seconds and collectives."""
    doc = json.loads(json.dumps(run.to_dict()))
    for key in ("device_busy_s", "device_compute_s"):
        del doc["trace"][key]
    del doc["trace"]["communication"]["exposed_by_collective_s"]
    return doc


def test_an_older_document_reads_the_seconds_as_share_times_span() -> None:
    run = analyze([REAL / "hta_traces" / "cnn_ddp_a100_nccl.trace.json.gz"])
    doc = _old_document(run)
    facts = TraceSection.from_dict(doc["trace"]).facts
    assert facts is not None
    assert run.trace is not None
    assert run.trace.facts is not None
    span, temporal = doc["trace"]["device_span_s"], doc["trace"]["temporal"]
    assert facts.busy_s == span * (1.0 - temporal["idle"])
    assert facts.compute_s == span * temporal["compute"]
    assert facts.busy_s == pytest.approx(run.trace.facts.busy_s, rel=1e-12)
    assert facts.communication.exposed_by_collective_s == {}
    again = diagnose(Run.from_dict(doc))
    assert [f.to_dict() for f in again] == [f.to_dict() for f in run.findings]


def test_rank_traces_merge_as_records_and_the_context_holds_the_section() -> None:
    sections = [
        read_trace(REAL / "hta_traces" / f"recsys128_rank{r}.trace.json.gz").to_section()
        for r in (1, 0)
    ]
    merged = merge_traces(sections)
    assert merged.file == "recsys128_rank0.trace.json.gz"
    assert merged.ranks is not None
    assert [(r.rank, r.file) for r in merged.ranks] == [
        (0, "recsys128_rank0.trace.json.gz"),
        (1, "recsys128_rank1.trace.json.gz"),
    ]
    assert merged.distributed == {
        "backend": "nccl",
        "rank": 0,
        "world_size": 128,
        "ranks_read": 2,
        "missing_ranks": list(range(2, 66)),  # of 128 ranks two were given: the first 64 absent
    }
    assert merged.straggler is not None
    assert merged.straggler["rank"] in (0, 1)
    run = Run("analyze", trace=merged)
    assert Context.of(run).trace is merged
