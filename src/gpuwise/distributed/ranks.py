"""Rank and world facts of the current process, read from torchrun's environment.

This is the one place that reads torchrun's variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Where this process sits in a distributed job.

    Attributes:
        rank: Global rank (0 when not distributed).
        local_rank: Rank on this node.
        world_size: Number of processes in the job (1 when not distributed).
        local_world_size: Number of processes on this node.
        node_rank: Index of this node.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0

    @property
    def distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1


def rank_info(environ: Mapping[str, str] | None = None) -> RankInfo:
    """Read this process's rank facts from torchrun's environment variables.

    Args:
        environ: The environment to read (default: ``os.environ``).

    Returns:
        The RankInfo; a process not started by torchrun is rank 0 of 1.

    Example:
        >>> rank_info({"RANK": "1", "WORLD_SIZE": "2"}).rank
        1
    """
    env = os.environ if environ is None else environ

    def num(name: str, default: int) -> int:
        try:
            return int(env.get(name, default))
        except ValueError:
            return default

    world = num("WORLD_SIZE", 1)
    return RankInfo(
        rank=num("RANK", 0),
        local_rank=num("LOCAL_RANK", 0),
        world_size=world,
        local_world_size=num("LOCAL_WORLD_SIZE", world),
        node_rank=num("GROUP_RANK", 0),
    )
