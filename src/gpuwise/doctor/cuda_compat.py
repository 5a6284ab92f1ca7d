"""CUDA compatibility data: the driver each CUDA release needs, GPU architectures, containers.

Small tables with their sources, and pure functions over version strings, so that
``gpuwise doctor`` can say whether a PyTorch build can run on the installed driver and GPU,
and which container base or wheel would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, ...]

# Minimum Linux x86_64 driver of each CUDA toolkit's GA release. Source: NVIDIA CUDA Toolkit
# Release Notes, table "CUDA Toolkit and Corresponding Driver Versions"
# (docs.nvidia.com/cuda/cuda-toolkit-release-notes). A newer driver runs every older CUDA.
TOOLKIT_DRIVER: dict[tuple[int, int], str] = {
    (11, 0): "450.51.05",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

# The oldest driver that runs any release of a CUDA major version through "minor version
# compatibility" (without PTX JIT of newer code). Source: NVIDIA "CUDA Compatibility" guide,
# section "Minor Version Compatibility" (docs.nvidia.com/deploy/cuda-compatibility).
MAJOR_FLOOR_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class NgcImage:
    """One NGC PyTorch container release.

    Attributes:
        tag: Release tag (``"25.01"``); the image is ``nvcr.io/nvidia/pytorch:<tag>-py3``.
        cuda: CUDA version it is built on.
        torch: PyTorch version it ships (NVIDIA builds from the main branch, hence ``a0``).
    """

    tag: str
    cuda: str
    torch: str

    @property
    def image(self) -> str:
        """The full image reference."""
        return f"nvcr.io/nvidia/pytorch:{self.tag}-py3"


# Source: NVIDIA "PyTorch Release Notes" for each release and the "Frameworks Support
# Matrix" (docs.nvidia.com/deeplearning/frameworks), newest first.
NGC_PYTORCH: tuple[NgcImage, ...] = (
    NgcImage("25.12", "13.1.0", "2.10.0a0"),
    NgcImage("25.04", "12.9.0", "2.7.0a0"),
    NgcImage("25.01", "12.8.0", "2.6.0a0"),
    NgcImage("24.10", "12.6.2", "2.5.0a0"),
    NgcImage("24.04", "12.4.1", "2.3.0a0"),
    NgcImage("23.10", "12.2.2", "2.1.0a0"),
    NgcImage("22.12", "11.8.0", "1.14.0a0"),
)

# CUDA variants published for each PyTorch release on download.pytorch.org (index
# "whl/cuXYZ"), newest first. A variant missing from a release's row does not exist for it:
# `pip install torch==2.13.0 --index-url .../cu128` finds nothing. Sources: PyTorch's
# "Previous PyTorch Versions" page (2.4-2.9) and the per-release wheel listings (2.10-2.13).
TORCH_WHEEL_CUDA: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (2, 13): ((13, 2), (13, 0), (12, 6)),
    (2, 12): ((13, 2), (13, 0), (12, 6)),
    (2, 11): ((13, 0), (12, 8), (12, 6)),
    (2, 10): ((13, 0), (12, 8), (12, 6)),
    (2, 9): ((13, 0), (12, 8), (12, 6)),
    (2, 8): ((12, 9), (12, 8), (12, 6)),
    (2, 7): ((12, 8), (12, 6), (11, 8)),
    (2, 6): ((12, 6), (12, 4), (11, 8)),
    (2, 5): ((12, 4), (12, 1), (11, 8)),
    (2, 4): ((12, 4), (12, 1), (11, 8)),
}
NEWEST_TORCH = max(TORCH_WHEEL_CUDA)
# Every variant any listed release has, newest first (a release unknown to the table).
WHEEL_CUDA: tuple[tuple[int, int], ...] = tuple(
    sorted({c for row in TORCH_WHEEL_CUDA.values() for c in row}, reverse=True)
)


def wheel_cuda_variants(torch_version: str | None) -> tuple[tuple[int, int], ...]:
    """The CUDA variants published for a PyTorch release, newest first.

    A release newer than the table gets the newest listed release's variants (the pip
    command then names that release, see ``suggest_container``); an unknown version gets
    the newest release's too.

    Example:
        >>> wheel_cuda_variants("2.13.0+cpu")
        ((13, 2), (13, 0), (12, 6))
    """
    return TORCH_WHEEL_CUDA[_listed_release(torch_version)]


def _listed_release(torch_version: str | None) -> tuple[int, int]:
    v = parse_version(torch_version)
    release = (v[0], v[1] if len(v) > 1 else 0) if v else NEWEST_TORCH
    return release if release in TORCH_WHEEL_CUDA else NEWEST_TORCH


WHEEL_INDEX = "https://download.pytorch.org/whl/"


def parse_version(text: str | None) -> Version | None:
    """Turn ``"550.54.15"`` or ``"12.4"`` into a tuple of ints (``None`` if unreadable)."""
    if not text:
        return None
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def cuda_of(text: str | None) -> tuple[int, int] | None:
    """The ``(major, minor)`` of a CUDA version string (``"12.4.1"`` -> ``(12, 4)``)."""
    v = parse_version(text)
    if v is None:
        return None
    return (v[0], v[1] if len(v) > 1 else 0)


def toolkit_driver(cuda: tuple[int, int]) -> str | None:
    """The driver a CUDA release's toolkit ships with (its full-feature minimum).

    A minor release missing from the table takes the nearest older one of the same major.
    """
    known = [k for k in TOOLKIT_DRIVER if k[0] == cuda[0] and k <= cuda]
    return TOOLKIT_DRIVER[max(known)] if known else None


def max_cuda_of_driver(driver: str | None) -> tuple[int, int] | None:
    """The newest CUDA release whose toolkit driver is not newer than ``driver``."""
    v = parse_version(driver)
    if v is None:
        return None
    fits = [k for k, d in TOOLKIT_DRIVER.items() if (parse_version(d) or ()) <= v]
    return max(fits) if fits else None


def arch_runs(capability: str, arch_list: tuple[str, ...]) -> bool:
    """Whether a build's architecture list covers a GPU.

    A cubin for ``sm_XY`` runs on GPUs of the same major and an equal or higher minor;
    ``sm_XYa`` runs only on exactly that GPU; PTX (``compute_XY``) is compiled by the
    driver for any GPU of capability ``X.Y`` or higher.

    Args:
        capability: The GPU's compute capability, ``"8.6"``.
        arch_list: The build's ``torch.cuda.get_arch_list()`` (``"sm_80"``, ``"compute_90"``).

    Returns:
        True when some entry runs on the GPU.
    """
    gpu = cuda_of(capability)
    if gpu is None:
        return True
    for arch in arch_list:
        m = re.match(r"^(sm|compute)_(\d+?)(\d)([a-z]?)$", arch)
        if m is None:
            continue
        kind, target = m.group(1), (int(m.group(2)), int(m.group(3)))
        if m.group(4):
            if target == gpu:
                return True
        elif (kind == "compute" and target <= gpu) or (
            kind == "sm" and target[0] == gpu[0] and target[1] <= gpu[1]
        ):
            return True
    return False


def sm_name(capability: str) -> str:
    """``"9.0"`` -> ``"sm_90"``."""
    major, _, minor = capability.partition(".")
    return f"sm_{major}{minor or '0'}"


def torch_base_version(version: str | None) -> str | None:
    """``"2.13.0+cu124"`` -> ``"2.13.0"``."""
    return None if version is None else version.split("+", 1)[0]


def driver_max_cuda(driver: str | None, cuda_driver: str | None) -> tuple[int, int] | None:
    """The newest CUDA a driver runs: as NVML states it, else from the toolkit table."""
    return cuda_of(cuda_driver) or max_cuda_of_driver(driver)


def suggest_container(
    gpu_count: int,
    driver: str | None,
    cuda_driver: str | None,
    torch_version: str | None,
    capabilities: tuple[str, ...] = (),
) -> dict[str, str | None]:
    """Suggest a container base and a PyTorch wheel that run on this machine's driver.

    Each project can pin its own image or wheel index, so projects needing different CUDA
    versions live side by side on one server as long as the driver is new enough for each.

    Args:
        gpu_count: NVIDIA GPUs found (0: suggest the CPU-only build).
        driver: The NVIDIA driver version, if known.
        cuda_driver: The newest CUDA the driver supports as NVML reports it, if known.
        torch_version: The installed PyTorch version, used in the pip command.
        capabilities: The GPUs' compute capabilities; the wheel must compile for each.

    Returns:
        ``{"kind", "driver_max_cuda", "ngc_image", "ngc_cuda", "ngc_torch", "torch_cuda",
        "pip_index_url", "pip_command", "reason"}``; entries that do not apply are ``None``.
    """
    out: dict[str, str | None] = dict.fromkeys(
        (
            "kind",
            "driver_max_cuda",
            "ngc_image",
            "ngc_cuda",
            "ngc_torch",
            "torch_cuda",
            "pip_index_url",
        )
    )
    release = _listed_release(torch_version)
    if gpu_count == 0:
        out.update(
            kind="cpu",
            pip_index_url=WHEEL_INDEX + "cpu",
            reason="no NVIDIA GPU: the CPU-only PyTorch build leaves out the CUDA libraries",
        )
    else:
        limit = driver_max_cuda(driver, cuda_driver)
        out.update(_cuda_suggestion(driver, limit))
        wheel = pick_wheel(torch_version, limit, capabilities)
        if wheel is not None:
            release, cuda = wheel
            index = f"{WHEEL_INDEX}cu{cuda[0]}{cuda[1]}"
            out.update(torch_cuda=f"{cuda[0]}.{cuda[1]}", pip_index_url=index)
    url = out["pip_index_url"]
    base = torch_base_version(torch_version)
    if base is None or cuda_of(base) != release:  # another release than the installed one
        base = "'" + ".".join(map(str, release)) + ".*'"  # quoted for the shell
    out["pip_command"] = None if url is None else f"pip install torch=={base} --index-url {url}"
    out["reason"] = out.pop("reason")
    return out


def pick_wheel(
    torch_version: str | None,
    limit: tuple[int, int] | None,
    capabilities: tuple[str, ...] = (),
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The PyTorch release and CUDA variant to suggest for this driver and these GPUs.

    A variant fits when the driver runs it (CUDA <= ``limit``) and it compiles for every
    GPU (``MIN_CUDA_FOR_ARCH``). The installed release's newest fitting variant comes first;
    when it has none, the newest fitting variant of any listed release, from the newest
    release that publishes it: an older PyTorch rather than a wheel that does not exist.

    Args:
        torch_version: The installed PyTorch version (``None``: not installed).
        limit: The newest CUDA the driver runs (``None``: unknown, no limit).
        capabilities: The GPUs' compute capabilities (``"12.0"``).

    Returns:
        ``((major, minor) of PyTorch, (major, minor) of CUDA)``, or ``None`` when no listed
        wheel fits (upgrade the driver).
    """
    floor = max((min_cuda_for(c) for c in capabilities), default=(0, 0))

    def fits(cuda: tuple[int, int]) -> bool:
        return floor <= cuda and (limit is None or cuda <= limit)

    installed = _listed_release(torch_version)
    own = [c for c in TORCH_WHEEL_CUDA[installed] if fits(c)]
    if own:
        return installed, own[0]
    cuda = next((c for c in WHEEL_CUDA if fits(c)), None)
    if cuda is None:
        return None
    return max(r for r, row in TORCH_WHEEL_CUDA.items() if cuda in row), cuda


# The first CUDA release that compiles for a GPU generation (NVIDIA CUDA Toolkit Release
# Notes: Ampere sm_80 in 11.0, sm_86 in 11.1, Ada sm_89 and Hopper sm_90 in 11.8,
# Blackwell sm_100 and sm_120 in 12.8). Older generations: any listed CUDA.
MIN_CUDA_FOR_ARCH: dict[tuple[int, int], tuple[int, int]] = {
    (8, 0): (11, 0),
    (8, 6): (11, 1),
    (8, 9): (11, 8),
    (9, 0): (11, 8),
    (10, 0): (12, 8),
    (12, 0): (12, 8),
}


def min_cuda_for(capability: str) -> tuple[int, int]:
    """The first CUDA that compiles for a compute capability (``(0, 0)``: any)."""
    gpu = cuda_of(capability)
    known = [arch for arch in MIN_CUDA_FOR_ARCH if gpu is not None and arch <= gpu]
    return MIN_CUDA_FOR_ARCH[max(known)] if known else (0, 0)


def _cuda_suggestion(driver: str | None, limit: tuple[int, int] | None) -> dict[str, str | None]:
    image = next(
        (i for i in NGC_PYTORCH if limit is None or (cuda_of(i.cuda) or (0, 0)) <= limit), None
    )
    return {
        "kind": "cuda",
        "driver_max_cuda": None if limit is None else f"{limit[0]}.{limit[1]}",
        "ngc_image": None if image is None else image.image,
        "ngc_cuda": None if image is None else image.cuda,
        "ngc_torch": None if image is None else image.torch,
        "reason": _container_reason(driver, limit, image),
    }


def _container_reason(
    driver: str | None, limit: tuple[int, int] | None, image: NgcImage | None
) -> str:
    if limit is None:
        return "driver version unknown: the newest listed image and wheel; check the driver"
    if image is None:
        return f"driver {driver} predates every listed image; upgrade the driver"
    return (
        f"driver {driver or '?'} runs CUDA <= {limit[0]}.{limit[1]}; newest image and wheel for it"
    )
