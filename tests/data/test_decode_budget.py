"""The decode budget that all of a pack's threads share (``data/decode_budget.py``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gpuwise.data import pack_sources
from gpuwise.data.decode_budget import DecodeBudget
from gpuwise.data.pack import PackConfig, pack


def test_a_hold_waits_while_the_others_hold_the_rest() -> None:
    budget = DecodeBudget(100)
    order: list[str] = []
    with budget.hold(70):

        def second() -> None:
            with budget.hold(40):
                order.append("second")

        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.3)
        assert order == []  # 70 + 40 > 100: it waits
        assert budget.held_bytes == 70
        order.append("first done")
    waiter.join(timeout=30)
    assert order == ["first done", "second"]
    assert budget.held_bytes == 0


def test_small_holds_share_and_one_over_the_budget_runs_alone() -> None:
    budget = DecodeBudget(100)
    with budget.hold(30), budget.hold(30), budget.hold(40):
        assert budget.held_bytes == 100
    with budget.hold(10**9):  # bigger than the whole budget: held alone, as the budget
        assert budget.held_bytes == 100
    assert budget.held_bytes == 0
    with pytest.raises(ValueError, match="holds nothing"):
        DecodeBudget(0)


def test_a_large_image_gets_gpuwise_note_not_pillow_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    # scaled down: Pillow warns past 40 x 40 pixels here, gpuwise notes past 40 x 40 x 3
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40 * 40)
    monkeypatch.setattr(pack_sources, "LARGE_DECODE_BYTES", 40 * 40 * 3)
    (tmp_path / "in" / "c0").mkdir(parents=True)
    Image.fromarray(np.zeros((50, 60, 3), np.uint8)).save(tmp_path / "in" / "c0" / "big.png")
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(tmp_path / "in" / "c0" / "small.png")
    # the suite turns warnings into errors: Pillow's DecompressionBombWarning would fail it
    result = pack(tmp_path / "in", tmp_path / "s", PackConfig(mode="jpeg", workers=2))
    assert result.records == 2
    assert result.skipped == []
    (note,) = result.notes
    assert note["item"] == "c0/big.png"
    assert note["note"].startswith("a large image (60 x 50): it decodes to 0 MB, within the 537 MB")
