"""--untie-head and --offload-activations: bytes by definition and the CPU allocator's record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import UsageError
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.estimate import estimate_job
from gpuwise.sizing.speed.roofline import gpu_step_time
from tests.sizing.factories import tiny_llama_tied

pytestmark = pytest.mark.kernels

LLAMA = "tests.sizing.factories:tiny_llama"
TIED = "tests.sizing.factories:tiny_llama_tied"


def test_untied_head_adds_one_head_weight_with_its_gradient_and_state() -> None:
    net = tiny_llama_tied()
    head = net.get_output_embeddings().weight
    assert head is net.get_input_embeddings().weight  # the config ties them
    tied = SizingJob(TIED, seq_len=16, batch_size=2, device="cpu")
    untied = replace(tied, untie_head=True)
    a, b = estimate_job(tied), estimate_job(untied)
    one = head.numel() * 4  # fp32
    assert b.parameter_count - a.parameter_count == head.numel()
    assert b.parameters_bytes - a.parameters_bytes == one
    # AdamW: the weight, its gradient and two moments
    assert b.params_grads_optimizer_bytes - a.params_grads_optimizer_bytes == 4 * one
    assert b.job is not None
    assert b.job.describe()["untie_head"] is True


def test_untie_head_refuses_a_head_of_its_own() -> None:
    job = SizingJob(LLAMA, seq_len=16, untie_head=True)  # tie_word_embeddings False
    with pytest.raises(UsageError, match="its own already"):
        estimate_job(job)


_SCRIPT = """
import json
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.measured import measure_job_peak
from gpuwise.sizing.memory.estimate import estimate_job
out = {}
for name, change in (("plain", {}), ("offload", {"offload_activations": True}),
                     ("untie", {"untie_head": True})):
    job = SizingJob("tests.sizing.factories:tiny_llama_tied", seq_len=64, batch_size=4,
                    precision="fp32", device="cpu", **change)
    est = estimate_job(job)
    out[name] = [est.peak_bytes, measure_job_peak(job), est.offloaded_bytes,
                 est.activations_bytes]
print(json.dumps(out))
"""


def test_offload_and_untie_match_the_cpu_allocator_record() -> None:
    # one thread: no per-thread oneDNN buffers in the record (see test_checkpointing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    for case, (estimated, measured, _, _) in got.items():
        assert estimated == pytest.approx(measured, rel=0.01), case
    plain, offload = got["plain"], got["offload"]
    assert plain[2] == 0
    assert offload[2] > 0  # activations moved to the host
    # what the forward keeps on the card shrinks by what went to the host, less what
    # the backward brings back at once; the peak drops
    assert offload[0] < plain[0]
    assert offload[3] < plain[3]


def test_offloaded_bytes_cross_pcie_in_the_step_time() -> None:
    job = SizingJob(LLAMA, seq_len=64, batch_size=4, precision="bf16", offload_activations=True)
    est = estimate_job(job)
    card = find_gpus(["RTX 4090"])[0]
    step = gpu_step_time(est, card, "bf16", with_h2d=False)
    assert step is not None
    assert step.h2d_s == pytest.approx(est.offloaded_bytes / card.pcie_bytes_s)


def test_cli_flags_reach_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", TIED, "--seq", "16", "--batch", "1", "--untie-head"]
    argv += ["--offload-activations", "--optimizer", "paged_adamw", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["job"]["untie_head"] is True
    assert data["job"]["offload_activations"] is True
    assert data["offloaded_bytes"] > 0
    assert data["paged_state_bytes"] > 0
