"""Which samples each rank reads in an epoch, and how they split into batches.

Policy (the same as ``torch.utils.data.DistributedSampler`` followed by a DataLoader):

- The epoch's order is a permutation of ``range(n)`` drawn from ``(seed, epoch)``, the same
  on every rank; without shuffling it is ``range(n)``.
- ``drop_last=False``: the order is padded by repeating its first ``pad = W*ceil(n/W) - n``
  entries, so every rank gets ``ceil(n/W)`` samples. Every sample is seen once per epoch
  across ranks, and exactly ``pad`` samples (fewer than ``W``) are seen a second time.
  Each rank's last batch may be short, but every rank has the same number of batches.
- ``drop_last=True``: the last ``n mod W`` entries of the order are dropped, and so is
  each rank's short last batch. No sample is seen twice.
- Rank ``r`` takes every ``W``-th entry starting at ``r``. Indices inside one batch are
  sorted, so a batch reads the store front to back.
"""

from __future__ import annotations

import numpy as np

from gpuwise.errors import UsageError


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Return the epoch's sample order, shared by all ranks.

    Args:
        n: Number of records in the store.
        seed: Base seed.
        epoch: Epoch number; each epoch draws a new permutation.
        shuffle: Permute (True) or keep the store's order.

    Returns:
        An int64 array holding a permutation of ``range(n)``.
    """
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])
    return rng.permutation(n).astype(np.int64)


def rank_indices(
    n: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> np.ndarray:
    """Return the samples one rank reads in one epoch, in order (see the module policy).

    Args:
        n: Number of records in the store.
        rank: This process's rank, ``0 <= rank < world_size``.
        world_size: Number of ranks sharing the store.
        seed: Base seed.
        epoch: Epoch number.
        shuffle: Permute the order each epoch.
        drop_last: Drop the ``n mod world_size`` tail instead of padding.

    Returns:
        The int64 indices of this rank's samples.

    Raises:
        UsageError: ``world_size`` exceeds ``n`` or ``rank`` is out of range.

    Example:
        >>> rank_indices(5, rank=1, world_size=2, shuffle=False).tolist()
        [1, 3, 0]
    """
    check_world(n, rank, world_size)
    order = epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle)
    per_rank = n // world_size if drop_last else -(-n // world_size)
    total = per_rank * world_size
    if total > n:
        order = np.concatenate([order, order[: total - n]])
    return order[rank:total:world_size]


def check_world(n: int, rank: int, world_size: int) -> None:
    """Raise a UsageError when the ranks cannot share ``n`` samples.

    Args:
        n: Number of records in the store.
        rank: This process's rank.
        world_size: Number of ranks.

    Raises:
        UsageError: ``world_size`` < 1, ``rank`` outside ``[0, world_size)``, or more ranks
            than samples.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise UsageError(
            f"rank {rank} of world size {world_size} is not a valid position; "
            "expected 0 <= rank < world_size; check RANK and WORLD_SIZE"
        )
    if world_size > n:
        raise UsageError(
            f"{world_size} ranks share a store of {n} records; every rank needs at least "
            "one sample; use fewer ranks or a larger store"
        )


def split_batches(indices: np.ndarray, batch_size: int, *, drop_last: bool) -> list[np.ndarray]:
    """Cut a rank's indices into batches, each sorted for locality.

    Args:
        indices: The rank's samples in order (from ``rank_indices``).
        batch_size: Samples per batch.
        drop_last: Drop a short last batch.

    Returns:
        One sorted int64 array per batch.
    """
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    return [np.sort(indices[i : i + batch_size]) for i in range(0, stop, batch_size)]


def batch_count(samples: int, batch_size: int, *, drop_last: bool) -> int:
    """Return the number of batches ``samples`` make.

    Args:
        samples: Samples on this rank.
        batch_size: Samples per batch.
        drop_last: Drop a short last batch.

    Returns:
        The batch count.
    """
    return samples // batch_size if drop_last else -(-samples // batch_size)
