"""One reader for user-named files: a FIFO or a folder is refused unread, a size is bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwise.data.regular_file import (
    FileTooLargeError,
    NotRegularFileError,
    kind_of,
    read_regular,
)


def test_a_regular_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 10)
    assert read_regular(path, 10) == b"x" * 10
    with pytest.raises(FileTooLargeError, match="larger than 9 bytes") as err:
        read_regular(path, 9)
    assert err.value.limit == 9


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "header.json"
    os.mkfifo(fifo)  # no writer: a blocking open would wait for good
    with pytest.raises(NotRegularFileError, match="is a FIFO, not a regular file") as err:
        read_regular(fifo, 100)
    assert kind_of(err.value.mode) == "a FIFO"


def test_a_folder_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFileError) as err:
        read_regular(tmp_path, 100)
    assert kind_of(err.value.mode) == "a folder"
