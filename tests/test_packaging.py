"""The package metadata matches the code: every extra a message names exists, data ships."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "gpuwise"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = set(PROJECT["optional-dependencies"])


def test_every_extra_named_in_the_code_exists() -> None:
    named: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"gpuwise\[([a-z,]+)\]", text):
            for extra in match.group(1).split(","):
                named[extra] = str(path.relative_to(REPO))
        # MissingExtraError(module, extra, purpose): the second argument is the extra
        for match in re.finditer(r'MissingExtraError\(\s*"[^"]+",\s*"([^"]+)"', text):
            named[match.group(1)] = str(path.relative_to(REPO))
    assert {"jpeg", "lightning", "hf", "prometheus", "ray"} <= set(named)
    missing = {extra: where for extra, where in named.items() if extra not in EXTRAS}
    assert not missing, f"messages name extras the package does not have: {missing}"


def test_the_extras_users_are_told_about() -> None:
    assert {"jpeg", "lightning", "hf", "transformers", "prometheus", "ray"} <= EXTRAS
    extras = PROJECT["optional-dependencies"]
    assert extras["transformers"] == extras["hf"]  # the old name stays an alias


def test_runtime_dependencies_are_the_core_only_with_lower_bounds() -> None:
    names = [re.split(r"[<>=!~\[ ]", dep)[0] for dep in PROJECT["dependencies"]]
    # msgspec: the trace reader decodes events into typed records of the fields it reads
    assert names == ["torch", "numpy", "psutil", "nvidia-ml-py", "rich", "orjson", "msgspec"]
    # a lower bound only: an installed torch (CPU or CUDA build) that satisfies it is kept
    assert all("<" not in dep and "==" not in dep for dep in PROJECT["dependencies"])


def test_package_data_patterns_match_files() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pattern in config["package-data"]["gpuwise"]:
        if pattern.endswith(".js"):
            continue  # the report ships no script today; the pattern keeps one from missing
        assert list(SRC.glob(pattern)), f"package data {pattern!r} matches no file"
