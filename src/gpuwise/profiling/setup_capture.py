"""What the job built: where its DataLoaders and optimizers were made, and with what settings.

Called at construction time by the patches of ``profiling/inject.py`` in a profiled process.
Each record names the user's own frame (the first one outside torch, gpuwise and installed
packages), so that a fix can point at the line that built the object, and the framework
that built it (plain PyTorch, Lightning, the Hugging Face Trainer, Accelerate), so that a
fix can be written in that framework's terms. ``JobSetup.write`` leaves the whole record in
``setup-<pid>.json`` of the profile directory; ``read_setup`` reads it back for the Run's
``setup`` section.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

from gpuwise.profiling.accelerate_prepare import (
    accelerator_site,
    rebuilt_by_accelerate,
    watch_prepare,
)

SETUP_FILES = "setup-*.json"

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor")

OPTIMIZER_FLAGS = ("foreach", "fused")

SETUP_KEYS = ("loaders", "optimizers", "losses", "stopped_after_steps")
"""A process's record counts as the job's setup when it holds any of these."""

MAX_NUMELS = 4096
"""Parameter sizes recorded per optimizer (``trials/bounds.py`` times its update on them)."""

_SKIP_DIRS = tuple(
    os.path.normcase(os.path.realpath(p)) + os.sep
    for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    | {sysconfig.get_paths()["stdlib"]}
)
_GPUWISE_DIR = os.path.normcase(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

FRAMEWORK_MARKERS = (
    (
        "lightning",
        (f"{os.sep}lightning{os.sep}pytorch{os.sep}", f"{os.sep}pytorch_lightning{os.sep}"),
    ),
    ("hf_trainer", (f"{os.sep}transformers{os.sep}trainer",)),
    ("fabric", (f"{os.sep}lightning{os.sep}fabric{os.sep}", f"{os.sep}lightning_fabric{os.sep}")),
    ("accelerate", (f"{os.sep}accelerate{os.sep}",)),
)
"""Which framework a stack passes through, most specific first: the Lightning Trainer and
the HF Trainer run on Fabric's and Accelerate's parts, so they are looked for before them.
A Fabric or Accelerate script builds its loader and optimizer in its own code (the stack
shows no framework then); its ``fabric.backward(loss)`` / ``accelerator.backward(loss)``
passes through the framework, which ``JobSetup.backward_seen`` reads."""


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):
        return True
    path = os.path.normcase(os.path.realpath(filename))
    return path.startswith(_SKIP_DIRS) or path.startswith(_GPUWISE_DIR + os.sep)


def user_frame(skip: int = 1) -> tuple[str | None, int | None, list[str]]:
    """The innermost frame of the user's code, and every file name on the stack.

    Args:
        skip: Frames to skip (this function's callers inside gpuwise).

    Returns:
        ``(file, line, stack files)``; file and line are ``None`` when every frame belongs
        to a library (a job started with ``python -c``).
    """
    frame = sys._getframe(skip)
    files: list[str] = []
    found: tuple[str | None, int | None] = (None, None)
    while frame is not None:
        name = frame.f_code.co_filename
        files.append(name)
        if found[0] is None and not _is_library(name):
            found = (os.path.abspath(name), frame.f_lineno)
        frame = frame.f_back  # type: ignore[assignment]
    return found[0], found[1], files


def framework_of(stack_files: list[str]) -> str:
    """``lightning``, ``hf_trainer``, ``fabric``, ``accelerate`` or ``plain``.

    Read from the stack (``FRAMEWORK_MARKERS``), else from what the process imported.
    """
    for name, markers in FRAMEWORK_MARKERS:
        if any(m in f for f in stack_files for m in markers):
            return name
    if "accelerate" in sys.modules and "transformers.trainer" not in sys.modules:
        return "accelerate"
    if "lightning_fabric" in sys.modules and "pytorch_lightning" not in sys.modules:
        return "fabric"  # the standalone package: imported only by a Fabric script
    return "plain"


def source_line(file: str | None, line: int | None) -> str | None:
    """The stripped source text of ``file:line``, or ``None`` when it cannot be read."""
    if file is None or line is None:
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError, IndexError):
        return Path(file).read_text(encoding="utf-8").splitlines()[line - 1].strip()
    return None


def optimizer_offers(cls: type, device_type: str) -> list[str]:
    """The speed flags (``foreach``, ``fused``) PyTorch offers for ``cls`` on a device type.

    The flag must be a parameter of the nearest ``torch.optim`` class in ``cls``'s MRO (a
    subclass may hide it), and ``fused`` needs a device with fused kernels.
    """
    from torch.optim import optimizer as torch_optimizer

    Optimizer = torch_optimizer.Optimizer

    base = next(
        (c for c in cls.__mro__ if c.__module__.startswith("torch.optim") and c is not Optimizer),
        None,
    )
    if base is None:
        return []
    params = inspect.signature(base.__init__).parameters  # type: ignore[misc]
    offers = [flag for flag in OPTIMIZER_FLAGS if flag in params]
    fused_devices = getattr(torch_optimizer, "_get_fused_kernels_supported_devices")()  # noqa: B009 - private, not re-exported
    if "fused" in offers and device_type not in fused_devices:
        offers.remove("fused")
    return offers


class JobSetup:
    """The loaders, optimizers and losses one process saw, written to its setup file."""

    def __init__(self, directory: str | None, trial: str | None = None) -> None:
        self.directory = directory
        self.doc: dict[str, Any] = {
            "pid": os.getpid(),
            "trial": trial,
            "framework": "plain",
            "loaders": [],
            "optimizers": [],
            "losses": [],
            "cpu_count": os.cpu_count(),
            "cores": usable_cores(),
            "process_starts": [],
        }
        self._by_id: dict[int, dict[str, Any]] = {}
        self._by_dataset: dict[int, dict[str, Any]] = {}
        self._watching = False

    def _where(self) -> dict[str, Any]:
        file, line, files = user_frame(3)
        framework = framework_of(files)
        if framework != "plain" or self.doc["framework"] == "plain":
            self.doc["framework"] = framework
        return {"file": file, "line": line, "code": source_line(file, line), "framework": framework}

    def loader_built(self, loader: Any) -> None:
        """Record a DataLoader just constructed (its settings after any trial override).

        Accelerate's copy of a loader the script built (``accelerator.prepare``) is left
        out: the script's own loader is the one to fix.
        """
        _, _, files = user_frame(2)
        if rebuilt_by_accelerate(files):
            return
        record = self._where()
        for key in LOADER_KEYS:
            value = getattr(loader, key, None)
            record[key] = value if isinstance(value, (bool, int, type(None))) else str(value)
        record.update(dataset_facts(loader))
        self._by_dataset.setdefault(id(getattr(loader, "dataset", None)), record)
        self.doc["loaders"].append(record)
        self._keep(loader, record)
        self.write()

    def batch_seen(self, dataset_id: int, facts: dict[str, Any]) -> None:
        """Record the first batch's facts (``batch_probe``) on the loader of that dataset."""
        record = self._by_dataset.get(dataset_id)
        if record is not None and "batch" not in record:
            record["batch"] = facts
            self.write()

    def optimizer_built(self, optimizer: Any) -> None:
        """Record an optimizer just constructed: class, flags, device, what it offers."""
        import torch

        record = self._where()
        cls = type(optimizer)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        device = params[0].device.type if params else "cpu"
        record.update(
            {
                "class": cls.__name__,
                "module": cls.__module__,
                "foreach": optimizer.defaults.get("foreach"),
                "fused": optimizer.defaults.get("fused"),
                "device": device,
                "offers": optimizer_offers(cls, device),
                "conv_params": sum(1 for p in params if p.dim() == 4),
                "params": len(params),
                "numels": [p.numel() for p in params[:MAX_NUMELS]],
                "torch_threads": torch.get_num_threads(),
            }
        )
        self.doc["optimizers"].append(record)
        self._keep(optimizer, record)
        self.write()

    def _keep(self, obj: Any, record: dict[str, Any]) -> None:
        """Remember ``obj``'s record, and watch ``accelerator.prepare`` once it exists."""
        self._by_id[id(obj)] = record
        if not self._watching and record["framework"] == "accelerate":
            self._watching = watch_prepare(self.prepared)

    def prepared(self, accelerator: Any, objects: tuple[Any, ...]) -> None:
        """Mark the records of ``objects`` handed to ``accelerator.prepare`` at the user's line.

        Each mark names the ``prepare`` call and, where it is found, the
        ``Accelerator(...)`` call that built ``accelerator`` (``accelerator_site``).
        """
        file, line, _ = user_frame(3)
        site = accelerator_site(accelerator, sys._getframe(1), _is_library)
        for obj in objects:
            record = self._by_id.get(id(obj))
            if record is not None and record.get("prepared_at") is None:
                record["prepared_at"] = {"file": file, "line": line, "accelerator": site}
        self.write()

    def process_started(self, process: Any) -> None:
        """Record a ``multiprocessing`` process the user's code started (a trainer, a server).

        DataLoader workers are left out: torch starts them, not the user's line.
        """
        file, line, files = user_frame(3)
        if any(f"{os.sep}torch{os.sep}utils{os.sep}data{os.sep}" in f for f in files):
            return
        import multiprocessing

        method = getattr(process, "_start_method", None)
        method = method or multiprocessing.get_start_method(allow_none=True) or "fork"
        self.doc["process_starts"].append(
            {"file": file, "line": line, "code": source_line(file, line), "method": method}
        )
        self.write()

    def loss_seen(self, value: float) -> None:
        """Record one loss value (the tensor ``backward()`` was called on)."""
        self.doc["losses"].append(value)

    def backward_seen(self) -> None:
        """Read the framework from the stack of a ``backward()`` call (see ``FRAMEWORK_MARKERS``).

        A framework found here (``fabric.backward``, ``accelerator.backward``, a Trainer's
        step) replaces ``plain``, and Fabric or Accelerate found at construction time
        gives way to the Trainer built on them.
        """
        _, _, files = user_frame(2)
        found = framework_of(files)
        if found != "plain" and self.doc["framework"] in ("plain", "fabric", "accelerate"):
            self.doc["framework"] = found

    def write(self) -> None:
        """Write ``setup-<pid>.json`` (a failure to write is ignored: profiling goes on)."""
        if not self.directory:
            return
        path = os.path.join(self.directory, f"setup-{os.getpid()}.json")
        with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as out:
            json.dump(self.doc, out)


def dataset_facts(loader: Any) -> dict[str, str]:
    """The loader's dataset class, its transforms' class names and its collate function.

    Only names are read (no sample is loaded): ``data_kind`` tells images, tokens, tensors
    and audio apart from them.
    """
    dataset = getattr(loader, "dataset", None)
    cls = type(dataset)
    names = []
    for attr in ("transform", "transforms", "target_transform"):
        t = getattr(dataset, attr, None)
        if t is not None:
            inner = getattr(t, "transforms", None)
            parts = inner if isinstance(inner, (list, tuple)) else [t]
            names += [type(p).__name__ for p in parts]
    collate = getattr(loader, "collate_fn", None)
    return {
        "dataset": f"{cls.__module__}.{cls.__qualname__}",
        "transforms": " ".join(names[:16]),
        "collate": str(getattr(collate, "__name__", type(collate).__name__)),
    }


def usable_cores() -> int | None:
    """The CPU cores this process may run on (its affinity), else the machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        with contextlib.suppress(OSError):
            return len(affinity(0))
    return os.cpu_count()


def trainer_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """One process's part of the job's topology: its pid, threads, loader workers, optimizer."""
    opts = [o for o in doc.get("optimizers") or [] if isinstance(o, dict)]
    loaders = [ld for ld in doc.get("loaders") or [] if isinstance(ld, dict)]
    return {
        "pid": doc.get("pid"),
        "threads": next((o.get("torch_threads") for o in opts), None),
        "loader_workers": max((int(ld.get("num_workers") or 0) for ld in loaders), default=0),
        "optimizer": next((o.get("class") for o in opts), None),
        "process_starts": len(doc.get("process_starts") or []),
    }


def read_setup(directory: str | Path) -> dict[str, Any] | None:
    """The job's setup: the records of the process that built an optimizer or a loader.

    A process that built neither but trained (a loss was seen) or was stopped after its
    steps counts too: a job that updates its weights by hand.

    Returns:
        The first such process's record (the lowest rank's, by file order), with
        ``processes`` counting the processes that left one, ``trainers`` summing up each
        that trained (built an optimizer or saw a loss; ``trainer_summary``) and
        ``process_starts`` every process start the job's code made (in any process);
        ``None`` when no process left a record.
    """
    docs, starts = [], []
    for path in sorted(Path(directory).glob(SETUP_FILES)):
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict):
                continue
            starts += [p for p in doc.get("process_starts") or [] if isinstance(p, dict)]
            if any(doc.get(k) for k in SETUP_KEYS):
                docs.append(doc)
    if not docs:
        return None
    docs.sort(key=lambda d: (not d.get("optimizers"), int(d.get("pid") or 0)))
    trained = [d for d in docs if d.get("optimizers") or d.get("losses")]
    trainers = [trainer_summary(d) for d in trained]
    return dict(docs[0], processes=len(docs), trainers=trainers, process_starts=starts)
