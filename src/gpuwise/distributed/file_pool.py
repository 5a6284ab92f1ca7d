"""Apply one reducing function to many files on a pool of worker processes, or on Ray.

``map_files(read, paths, jobs=N)`` runs ``read(path)`` for every path on ``N`` worker
processes (default: every core this process may use) and returns one ``FileResult`` per
path, in the order given. Each worker returns what ``read`` reduced the file to, so the
parent holds results, never whole inputs, and memory stays within the workers' count times
one file's reading.

Note: the worker protocol.

- **Start**: on Linux, when this process runs no other thread, workers are forked: they
  start at once with the modules already imported, and a user's script is not run again
  in them (spawning re-imports ``__main__``). Otherwise they are spawned (a fresh
  interpreter: no fork of another thread's locks). Each asks the kernel for SIGKILL when
  the parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux); a worker whose parent is already
  gone exits at once.
  Workers ignore SIGINT: Ctrl-C reaches the terminal's whole process group and the parent
  decides.
- **Failures**: an exception in ``read`` is that path's ``FileResult.error``; the other paths
  go on. When a worker dies (killed, out of memory) the pool breaks; the files not read yet
  go to a fresh pool, and when a round reads none, the first of them is read in a worker of
  its own, whose death becomes that file's error. One bad file never costs the job, and the
  parent never reads a file itself.
- **Stop**: leaving ``map_files`` (normally, by an error or by KeyboardInterrupt) cancels
  what has not started and ends every worker before returning.
- **Ray**: with ``ray_address`` the same function runs as Ray tasks on that cluster (one
  per path; Ray places them); the files must be readable at the same path on every node.
  Ray is the optional ``ray`` extra, imported only here.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpuwise.errors import MissingExtraError, UsageError

T = TypeVar("T")
_PR_SET_PDEATHSIG = 1
RAY_FORMS = (
    "'auto' (the cluster this machine belongs to), 'local' (one started here), "
    "'ray://HOST:10001' (a Ray client server) or 'HOST:6379' (the head node's address)"
)
"""The forms ``--ray`` accepts, as its errors list them."""
_RAY_ADDRESS = re.compile(r"(auto|local|(ray://)?[A-Za-z0-9._\-\[\]:]+:[0-9]{1,5})")


@dataclass(frozen=True)
class FileResult(Generic[T]):
    """What reading one file gave.

    Attributes:
        path: The file.
        value: What the function returned, or None when it failed.
        error: ``"<ErrorType>: message"`` when it failed, else None.
        exception: The exception itself when it could be passed back, else None.
    """

    path: str
    value: T | None = None
    error: str | None = None
    exception: BaseException | None = None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def map_files(
    read: Callable[[str], T],
    paths: Sequence[str],
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
) -> list[FileResult[T]]:
    """Run ``read`` on every path in parallel; one result per path, in order.

    Args:
        read: A module-level function (workers import it by name) from a path to a
            picklable result.
        paths: The files.
        jobs: Worker processes (default: the usable cores; never more than the paths).
            1 reads in this process.
        ray_address: Run on this Ray cluster instead (``"auto"``, ``"ray://host:10001"``,
            or ``"local"`` for a Ray started here).

    Returns:
        ``FileResult`` per path: ``value`` or ``error``.

    Raises:
        UsageError: ``jobs`` is below 1, ``ray_address`` is not an address, or no Ray
            cluster answers at it.
        MissingExtraError: ``ray_address`` was given and Ray is not installed.

    Example:
        >>> results = map_files(read_rank_summary, ["r0.json.gz", "r1.json.gz"])  # doctest: +SKIP
        >>> [r.error for r in results]  # doctest: +SKIP
        [None, None]
    """
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: need at least 1 worker process; e.g. --jobs 4")
    names = [os.fspath(p) for p in paths]
    if ray_address is not None:
        check_ray_address(ray_address)
        return _on_ray(read, names, ray_address)
    workers = min(jobs or usable_cores(), len(names))
    if workers <= 1:
        return [_call(read, name) for name in names]
    return _on_pool(read, names, workers)


def _call(read: Callable[[str], T], path: str) -> FileResult[T]:
    try:
        return FileResult(path, read(path))
    except Exception as err:  # one bad file is that file's result, not the job's end
        return FileResult(path, None, f"{type(err).__name__}: {err}", err)


def _on_pool(read: Callable[[str], T], paths: list[str], workers: int) -> list[FileResult[T]]:
    """Read on a pool; after a worker death, the unread files go to a fresh pool."""
    results: list[FileResult[T] | None] = [None] * len(paths)
    left = list(range(len(paths)))
    while left:
        _pool_round(read, paths, left, min(workers, len(left)), results)
        unread = [i for i in left if results[i] is None]
        if len(unread) == len(left):  # no progress: the first file alone, to find the killer
            results[unread[0]] = _isolated(read, paths[unread[0]])
            unread = unread[1:]
        left = unread
    return [
        r if r is not None else FileResult(p, None, "not read")
        for r, p in zip(results, paths, strict=True)
    ]


def _pool_round(
    read: Callable[[str], T],
    paths: list[str],
    indices: list[int],
    workers: int,
    results: list[FileResult[T] | None],
) -> None:
    pool = ProcessPoolExecutor(
        workers,
        mp_context=_context(),
        initializer=_worker_start,
        initargs=(os.getpid(),),
    )
    try:
        futures = {i: pool.submit(_call, read, paths[i]) for i in indices}
        for i, fut in futures.items():
            with contextlib.suppress(BrokenProcessPool):  # a worker died: read again later
                results[i] = fut.result()
    finally:
        _stop(pool)


def _context() -> Any:
    """Fork where it is safe (Linux, no other thread in this process), else spawn."""
    if sys.platform == "linux" and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _isolated(read: Callable[[str], T], path: str) -> FileResult[T]:
    """Read one file in a worker of its own: its death is that file's error."""
    results: list[FileResult[T] | None] = [None]
    _pool_round(read, [path], [0], 1, results)
    return results[0] or FileResult(
        path, None, "the worker process died reading it (killed, or out of memory)"
    )


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end every worker (none outlives the call)."""
    procs = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)


def _worker_start(parent_pid: int) -> None:
    """Worker set-up: die with the parent (Linux), leave Ctrl-C to the parent.

    A forked worker inherits the command's stop handlers; the parent ends its workers with
    SIGTERM, which must end them quietly, so SIGTERM and SIGHUP get their default action.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def check_ray_address(address: str) -> None:
    """Refuse, before Ray is imported, a ``--ray`` value that is none of its forms.

    Raises:
        UsageError: ``address`` is not ``auto``, ``local``, ``ray://HOST:PORT`` or
            ``HOST:PORT``.

    Example:
        >>> check_ray_address("ray://head:10001")
    """
    if not _RAY_ADDRESS.fullmatch(address):
        raise UsageError(f"--ray {address!r} is not a Ray address; give {RAY_FORMS}")


def _ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise MissingExtraError("ray", "ray", "Reading rank traces on a Ray cluster") from err
    return ray


def _on_ray(read: Callable[[str], T], paths: list[str], address: str) -> list[FileResult[T]]:
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=None if address == "local" else address, log_to_driver=False)
        except (ConnectionError, TimeoutError, ValueError, RuntimeError) as err:
            first = (str(err).strip().splitlines() or [""])[0]
            raise UsageError(
                f"--ray {address}: no Ray cluster answered ({type(err).__name__}: {first}); "
                "start one with `ray start --head`, give its address, or use --ray local"
            ) from err
    try:
        task = ray.remote(_call)
        refs = [task.remote(read, p) for p in paths]
        out: list[FileResult[T]] = []
        for path, ref in zip(paths, refs, strict=True):
            try:
                out.append(ray.get(ref))
            except Exception as err:  # the task's worker died: that path's result
                out.append(FileResult(path, None, f"{type(err).__name__}: {err}"))
        return out
    finally:
        if started:
            ray.shutdown()
