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
