"""The Kineto (PyTorch profiler) trace reader: ``read_trace`` and the modules behind it.

The modules in the order of the read, in three rooms: this folder reads the file and
computes the figures; ``calls/`` keeps the events by what they are; ``job/`` tells what job
the trace recorded and how it unfolds. ``reader`` drives the rest: while the events stream
by, ``events`` hands each to the collectors of items 5 to 8 (device, host, engine steps,
job spans); once the stream ends, ``steps`` and ``facts`` compute the figures. No module
imports ``reader`` or this package back:

1. ``reader``: opens the file (``.json`` or ``.json.gz``) and streams its events through
   the steps below; ``read_trace`` and ``TraceRead``, re-exported here.
2. ``decode``: each run of events decoded into records of only the fields read
   (``msgspec``; plain dicts converted where it is missing); ``intervals``: time
   intervals in flat columns and the union arithmetic.
3. ``events``: each event, one at a time, reduced to intervals and counts (``EventTally``);
   ``members``: what each event category is, copies by direction and memory kind, and the
   trace's ``deviceProperties`` and ``distributedInfo`` members; ``excerpt``: where the
   job's device work begins when the trace is an excerpt or opens with first launches
   that load code.
4. ``steps``: the profiler steps and the measured window, each step's device split and
   phases.
5. ``calls/device``: device events by name, class and stream; ``calls/host``: launches,
   graph launches and the calls that block the host.
6. ``calls/collectives``: communication kernels by what they do, and the parallelism they
   show.
7. ``job/engine_steps``: a serving engine's forward steps; ``job/serving``: static or
   continuous batching and the batch over time; ``calls/weights``: GEMMs by their weight
   format.
8. ``job/kind``: what kind of job the trace recorded; ``facts``: the device columns turned
   into the job's ``TraceFacts``, with ``figures`` (communication overlap, idle per
   stream, launches, top kernels, precision).
9. ``job/timeline``: the host spans that tell steps apart (optimizer steps, backward
   passes, evaluation); ``job/phases``: the steps, the phases of the timeline (start-up,
   warm-up, steady state, evaluation, teardown) and the one-time costs, read once the
   stream ends.
10. ``rank``: one rank's trace of a many-rank job, read by ``reader`` with a tally that
    also keeps every collective call, reduced to the ``RankSummary`` a worker process hands
    back (``gpuwise analyze rank*.json.gz``). It sits on top of ``reader``; nothing here
    imports it.

Example:
    >>> from gpuwise.telemetry.readers.kineto import read_trace
    >>> tr = read_trace("worker0.pt.trace.json.gz")  # doctest: +SKIP
"""

from __future__ import annotations

from gpuwise.telemetry.readers.kineto.reader import (
    US,
    SkippedEvent,
    TraceRead,
    UnusableEventError,
    read_trace,
)

__all__ = ["US", "SkippedEvent", "TraceRead", "UnusableEventError", "read_trace"]
