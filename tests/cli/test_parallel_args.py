from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--shard", "zero4"], "use one or more of ddp, zero1, zero2, zero3, fsdp, hsdp"),
        (["--gpus", "0"], "give GPU counts from 1"),
        (["--gpus", "eight"], "give GPU counts from 1"),
    ],
)
def test_bad_layout_flags_say_what_is_accepted(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate", "mnist_mlp", *argv]) == 2
    assert says in capsys.readouterr().err


def test_nodes_that_do_not_divide_the_gpus_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "mnist_mlp", "--gpus", "12", "--nodes", "5"]) != 0
    err = capsys.readouterr().err
    assert "the same number of GPUs on every node" in err
    assert "unexpected" not in err


def test_estimate_json_carries_each_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "mnist_mlp", "--batch", "4", "--gpus", "8", "--shard", "ddp,fsdp"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ddp, fsdp = data["per_gpu"]
    assert (ddp["shard"], fsdp["shard"]) == ("ddp", "fsdp")
    # mnist_mlp's parameters (fp32), divided over 8 under a full shard
    assert fsdp["memory"]["parameters_bytes"] == -(-data["parameters_bytes"] // 8)
    assert [c["kind"] for c in ddp["collectives"]] == ["all-reduce"]
