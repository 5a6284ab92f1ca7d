"""Incremental reader of one large JSON document whose bulk is one array of small objects.

A Chrome/Kineto trace is ``{"deviceProperties": [...], "traceEvents": [{...}, ...], ...}``
(or a bare ``[{...}, ...]``). Loading it whole builds every event as a Python dict at once;
this reader decodes one array element at a time from a window of text read in chunks, so
memory stays at the size of the window plus what the caller keeps.

Buffer protocol: ``_buf`` holds text from character ``_base`` of the document; ``_pos`` is
the next unread character inside it. ``_fill`` appends a chunk and drops the consumed
prefix. A value is accepted only when it is followed by at least one more character or the
input has ended, so a number cut at a chunk boundary is never taken as complete.
"""

from __future__ import annotations

import codecs
import json
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

CHUNK_CHARS = 1 << 20
"""Characters read per refill (1 MiB keeps the window small and the refills rare)."""

LOOKAHEAD_CHARS = 4 << 20
"""A decode error with this much text after it is real corruption, not a chunk boundary."""

_WS = re.compile(r"[ \t\n\r]*")
_NEXT_OBJECT = re.compile(r"\}\s*,\s*\{")
_OPEN_OBJECT = re.compile(r"[ \t\n\r]*\{")

BATCH_CHARS = 1 << 20
"""Text decoded per ``json.loads`` call by ``JsonStream.batches`` (about 4000 events)."""
_decoder = json.JSONDecoder()


def _load_fast() -> Callable[[str], Any]:
    """``orjson.loads`` when installed (about 1.5x faster on trace text), else ``json``'s."""
    try:
        import orjson
    except ImportError:
        return _decoder.decode
    loads: Callable[[str], Any] = orjson.loads
    return loads


load_run = _load_fast()
DECODER = "orjson" if load_run is not _decoder.decode else "json"
"""Which decoder reads runs of elements (``JsonStream.batches``) unless it is given one."""


class Readable(Protocol):
    """Anything with ``read(n) -> str`` (a text file, ``TextSource``)."""

    def read(self, n: int = -1, /) -> str:
        """Return up to about ``n`` characters; "" at the end."""
        ...


class JsonStreamError(ValueError):
    """The document is malformed at ``offset`` (characters from its start)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class Corrupt:
    """A malformed array element that was skipped (``strict=False``)."""

    index: int
    offset: int
    reason: str


class JsonStream:
    """Decode a JSON document from a text stream, one top-level member at a time.

    Args:
        fh: Text stream positioned at the start of the document.
        on_read_error: Called with the exception when reading the stream fails (a
            truncated gzip member); it returns normally to treat the failure as the end
            of input, or raises.
    """

    def __init__(
        self, fh: Readable, on_read_error: Callable[[Exception], None] | None = None
    ) -> None:
        self._fh = fh
        self._on_read_error = on_read_error
        self._buf = ""
        self._base = 0
        self._pos = 0
        self._eof = False

    @property
    def offset(self) -> int:
        """Characters of the document consumed so far."""
        return self._base + self._pos

    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = self._fh.read(CHUNK_CHARS)
        except (EOFError, OSError, zlib.error) as err:
            if self._on_read_error is None:
                raise
            self._on_read_error(err)
            chunk = ""
        self._base += self._pos
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
        self._eof = not chunk
        return bool(chunk)

    def peek(self) -> str:
        """Skip whitespace and return the next character ("" at the end of input)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._fill():
                return self._buf[self._pos : self._pos + 1]

    def expect(self, char: str) -> None:
        """Consume ``char`` (after whitespace) or raise ``JsonStreamError``."""
        got = self.peek()
        if got != char:
            seen = repr(got) if got else "end of input"
            raise JsonStreamError(f"expected {char!r} but found {seen}", self.offset)
        self._pos += 1

    def value(self) -> Any:
        """Decode the next JSON value, reading more text as needed."""
        self.peek()
        while True:
            try:
                obj, end = _decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as err:
                if self._more_could_help(err.pos) and self._fill():
                    continue
                raise JsonStreamError(err.msg, self._base + err.pos) from err
            except RecursionError as err:  # `{"a": {"a": ...` 50,000 deep
                raise JsonStreamError(
                    "a value nested deeper than Python's recursion limit", self.offset
                ) from err
            if end < len(self._buf) or not self._fill():
                self._pos = end
                return obj

    def _more_could_help(self, err_pos: int) -> bool:
        return not self._eof and len(self._buf) - err_pos < LOOKAHEAD_CHARS

    def members(self) -> Iterator[str]:
        """Yield the keys of the top-level object; the caller consumes each value."""
        self.expect("{")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise JsonStreamError("expected an object key (a string)", self.offset)
            self.expect(":")
            yield key
            if self.peek() == ",":
                self._pos += 1
                continue
            self.expect("}")
            return

    def elements(self, corrupt: list[Corrupt] | None = None) -> Iterator[Any]:
        """Yield the elements of the array that starts here.

        Args:
            corrupt: When given, a malformed element is recorded here and skipped by
                resynchronising at the next ``}, {``; otherwise it raises.

        Raises:
            JsonStreamError: The array is malformed (or truncated) and ``corrupt`` is None.
        """
        self.expect("[")
        if self.peek() == "]":
            self._pos += 1
            return
        index = 0
        while True:
            start = self.offset
            try:
                yield self.value()
                sep = self.peek()
                if sep not in (",", "]"):
                    raise JsonStreamError(f"expected ',' or ']' but found {sep!r}", self.offset)
            except JsonStreamError as err:
                if corrupt is None:
                    raise
                corrupt.append(Corrupt(index, err.offset, str(err)))
                if not self._resync(start):
                    return
                index += 1
                continue
            self._pos += 1
            index += 1
            if sep == "]":
                return

    def batches(
        self,
        corrupt: list[Corrupt] | None = None,
        decode: Callable[[str], list[Any]] | None = None,
    ) -> Iterator[list[Any]]:
        """Yield the elements of the array that starts here, many at a time.

        Whole runs of elements that end at a ``}, {`` boundary in the buffered text are
        decoded by one ``json.loads`` call (one C call instead of one Python step per
        element); a run that does not decode (the cut fell inside a string or a nested
        value, or an element is corrupt) is read element by element as ``elements`` does,
        so offsets and ``corrupt`` records are the same either way.

        Args:
            corrupt: As for ``elements``.
            decode: Decodes the text of a run (a JSON array) into its elements, raising
                ``ValueError`` where it is not valid JSON; ``load_run`` by default. The
                elements read one by one are plain decoded values either way.

        Raises:
            JsonStreamError: As for ``elements``.
        """
        self.expect("[")
        if self.peek() == "]":
            self._pos += 1
            return
        index = 0
        slow_until = -1
        while True:
            if self.offset >= slow_until:
                batch, cut = self._run_of_elements(decode or load_run)
                if batch is not None:
                    index += len(batch)
                    yield batch
                    continue
                slow_until = cut
            start = self.offset
            try:
                item = self.value()
                sep = self.peek()
                if sep not in (",", "]"):
                    raise JsonStreamError(f"expected ',' or ']' but found {sep!r}", self.offset)
            except JsonStreamError as err:
                if corrupt is None:
                    raise
                corrupt.append(Corrupt(index, err.offset, str(err)))
                if not self._resync(start):
                    return
                index += 1
                continue
            self._pos += 1
            index += 1
            yield [item]
            if sep == "]":
                return

    def _run_of_elements(self, decode: Callable[[str], Any]) -> tuple[list[Any] | None, int]:
        """Decode the buffered elements up to the last ``}, {`` boundary in one call.

        Returns:
            ``(elements, -1)`` after consuming them and their separators, or
            ``(None, offset)``: no run decoded; read element by element up to ``offset``.
        """
        if len(self._buf) - self._pos < BATCH_CHARS:
            self._fill()
        buf, pos = self._buf, self._pos
        cut = buf.rfind("},", pos)
        while cut > pos and _OPEN_OBJECT.match(buf, cut + 2) is None:
            cut = buf.rfind("},", pos, cut)
        if cut <= pos:
            return None, -1
        try:
            batch = decode("[" + buf[pos : cut + 1] + "]")
        except ValueError:  # json.JSONDecodeError, orjson.JSONDecodeError
            return None, self._base + cut + 2
        self._pos = cut + 2
        return batch, -1

    def _resync(self, start: int) -> bool:
        """Move to the ``{`` of the next object after ``start``; False at end of input."""
        self._pos = max(0, start - self._base) + 1
        while True:
            found = _NEXT_OBJECT.search(self._buf, self._pos)
            if found is not None:
                self._pos = found.end() - 1
                return True
            keep = max(self._pos, len(self._buf) - 16)
            self._pos = keep
            if not self._fill():
                return False


class TextSource:
    """UTF-8 text of a file, gunzipped on the fly when it starts with the gzip magic.

    Unlike ``gzip.open``, a truncated gzip file first yields every byte that was
    decompressed before the cut; only the read after that raises ``EOFError``.

    Args:
        path: The file to read.
        read_bytes: Compressed bytes read per call.

    Raises:
        OSError: The file cannot be opened.
    """

    def __init__(self, path: str, read_bytes: int = 1 << 18) -> None:
        self._raw = open(path, "rb")  # noqa: SIM115 - closed by close()/__exit__
        self._unzip = zlib.decompressobj(wbits=47) if self._raw.read(2) == b"\x1f\x8b" else None
        self._raw.seek(0)
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._read_bytes = read_bytes
        self._done = False

    def read(self, _hint: int = -1) -> str:
        """Return the next piece of text ("" at the end).

        Raises:
            EOFError: The gzip stream ended early (after its data was returned).
            zlib.error: The gzip stream is corrupt.
        """
        if self._done:
            return ""
        if self._unzip is None:
            data = self._raw.read(self._read_bytes)
            self._done = not data
            return self._text.decode(data, final=not data)
        cap = self._read_bytes * 4  # a highly compressible trace never unpacks all at once
        while True:
            # input the decompressor held back under the cap comes before new input
            data = self._unzip.unconsumed_tail or self._raw.read(self._read_bytes)
            if not data:
                self._done = True
                if not self._unzip.eof:
                    raise EOFError("compressed file ended before the end-of-stream marker")
                return self._text.decode(b"", final=True)
            out = self._unzip.decompress(data, cap)
            while self._unzip.eof and self._unzip.unused_data:  # a further gzip member
                rest = self._unzip.unused_data
                self._unzip = zlib.decompressobj(wbits=47)
                out += self._unzip.decompress(rest, cap)
            text = self._text.decode(out)
            if text:  # "" only at the end: input that made no text yet is followed
                return text

    def close(self) -> None:
        """Close the file."""
        self._raw.close()

    def __enter__(self) -> TextSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
