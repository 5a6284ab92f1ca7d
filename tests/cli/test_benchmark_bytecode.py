"""``benchmarks/analyze_scale.py`` times start-up as an installed gpuwise has it: from bytecode.

Under ``PYTHONDONTWRITEBYTECODE=1`` a source tree compiles every module from source in every
process: about 0.15 s of the 0.3 s start-up measured at 100k events, which no installed copy
pays. The benchmark's untimed first run writes the bytecode to a cache beside its traces.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import analyze_scale


def test_first_run_caches_the_bytecode_the_timed_runs_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    analyze_scale.cache_bytecode(tmp_path, {"gpuwise-process": analyze_scale.SRC})
    cache = tmp_path / "pycache"
    assert os.environ["PYTHONPYCACHEPREFIX"] == str(cache)  # every later child reads it
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    compiled = {p.name.split(".")[0] for p in cache.rglob("*.pyc")}
    assert {"analyze", "main", "reader", "rules", "json"} <= compiled  # gpuwise and stdlib
    assert [p.name for p in tmp_path.iterdir()] == ["pycache"]  # the warm-up trace is gone


def test_public_traces_are_timed_as_whole_processes_too(tmp_path: Path) -> None:
    import gzip
    import json

    import analyze_public

    from tests.trace_events import kernel

    events = [kernel("ampere_sgemm_128x64_nn", 30 * i, 20, 7) for i in range(50)]
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    row = analyze_public.time_file(path, 1, tmp_path, processes=True)
    assert row["events"] == 50
    assert row["process_cpu_vs_json_load"] > 0  # both processes ran on the gzip file
    assert row["process_budget"] is None  # under 100k events start-up is all of it
    assert [analyze_public.process_budget(n) for n in (99_999, 100_000, 10**6)] == [None, 1, 0.5]
