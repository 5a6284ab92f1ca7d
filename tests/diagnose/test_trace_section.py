"""The typed trace section rebuilds every real trace's JSON section with the same values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from gpuwise.records.trace import RankFacts, StreamIdle
from gpuwise.records.trace_section import TraceSection

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
