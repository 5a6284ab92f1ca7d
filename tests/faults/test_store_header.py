"""A store header written by someone else: paths outside the store, mistyped values.

Promise: a store never makes gpuwise open a file outside its directory (``..``, an absolute
path, a symlink out); a header with a mistyped value or no fields is refused before any
shard is read. The command line says which value is wrong and exits 2; the library raises
``StoreHeaderError``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuwise.data.loader import Loader
from gpuwise.data.pack import pack
from gpuwise.data.store.read import open_store
from gpuwise.errors import StoreFormatError, StoreHeaderError
from tests.faults.helpers import run


def _store(tmp_path: Path) -> Path:
    images = np.zeros((4, 8, 8, 3), np.uint8)
    pack(images, tmp_path / "s", labels=np.arange(4))
    return tmp_path / "s"


def _edit(store: Path, change: Callable[[dict[str, Any]], None]) -> None:
    header = json.loads((store / "header.json").read_text())
    change(header)
    (store / "header.json").write_text(json.dumps(header))


def _shard(header: dict[str, Any], name: str) -> None:
    header["shards"][0]["file"] = name
    header["fields"]["image"]["file"] = name


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "dotdot": (lambda h: _shard(h, "../../etc/passwd"), "points outside the store"),
    "absolute": (lambda h: _shard(h, "/etc/passwd"), "points outside the store"),
    "no_fields": (lambda h: h.update(fields={}), "at least one field"),
    "records_text": (lambda h: h.update(records="ten"), "'records' is 'ten'"),
    "shape_text": (
        lambda h: h["fields"]["image"].update(shape="abc"),
        "field 'image' is malformed",
    ),
    "shards_not_list": (lambda h: h.update(shards={"a": 1}), "'shards' is not a list"),
    "bytes_text": (lambda h: h["shards"][0].update(bytes="many"), "no whole byte count"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_headers_exit_2_with_the_value_named(tmp_path: Path, case: str) -> None:
    change, message = CASES[case]
    store = _store(tmp_path)
    _edit(store, change)
    for action in ("info", "verify"):
        done = run(["store", action, "s"], tmp_path)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert "re-pack" in done.stderr
        assert "root:" not in done.stdout  # /etc/passwd's bytes never show
    with pytest.raises(StoreHeaderError, match=message):
        Loader(str(store), batch_size=2)


def test_a_symlinked_shard_leading_out_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    outside = tmp_path / "outside.bin"
    (store / "image.bin").rename(outside)
    os.symlink(outside, store / "image.bin")
    with pytest.raises(StoreHeaderError, match="leads outside the store"):
        open_store(store)
    assert run(["store", "verify", "s"], tmp_path).returncode == 2


def test_a_fifo_header_is_refused_without_blocking(tmp_path: Path) -> None:
    store = _store(tmp_path)
    (store / "header.json").unlink()
    os.mkfifo(store / "header.json")  # open() of it would wait for a writer for good
    for action in ("info", "verify"):
        done = run(["store", action, "s"], tmp_path, timeout_s=120)
        assert done.returncode == 1, done.stderr  # a store format error, as a missing header
        assert "header.json is not a regular file (a FIFO, device or socket)" in done.stderr
        assert "re-pack the store" in done.stderr
    with pytest.raises(StoreFormatError, match="not a regular file"):
        open_store(store)


def test_a_header_nested_too_deep_names_the_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    (store / "header.json").write_text("[" * 100_000 + "]" * 100_000)
    done = run(["store", "info", "s"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "s/header.json nests its values too deep" in done.stderr
    assert "unexpected" not in done.stderr
    assert "RecursionError" not in done.stderr
    with pytest.raises(StoreFormatError, match="nests its values too deep"):
        open_store(store)
