"""CUDA compatibility tables and lookups used by gpuwise doctor."""

from __future__ import annotations

import pytest

from gpuwise.doctor import cuda_compat as cc
from gpuwise.doctor.environment import _cudnn_version


@pytest.mark.parametrize(
    ("capability", "arch", "runs"),
    [
        ("8.6", ("sm_80",), True),  # a cubin runs on a higher minor of its major
        ("8.0", ("sm_86",), False),
        ("9.0", ("sm_80",), False),  # ... but not on the next major
        ("9.0", ("compute_80",), True),  # PTX is compiled by the driver for newer GPUs
        ("8.0", ("compute_90",), False),
        ("9.0", ("sm_90a",), True),  # arch-specific cubins run only on that exact GPU
        ("10.0", ("sm_90a",), False),
        ("12.0", ("sm_100", "sm_120"), True),
        ("12.0", (), False),
    ],
)
def test_arch_runs(capability: str, arch: tuple[str, ...], runs: bool) -> None:
    assert cc.arch_runs(capability, arch) is runs


def test_version_parsing_and_driver_tables() -> None:
    assert cc.parse_version("550.54.15") == (550, 54, 15)
    assert cc.parse_version("n/a") is None
    assert cc.cuda_of("12.4.1") == (12, 4)
    assert cc.toolkit_driver((12, 4)) == "550.54.14"
    assert cc.toolkit_driver((12, 7)) == "560.28.03"  # no 12.7 release: the 12.6 driver
    assert cc.toolkit_driver((10, 2)) is None
    assert cc.max_cuda_of_driver("550.54.15") == (12, 4)
    assert cc.max_cuda_of_driver("550.54.13") == (12, 3)
    assert cc.max_cuda_of_driver("440.33") is None
    assert cc.driver_max_cuda("550.54.15", "12.6") == (12, 6)  # NVML's word wins
    assert cc.sm_name("9.0") == "sm_90"


def test_suggest_container_for_each_driver() -> None:
    h100 = cc.suggest_container(8, "590.48.01", "13.1", "2.13.0+cu130")
    assert h100["ngc_image"] == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert h100["torch_cuda"] == "13.0"
    assert h100["pip_command"] == (
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"
    )
    old = cc.suggest_container(1, "470.82.01", "11.4", None)
    assert old["ngc_image"] is None
    assert old["pip_command"] is None
    assert old["reason"] == "driver 470.82.01 predates every listed image; upgrade the driver"
    cpu = cc.suggest_container(0, None, None, "2.13.0+cpu")
    assert cpu["pip_command"] == (
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    )
    assert cpu["kind"] == "cpu"
    assert cpu["pip_index_url"] == "https://download.pytorch.org/whl/cpu"


def test_the_suggested_wheel_is_one_published_for_the_installed_release() -> None:
    # torch 2.13 has no cu128 or cu129 build: a driver that runs CUDA 12.9 gets cu126
    r575 = cc.suggest_container(1, "575.51.03", "12.9", "2.13.0+cu126")
    assert r575["torch_cuda"] == "12.6"
    assert r575["pip_command"] == (
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
    )
    # torch 2.8 had cu129 (and no cu130): the same driver gets cu129
    assert cc.suggest_container(1, "575.51.03", "12.9", "2.8.0")["torch_cuda"] == "12.9"
    # a release the table does not list: the newest listed release, with its own variants
    new = cc.suggest_container(1, "595.1", "13.2", "2.99.0+cu140")
    assert new["pip_command"] == (
        "pip install torch=='2.13.*' --index-url https://download.pytorch.org/whl/cu132"
    )
    unknown = cc.suggest_container(1, "595.1", "13.2", None)
    assert unknown["pip_command"] == new["pip_command"]
    # no 2.13 wheel runs on a CUDA 12.4 driver: the newest release that has one, not a 404
    r550 = cc.suggest_container(2, "550.54.15", "12.4", "2.13.0+cpu")
    assert r550["pip_command"] == (
        "pip install torch=='2.6.*' --index-url https://download.pytorch.org/whl/cu124"
    )
    # a driver older than every listed variant: upgrade it, no pip command
    old = cc.suggest_container(1, "450.80.02", "11.0", "2.13.0")
    assert old["pip_command"] is None
    # a Blackwell GPU (sm_120) needs CUDA >= 12.8: torch 2.13's cu126 cannot run on it
    blackwell = cc.suggest_container(1, "575.51.03", "12.9", "2.13.0", ("12.0",))
    assert blackwell["pip_command"] == (
        "pip install torch=='2.8.*' --index-url https://download.pytorch.org/whl/cu129"
    )
    assert cc.min_cuda_for("9.0") == (11, 8)
    assert cc.min_cuda_for("7.0") == (0, 0)
    # every row only names variants: each variant is a CUDA release the driver table knows
    for variants in cc.TORCH_WHEEL_CUDA.values():
        assert all(cc.toolkit_driver(cuda) for cuda in variants)


def test_cudnn_version_encodings() -> None:
    assert _cudnn_version(90100) == "9.1.0"  # cuDNN 9: major * 10000
    assert _cudnn_version(8902) == "8.9.2"  # cuDNN 8: major * 1000
    assert _cudnn_version(None) is None
