"""Fixes for a device that waits on its input: loader workers, a store, uint8 across, prefetch.

Each names the PyTorch setting first and the gpuwise part that applies it second
(``gpuwise.data``); ``scope.scoped`` declares the jobs, vendors and premises each fits.
"""

from __future__ import annotations

from gpuwise.diagnose.fixes.scope import ANY_JOB, GPU, IMAGE_DATA, LOOPS, scoped
from gpuwise.records import Fix


@scoped(jobs=ANY_JOB)  # a job that waits on its DataLoader, serving or not
def loader_workers(cores: int | None, local_ranks: int, *, pin: bool = True) -> Fix:
    """Fix: load batches in worker processes sized to the cores each rank can use.

    Args:
        cores: CPU cores of the machine that ran the job; None when not known (a trace
            does not record its host's cores): the fix then says what to check there
            instead of sizing from the machine that runs the analysis.
        local_ranks: Processes on the machine sharing them.
        pin: Also pin the batches (worth it only when a GPU receives them).
    """
    pinned = ", pin_memory=True" if pin else ""
    if cores is None:
        return Fix(
            "Load batches in DataLoader worker processes, as many as the job's host has "
            "cores per local rank",
            f"DataLoader(dataset, batch_size=B, num_workers=N, persistent_workers=True{pinned})"
            "  # N = os.cpu_count() // local ranks, read on the machine that ran the job "
            "(the trace does not record its cores)",
        )
    n = max(1, cores // max(1, local_ranks))
    per = f"{cores} cores // {local_ranks} local rank{'s' if local_ranks > 1 else ''}"
    return Fix(
        f"Load batches in {n} DataLoader worker process{'es' if n > 1 else ''}",
        f"DataLoader(dataset, batch_size=B, num_workers={n}, persistent_workers=True{pinned})"
        f"  # {n} = os.cpu_count() // local ranks ({per})",
    )


def _side(side: int | None) -> tuple[str, str]:
    """``(side, note)``: the batch's image side, or a placeholder the note explains."""
    if side is None:
        return "S", "  # S = your images' side in pixels"
    return str(side), ""


@scoped(jobs=LOOPS, premises=("images",), data=IMAGE_DATA)
def gpuwise_store(side: int | None = None) -> Fix:
    """Fix: pre-decode the data once and read it with the gpuwise loader.

    Args:
        side: The side of the job's images, read from its first batch (None: not known;
            the fix then says what to fill in, never a size the job does not have).
    """
    px, note = _side(side)
    return Fix(
        "Decode the dataset once into a gpuwise store and read batches from it",
        f"gpuwise pack images/ train.store --size {px}  then  "
        f"loader = gpuwise.data.loader.Loader('train.store', batch_size=B){note}",
    )


@scoped(vendors=GPU, premises=("images",), data=IMAGE_DATA)
def uint8_across(side: int | None = None) -> Fix:
    """Fix: send raw uint8 to the device and convert/augment there (``side`` as above)."""
    px, note = _side(side)
    return Fix(
        "Send uint8 pixels across and convert and augment on the device (4x fewer bytes)",
        "x = x.to(device, non_blocking=True).float().div_(255), or "
        f"DevicePrefetcher(loader, device, transform=gpuwise.data.transforms.DeviceTransform("
        f"{px})){note}",
    )


@scoped(premises=("images",), data=IMAGE_DATA)
def batched_transforms(side: int | None = None) -> Fix:
    """Fix (CPU device): augment whole uint8 batches with tensor ops (``side`` as above)."""
    px, note = _side(side)
    return Fix(
        "Augment whole uint8 batches with tensor ops instead of per-sample Python",
        f"gpuwise.data.transforms.DeviceTransform({px})(uint8_batch)  # crop/flip/normalize "
        f"on the batch's device, the CPU included{note.replace('  #', ';')}",
    )


@scoped(jobs=LOOPS, vendors=GPU)
def device_prefetch() -> Fix:
    """Fix: copy the next batch while the current one computes."""
    return Fix(
        "Copy the next batch to the device while this one computes",
        "for x, y in gpuwise.data.prefetch.DevicePrefetcher(loader, device, depth=2): ...",
    )
