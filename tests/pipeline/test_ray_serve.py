"""The Ray Serve adapter, for real, where ``ray[serve]`` is installed (skipped elsewhere).

Ray starts its own processes and driver threads, so the check runs in a subprocess (the
suite's thread-leak guard would see Ray's threads) and reads back what it printed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.errors import MissingExtraError

SCRIPT = """
import json, ray, torch
from ray import serve
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.ray_serve import ray_app

def build():
    return Pipeline(lambda i: torch.full((3,), i), lambda x: x * 2, lambda r: int(r[0]),
                    max_batch=4, max_delay_ms=20, pre_workers=1, model_threads=1)

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    handle = serve.run(ray_app(build, max_ongoing_requests=64))
    responses = [handle.remote(i) for i in range(24)]
    results = [r.result(timeout_s=60) for r in responses]
    stats = handle.stats.remote().result(timeout_s=60)
    print("RESULT " + json.dumps({"results": results, "stats": stats}))
finally:
    serve.shutdown()
    ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray[serve] not installed (gpuwise[ray])"
)
def test_pipeline_serves_as_a_ray_serve_deployment(tmp_path: Path):
    script = tmp_path / "serve_check.py"
    script.write_text(SCRIPT)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=repo
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-2000:]
    doc = json.loads(lines[-1][len("RESULT ") :])
    assert doc["results"] == [2 * i for i in range(24)]
    assert doc["stats"]["requests"]["ok"] == 24
    assert doc["stats"]["batches"]["mean_size"] > 1  # the replica's batcher batched them


def test_without_ray_the_adapter_names_the_extra(monkeypatch):
    from gpuwise.pipeline import ray_serve

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtraError, match=r"gpuwise\[ray\]"):
        ray_serve.ray_app(lambda: None)  # type: ignore[arg-type, return-value]
