"""Language-model loss routes: torchtune's chunked output loss, eager and compiled.

The traced peaks are checked against the CPU allocator's record of the same steps run
for real (``measure_job_peak``), in fp32 with one thread, on a Llama whose logits
outweigh its layers so the loss decides the peak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpuwise.cli.main import main
from gpuwise.errors import UsageError
from gpuwise.sizing.step.choices import loss_name, parse_loss
from gpuwise.sizing.step.losses import chunked_cross_entropy

pytestmark = pytest.mark.kernels

pytest.importorskip("transformers", reason="the chunked head is checked on a Hugging Face Llama")

DATA = Path(__file__).parents[1] / "data"


def _wide_vocab_config(tmp_path: Path) -> str:
    config = json.loads((DATA / "llama3_70b_config.json").read_text())
    config.update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=8192,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_parse_loss_spells_out_the_chunks() -> None:
    assert parse_loss("chunked") == ("chunked", 8)
    assert parse_loss("chunked-compiled:16") == ("chunked-compiled", 16)
    assert parse_loss("fused") == ("fused", 8)
    assert "8 output chunks" in loss_name("chunked")
    for bad in ("chunked:0", "chunked:x", "fused:4", "sparse"):
        with pytest.raises(UsageError):
            parse_loss(bad)


def test_chunked_loss_equals_cross_entropy_and_its_gradient() -> None:
    logits = torch.randn(2, 12, 10, requires_grad=True)
    targets = torch.randint(0, 10, (2, 12))
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    (want_grad,) = torch.autograd.grad(want, logits)
    for compiled in (False, True):
        got = chunked_cross_entropy(list(logits.chunk(4, dim=1)), targets, compiled)
        (grad,) = torch.autograd.grad(got, logits)
        # fp32 on both sides, summed in another order: a few ulps apart on any CPU
        assert got.item() == pytest.approx(want.item(), rel=1e-5)
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6)


_SCRIPT = """
import json, sys
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.measured import measure_job_peak
from gpuwise.sizing.memory.estimate import estimate_job
from gpuwise.sizing.step.peft import LoraSpec
out = {}
for loss in ("full", "chunked:8", "chunked-compiled:8", "chunked-compiled:2"):
    job = SizingJob(sys.argv[1], seq_len=64, batch_size=2, precision="fp32",
                    lora=LoraSpec(4, ("q_proj", "v_proj")), loss=loss, device="cpu")
    out[loss] = [estimate_job(job).peak_bytes, measure_job_peak(job)]
print(json.dumps(out))
"""


def test_chunked_routes_match_cpu_allocator_record(tmp_path: Path) -> None:
    # one thread: no per-thread oneDNN buffers in the record (see test_checkpointing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, _wide_vocab_config(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    for case, (estimated, measured) in got.items():
        # fp32: the record matches to 32 bytes here; 1 % leaves room for a CPU whose sgemm
        # packs differently
        assert estimated == pytest.approx(measured, rel=0.01), case
    logits_bytes = 2 * 64 * 8192 * 4  # batch x tokens x vocab, fp32
    # eager: the fp32 log-softmax of every chunk is kept, but no whole fp32 copy beside
    # it: at least one logits' worth below the full route
    assert got["full"][0] - got["chunked:8"][0] >= logits_bytes
    # compiled: the chunks themselves are kept instead of their log-softmax and freed
    # chunk by chunk in the backward: another 1/4 of the logits below the eager route
    assert got["chunked:8"][0] - got["chunked-compiled:8"][0] >= logits_bytes // 4


def test_cli_names_the_chunked_route(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--hf-config", _wide_vocab_config(tmp_path), "--seq", "16"]
    argv += ["--batch", "1", "--loss", "chunked-compiled", "--json"]
    assert main(argv) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert job["loss"] == "chunked-compiled:8"
    assert job["loss_route"] == (
        "torchtune CEWithChunkedOutputLoss, 8 output chunks, compute_cross_entropy compiled"
    )


def test_cli_refuses_a_bad_chunk_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "gpt2_small", "--loss", "chunked:0"]) == 2  # argparse's usage code
    assert "positive integer" in capsys.readouterr().err
