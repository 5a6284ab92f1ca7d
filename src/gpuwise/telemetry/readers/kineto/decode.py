"""Trace events decoded into only the fields the reader reads (``TraceEvent``, ``Args``).

A Kineto event carries far more than the diagnosis uses (``Call stack`` strings, grid and
block sizes, flow ids). With ``msgspec`` installed, each run of events is decoded straight
into small typed records: the C decoder skips every other key without building a Python
object for it (about 2.5x faster than decoding whole dicts, and the reader's loop reads
attributes instead of looking up keys). Without it, or for a run that does not fit the
record types (an element that is not an object, ``args`` that is not one), the events are
decoded as dicts by ``json``/``orjson`` and converted by ``event_of``: one reference path,
the same records either way.

Missing keys: an absent ``args`` key is ``MISSING`` (``"stream" in args`` is False), a
JSON ``null`` is ``None``; ``Args.get(key, default)`` reads as ``dict.get`` does, by the
key's name in the trace. Only the keys in ``ARG_KEYS`` are kept: reading another raises
``KeyError`` (add it to ``ARG_KEYS`` first).
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from gpuwise.telemetry.readers._json_stream import load_run

ARG_KEYS = {
    "device": "device",
    "stream": "stream",
    "correlation": "correlation",
    "external_id": "External id",
    "external_id_lower": "external id",
    "bytes": "bytes",
    "bandwidth": "memory bandwidth (GB/s)",
    "collective": "Collective name",
    "collective_lower": "collective_name",
    "group_description": "Process Group Description",
    "group_name": "Process Group Name",
    "input_dims": "Input Dims",
    "seq": "Seq",
    "seq_lower": "seq",
    "src_rank": "Src Rank",
    "dst_rank": "Dst Rank",
    "in_nelems": "In msg nelems",
}
"""Attribute -> key in ``args`` of every argument any collector reads."""
_ATTR_OF = {key: attr for attr, key in ARG_KEYS.items()}

EVENT_FIELDS: tuple[tuple[str, Any], ...] = (
    ("cat", None),
    ("name", ""),
    ("ts", None),
    ("dur", 0),
    ("pid", None),
)
"""The fields of a complete (``"ph": "X"``) event the reader reads, with the value when the
key is absent. Events of every other phase are only counted."""

PHASES = tuple("BEiICbnestfPNODSTpFMVvRc()")
"""The Chrome trace format's other event phases (``ph``): flow, instant, counter, async,
object, metadata, mark, sample and context events. Each is decoded to an empty record; a
phase not listed sends its run of events down the reference path."""


class _Missing:
    """The value of an ``args`` key the event does not have."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


def _get(self: Any, key: str, default: Any = None) -> Any:
    value = getattr(self, _ATTR_OF[key])
    return default if value is MISSING else value


def _contains(self: Any, key: str) -> bool:
    return getattr(self, _ATTR_OF[key]) is not MISSING


try:
    import msgspec
except ImportError:  # the reference path: json (or orjson) dicts, converted
    msgspec = None  # type: ignore[assignment]

if msgspec is not None:
    MISSING: Any = msgspec.UNSET

    class _ArgsBase(msgspec.Struct, gc=False):
        get = _get
        __contains__ = _contains

    Args: Any = msgspec.defstruct(
        "Args",
        [(a, Any, msgspec.field(default=MISSING, name=k)) for a, k in ARG_KEYS.items()],
        bases=(_ArgsBase,),
        module=__name__,
    )
    TraceEvent: Any = msgspec.defstruct(
        "TraceEvent",
        [*((f, Any, d) for f, d in EVENT_FIELDS), ("args", Args | None, None)],
        module=__name__,
        gc=False,
        tag_field="ph",
        tag="X",
    )
    _others = [
        msgspec.defstruct(f"Phase{ord(p)}", [], module=__name__, gc=False, tag_field="ph", tag=p)
        for p in PHASES
    ]
    PASSING = frozenset(_others)
    _one_of = functools.reduce(operator.or_, (TraceEvent, *_others))
    _typed = msgspec.json.Decoder(list[_one_of])  # type: ignore[valid-type]
    DECODER = "msgspec"
else:
    MISSING = _Missing()

    class _PlainArgs:
        __slots__ = tuple(ARG_KEYS)
        get = _get
        __contains__ = _contains

        def __init__(self, **values: Any) -> None:
            for attr in ARG_KEYS:
                setattr(self, attr, values.get(attr, MISSING))

    class _PlainEvent:
        __slots__ = (*(f for f, _ in EVENT_FIELDS), "args")

        def __init__(self, **values: Any) -> None:
            for f, default in EVENT_FIELDS:
                setattr(self, f, values.get(f, default))
            self.args = values.get("args")

    Args = _PlainArgs
    TraceEvent = _PlainEvent
    PASSING = frozenset()
    _typed = None
    DECODER = "json"

NO_ARGS: Any = Args()
"""The ``args`` of an event without any (every key ``MISSING``)."""
NOT_COMPLETE = object()
"""What ``event_of`` returns for an event of another phase than ``X``."""


def event_of(obj: Any) -> Any:
    """Return a decoded element as a ``TraceEvent``.

    Returns:
        The ``TraceEvent`` of a complete event; ``NOT_COMPLETE`` for an event of another
        phase (``PASSING`` records too); None for an element that is not a JSON object.
    """
    if type(obj) is TraceEvent:
        return obj
    if type(obj) in PASSING:
        return NOT_COMPLETE
    if type(obj) is not dict:
        return None
    if obj.get("ph") != "X":
        return NOT_COMPLETE
    raw = obj.get("args")
    args = (
        Args(**{_ATTR_OF[k]: v for k, v in raw.items() if k in _ATTR_OF})
        if type(raw) is dict
        else None
    )
    return TraceEvent(**{f: obj.get(f, d) for f, d in EVENT_FIELDS}, args=args)


def decode_events(text: str) -> list[Any]:
    """Decode the JSON array ``text``: ``TraceEvent`` records, or plain decoded values.

    Raises:
        ValueError: ``text`` is not valid JSON (the stream then reads it element by element).
    """
    if _typed is not None:
        try:
            events: list[Any] = _typed.decode(text)
            return events
        except msgspec.ValidationError:
            pass  # valid JSON of another shape: the reference path below
    decoded: list[Any] = load_run(text)
    return decoded  # dicts: the tally converts each (``event_of``)
