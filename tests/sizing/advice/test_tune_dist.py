from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
import torch.distributed as dist
from gpuwise.sizing.advice.tune import agree_min
dist.init_process_group("gloo")
value, ran = agree_min(int(sys.argv[1]))
print(json.dumps({"rank": dist.get_rank(), "value": value, "ran": ran}))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.dist
def test_two_gloo_ranks_agree_on_the_minimum() -> None:
    port = _free_port()
    procs = []
    for rank, found in enumerate((48, 32)):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", SCRIPT, str(found)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(o["rank"] for o in outputs) == [0, 1]
    assert [o["value"] for o in outputs] == [32, 32]
    assert all(o["ran"] for o in outputs)
