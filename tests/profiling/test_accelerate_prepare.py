"""Accelerate's prepare: its loader copies told apart, the Accelerator(...) call found."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from gpuwise.profiling.accelerate_prepare import (
    accelerator_site,
    construction_line,
    rebuilt_by_accelerate,
)

SCRIPT = """\
class Accelerator:
    def __init__(self, **kwargs):
        pass


def setup(acc, seen, where):
    seen.append(where(acc))


def train(seen, where):
    accelerator = Accelerator(cpu=True)
    other = Accelerator()
    setup(accelerator, seen, where)
    setup(other, seen, where)


accelerator = Accelerator()
"""


def test_a_loader_built_inside_accelerates_data_loader_module_is_a_copy() -> None:
    inside = f"{os.sep}site{os.sep}accelerate{os.sep}data_loader.py"
    assert rebuilt_by_accelerate(["train.py", inside, "accelerator.py"])
    assert not rebuilt_by_accelerate(["train.py", f"{os.sep}accelerate{os.sep}accelerator.py"])


def test_construction_line_is_the_last_assignment_of_the_name_in_the_span(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    assert construction_line(str(path), {"accelerator"}, 1, 100) == 17
    assert construction_line(str(path), {"accelerator"}, 10, 14) == 11
    assert construction_line(str(path), {"other"}, 10, 14) == 12
    assert construction_line(str(path), {"acc"}, 1, 100) is None
    assert construction_line(str(tmp_path / "gone.py"), {"accelerator"}, 1, 100) is None
    qualified = tmp_path / "q.py"
    qualified.write_text("import accelerate\nacc = accelerate.Accelerator()\n")
    assert construction_line(str(qualified), {"acc"}, 1, 2) == 2


def test_the_site_is_found_in_the_caller_that_built_it(tmp_path: Path) -> None:
    """A helper handed the accelerator has no Accelerator(...): its caller's is the site."""
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    namespace: dict[str, Any] = {}
    exec(compile(SCRIPT, str(path), "exec"), namespace)

    def where(acc: object) -> dict[str, Any] | None:
        return accelerator_site(acc, sys._getframe(1), lambda f: f != str(path))

    seen: list[dict[str, Any] | None] = []
    namespace["train"](seen, where)
    site = {"file": os.path.abspath(path)}
    assert seen == [dict(site, line=11), dict(site, line=12)]
    assert accelerator_site(object(), sys._getframe(), lambda f: f != str(path)) is None
