"""Synthetic per-rank data for the cross-rank tests: steps and rank-file records."""

from __future__ import annotations

from typing import Any

from gpuwise.records import Step


def steps(rank: int, n: int, *, data_s: float, compute_s: float, batch: int = 32) -> list[Step]:
    """``n`` equal steps of one rank, back to back."""
    total = data_s + compute_s
    return [
        Step(i, i * total, data_s, 0.0, compute_s, 0.0, rank=rank, batch_size=batch)
        for i in range(n)
    ]


def comm(
    n: int, *, exposed_s: float, forwards_per: int = 1, no_sync: int = 0
) -> list[dict[str, Any]]:
    """``n`` all-reduce iterations, each exposing ``exposed_s``."""
    return [
        {
            "type": "comm",
            "i": i,
            "buckets": 1,
            "bytes": 4096,
            "ready_last_s": float(i),
            "done_s": float(i) + exposed_s,
            "exposed_s": exposed_s,
            "forwards": (i + 1) * forwards_per,
            "no_sync_forwards": no_sync,
        }
        for i in range(n)
    ]


def rank_file(
    rank: int,
    comm_records: list[dict[str, Any]],
    *,
    world: int = 2,
    end: str | None = "exit",
    threads: int = 1,
    cores: int = 2,
    ddp: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``read_rank_files`` returns for one rank."""
    header = {
        "type": "rank",
        "rank": rank,
        "world_size": world,
        "local_world_size": world,
        "cores": cores,
        "torch_threads": threads,
        "omp_num_threads": str(threads),
    }
    settings = {"type": "ddp", "find_unused_parameters": False, "bucket_cap_mb": 25.0}
    return {
        "rank": rank,
        "pid": 100 + rank,
        "header": header,
        "ddp": [{**settings, **(ddp or {})}],
        "comm": comm_records,
        "end": None if end is None else {"type": "end", "how": end, "t_s": 5.0 + rank},
        "skipped_lines": 0,
    }
