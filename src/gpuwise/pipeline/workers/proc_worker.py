"""The worker side of process-mode ``pre`` (see Note [process pre] in ``procs.py``).

Everything here runs in the worker process, or describes it: the worker's loop, the
checks it makes on ``pre``'s output, and the parent's helpers to name how a worker ended
and to make the anonymous shared memory the workers write into.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
import signal
from collections.abc import Callable
from multiprocessing import reduction
from typing import Any

import numpy as np
import torch

from gpuwise.errors import UsageError
from gpuwise.pipeline.errors import StageError

_PR_SET_PDEATHSIG = 1


def worker_main(pre: Callable[[Any], Any], conn: Any, parent_pid: int) -> None:
    """Worker process: run ``pre`` on each task until the stop message or end of pipe."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the server decides
    region: mmap.mmap | None = None
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        if msg[0] == "shm":
            fd = reduction.recv_handle(conn)
            region = mmap.mmap(fd, msg[1])
            os.close(fd)
            continue
        _, index, slot, slot_bytes, blob = msg
        conn.send(_run_one(pre, index, blob, slot, slot_bytes, region))


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGKILL when the starting thread ends (Linux); exit if it has."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _run_one(
    pre: Callable[[Any], Any],
    index: int,
    blob: bytes,
    slot: int | None,
    slot_bytes: int,
    region: mmap.mmap | None,
) -> tuple[Any, ...]:
    try:
        array = sample_array(pre(pickle.loads(blob)))
        if slot is None or region is None:
            return (index, "inline", array)
        if array.nbytes > slot_bytes:
            raise StageError(
                f"pre returned {array.nbytes} bytes; the slots hold {slot_bytes} (the first "
                "sample's size); make pre return one shape"
            )
        view = np.frombuffer(region, np.uint8, array.nbytes, offset=slot * slot_bytes)
        view[:] = array.reshape(-1).view(np.uint8)
        del view
        return (index, "slot", (array.shape, array.dtype.str))
    except BaseException as err:  # SystemExit too: the request fails, the worker lives
        return (index, "error", _picklable(err))


def sample_array(sample: Any) -> np.ndarray:
    """``pre``'s output as a contiguous numeric array, or a ``StageError`` saying why not."""
    if isinstance(sample, torch.Tensor):
        sample = sample.detach().cpu().numpy()
    if not isinstance(sample, np.ndarray):
        raise StageError(
            f"pre returned a {type(sample).__name__}; expected a torch.Tensor or numpy array "
            "(one sample, without the batch dimension); return one from pre"
        )
    if sample.dtype.hasobject or sample.dtype.kind not in "biufc":
        raise StageError(
            f"pre returned an array of dtype {sample.dtype}; expected numbers (uint8, "
            "float32, ...); return a numeric array from pre"
        )
    return np.ascontiguousarray(sample)


def _picklable(err: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:
        return StageError(f"pre raised {type(err).__name__}: {err}")
    if not isinstance(err, Exception):  # SystemExit, KeyboardInterrupt: not for a future
        return StageError(f"pre raised {type(err).__name__}({err}); the request failed")
    return err


def check_picklable(pre: Callable[[Any], Any]) -> None:
    """Raise ``UsageError`` when ``pre`` cannot be sent to a worker process."""
    try:
        pickle.dumps(pre)
    except Exception as err:
        name = getattr(pre, "__qualname__", type(pre).__name__)
        raise UsageError(
            f"pre ({name}) cannot be sent to worker processes ({type(err).__name__}: {err}); "
            "make it a module-level function (or a functools.partial of one), "
            "or run pre in threads (pre_processes=0)"
        ) from None


def unpicklable_input(index: int, err: Exception) -> str:
    """The message of a request whose input cannot be sent to a worker process."""
    return (
        f"the input of request {index} cannot be sent to a pre process "
        f"({type(err).__name__}: {err}); send picklable inputs (bytes, arrays, numbers) "
        "or run pre in threads (pre_processes=0)"
    )


def exit_text(code: int | None) -> str:
    """How a process ended, in words (``killed by SIGKILL``, ``exited with code 3``)."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def anonymous_region(nbytes: int) -> tuple[int, mmap.mmap]:
    """Shared memory without a name (``memfd``): nothing in ``/dev/shm`` to leave behind."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("gpuwise-pre-slots", os.MFD_CLOEXEC)
    else:  # not Linux: an unlinked temporary file serves the same purpose
        import tempfile

        fd, path = tempfile.mkstemp(prefix="gpuwise-pre-slots-")
        os.unlink(path)
    os.ftruncate(fd, nbytes)
    return fd, mmap.mmap(fd, nbytes)
