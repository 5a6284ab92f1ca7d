"""The trace reader's text source: gzip unpacked in bounded pieces, nothing lost."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuwise.telemetry.readers._json_stream import TextSource

READ_BYTES = 1 << 12


def _pieces(path: Path) -> list[str]:
    out = []
    with TextSource(str(path), read_bytes=READ_BYTES) as source:
        while piece := source.read():
            out.append(piece)
    return out


def test_a_highly_compressible_trace_unpacks_in_bounded_pieces(tmp_path: Path) -> None:
    # 8 MB of one repeated event compresses ~1000x: one read of compressed bytes would
    # otherwise unpack into megabytes of text held (and decoded) at once.
    text = '{"traceEvents": [' + '{"ph": "X", "name": "k", "ts": 1, "dur": 2},' * 180_000
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    pieces = _pieces(path)
    assert "".join(pieces) == text
    assert max(len(p) for p in pieces) <= 4 * READ_BYTES  # ASCII: one char a byte


def test_concatenated_gzip_members_are_read_whole(tmp_path: Path) -> None:
    parts = ["a" * 50_000, "b" * 70_000, "c" * 10]
    path = tmp_path / "m.gz"
    path.write_bytes(b"".join(gzip.compress(p.encode()) for p in parts))
    assert "".join(_pieces(path)) == "".join(parts)


def test_a_truncated_gzip_yields_its_text_then_says_so(tmp_path: Path) -> None:
    text = "x" * 200_000
    data = gzip.compress(text.encode())
    path = tmp_path / "cut.gz"
    path.write_bytes(data[: len(data) - 12])  # the end-of-stream marker and some data gone
    got: list[str] = []

    def read_all() -> None:
        with TextSource(str(path), read_bytes=READ_BYTES) as source:
            while piece := source.read():
                got.append(piece)

    with pytest.raises(EOFError):
        read_all()
    assert text.startswith("".join(got))
    assert got
