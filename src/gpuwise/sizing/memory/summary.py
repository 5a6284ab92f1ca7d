"""A traced step's storage records summed into a ``MemoryEstimate``.

``estimate`` runs the step on fake tensors and hands over what the live-bytes mode
recorded (``live.StorageRecord``: when each storage was made and freed, its category if
the tracer marked one). ``classify`` names the rest activations (made in the forward and
still alive when it ended) or temporaries; ``summarize`` takes the peak over the records,
splits it by category, and adds the step's FLOPs, bytes moved and operators.
"""

from __future__ import annotations

from gpuwise.sizing.job.models import InputSpec
from gpuwise.sizing.memory.cpu_workspace import workspace_fields
from gpuwise.sizing.memory.live import LiveBytesMode, StorageRecord, before, live_at, peak_of
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.memory.tracer import Tracer
from gpuwise.sizing.step.quantize import QuantizedLinear


def classify(
    records: list[StorageRecord], forward_end: list[int], phase_at: dict[int, str]
) -> None:
    """Name each record that has no category yet ``activations`` or ``temporaries``.

    Activations were made in the forward and are still alive when it ends.
    """
    for r in records:
        if r.category is not None:
            continue
        made_in_forward = phase_at.get(r.alloc_seq) in ("forward", "input")
        end = next((e for e in forward_end if e >= r.alloc_seq), None)
        alive_after = r.free_seq is None or (end is not None and r.free_seq > end)
        r.category = "activations" if made_in_forward and alive_after else "temporaries"


def summarize(
    name: str,
    spec: InputSpec | None,
    batch: int,
    precision: str,
    optimizer: str,
    training: bool,
    device: str,
    records: list[StorageRecord],
    tracker: LiveBytesMode,
    tracer: Tracer,
    trace_s: float,
    cut: int | None = None,
) -> MemoryEstimate:
    """The estimate of the traced step: its peak split by category, FLOPs, bytes, operators.

    ``cut`` (a record sequence number) ends the records considered: the first step's peak
    only, for ``--longest-first``.
    """
    transient = tracker.workspaces.measure() if tracker.workspaces else {}
    # CPU-side scalars: CPU memory; paged optimizer state: CUDA unified memory, outside
    # the caching allocator and paged out to the host under pressure
    host = frozenset({"host", "paged"} if device == "cuda" else ())
    peak, peak_seq = peak_of(
        records if cut is None else before(records, cut), skip=host, transient=transient
    )
    by_category: dict[str, int] = {}
    for r in live_at(records, peak_seq):
        key = r.category or "temporaries"
        by_category[key] = by_category.get(key, 0) + r.rounded_bytes
    kept = [r for r in records if r.free_seq is None]
    steady = {
        c: sum(r.rounded_bytes for r in kept if r.category == c)
        for c in ("parameters", "gradients", "optimizer_state")
    }
    # a quantized frozen weight is held in buffers (``quantize.QuantizedLinear``)
    quantized = sum(
        m.out_features * m.in_features
        for m in tracer.model.modules()
        if isinstance(m, QuantizedLinear)
    )
    params = sum(p.numel() for p in tracer.model.parameters()) + quantized
    trainable = sum(p.numel() for p in tracer.model.parameters() if p.requires_grad)
    by_dtype: dict[str, int] = {}
    for p in tracer.model.parameters():
        key = str(p.dtype).removeprefix("torch.")
        by_dtype[key] = by_dtype.get(key, 0) + p.numel()
    return MemoryEstimate(
        model=name,
        batch_size=batch,
        input_shape=spec.shape if spec else None,
        precision=precision,
        optimizer=optimizer if training else None,
        training=training,
        device=device,
        parameter_count=params,
        peak_bytes=peak,
        peak_phase=tracker.phase_at.get(peak_seq, "build"),
        parameters_bytes=by_category.get("parameters", 0),
        gradients_bytes=by_category.get("gradients", 0),
        optimizer_state_bytes=by_category.get("optimizer_state", 0),
        activations_bytes=by_category.get("activations", 0),
        temporaries_bytes=by_category.get("temporaries", 0),
        params_grads_optimizer_bytes=sum(steady.values()),
        flops_forward=int(tracer.flops["forward"]),
        flops_backward=int(tracer.flops["backward"]),
        bytes_moved=dict(tracker.bytes_moved),
        op_count=sum(tracker.op_count.values()),
        input_bytes=tracer.input_bytes,
        trace_s=trace_s,
        ops=tuple(tracker.ops),
        trainable_parameter_count=trainable,
        paged_state_bytes=sum(r.rounded_bytes for r in kept if r.category == "paged"),
        weight_dtype=max(by_dtype, key=by_dtype.__getitem__) if by_dtype else None,
        **workspace_fields(tracker.workspaces, transient.get(peak_seq, 0)),
    )
