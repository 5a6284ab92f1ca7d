"""Communication kernels told by what they do, whatever library launched them.

A kernel is communication when its name shows a collective library or a collective
operation: NCCL and RCCL (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t``), PyTorch symmetric memory
(``multimem_all_reduce_kernel``, ``one_shot_all_reduce_kernel``,
``two_shot_all_reduce_kernel``, ``multimem_all_gather_kernel``), the custom all-reduce of
vLLM and SGLang (``cross_device_reduce_1stage``/``2stage``), TensorRT-LLM's
(``oneShotAllReduceKernel``, ``allreduce_fusion_kernel``), AMD's quick reduce, NVSHMEM
(``nvshmemi_*``, ``nvshmemx_*``), expert-parallel dispatch/combine (DeepEP's or any
namespace's, ``_EP_EXCHANGE``), MSCCL++ and Gloo;
or when the profiler tagged it with a collective name (``args["Collective name"]``).

Its kind (``records.trace.COLLECTIVES``) comes from the tag when there is one, else from
the name: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` (NCCL runs
all-to-all as grouped ``SendRecv`` kernels; expert dispatch/combine), ``broadcast``,
``send_recv`` (point-to-point: pipeline stages) and ``other``.
"""

from __future__ import annotations

import re
from typing import Any

_LIBRARY = re.compile(
    r"nccl|rccl|multimem_|one_?shot_?all_?reduce|two_?shot_?all_?reduce|cross_device_reduce|"
    r"custom_?all_?reduce|allreduce_fusion|quick_?reduce|nvshmem|deep_ep|mscclpp|msccl|gloo|"
    r"symm_mem"
)
"""Searched in the lower-cased name (so are ``_OPERATION`` and ``_EP_EXCHANGE``)."""
_OPERATION = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall")
_EP_EXCHANGE = re.compile(
    r"(?:^|[^a-z0-9])(?:(?:ep|a2a|all2all|expert|intranode|internode(?:_ll)?|low_latency)"
    r"(?:::\w+)?(?:::|_|)|moe::(?:\w+::)?)(?:dispatch|combine|(?:cached_)?notify)"
    r"|(?:^|[^a-z0-9])cached_notify"
)
"""Expert-parallel token exchange under any namespace: DeepEP's ``deep_ep::intranode::
dispatch``, ``uccl::ep::combine``, ``mori::moe::EpDispatchIntraNodeKernel``,
``a2a_dispatch_send``, and the notify kernels that exchange the token counts before them
(DeepEP's ``internode::cached_notify``, ``intranode::notify_dispatch``). The word before
``dispatch``/``combine``/``notify`` must say expert parallel or all-to-all:
``flash_fwd_splitkv_combine_kernel`` (attention) and ``fused_moe_kernel`` (expert GEMMs)
are compute."""

_KINDS = (
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    (
        "all_to_all",
        re.compile(
            r"all_?to_?all|alltoall|sendrecv|deep_ep.*(dispatch|combine)|"
            r"(dispatch|combine).*deep_ep|" + _EP_EXCHANGE.pattern,
            re.IGNORECASE,
        ),
    ),
    (
        "all_reduce",
        re.compile(
            r"all_?reduce|cross_device_reduce|one_?shot|two_?shot|multimem_.*reduce|"
            r"quick_?reduce",
            re.IGNORECASE,
        ),
    ),
    ("broadcast", re.compile(r"broadcast|bcast", re.IGNORECASE)),
    (
        "send_recv",
        re.compile(r"(^|[^a-z])(send|recv)([^a-z]|$)|p2p|nvshmem\w*(put|get)", re.IGNORECASE),
    ),
)
_TAG_KEYS = ("Collective name", "collective_name")


_EP_WORDS = ("dispatch", "combine", "notify")
"""Every ``_EP_EXCHANGE`` match holds one of these: a name without them skips that search."""


def is_communication(name: str, args: Any) -> bool:
    """True when a device kernel moves data between ranks (see module docstring).

    The patterns are searched in the lower-cased name (case-blind searches cost several
    times more on template names of a thousand characters), and the expert-exchange one
    only where its verb occurs: about 10 µs a name where it was 80.
    """
    if any(k in args for k in _TAG_KEYS):
        return True
    low = name.lower()
    if _LIBRARY.search(low) or _OPERATION.search(low):
        return True
    return any(w in low for w in _EP_WORDS) and _EP_EXCHANGE.search(low) is not None


def collective_kind(name: str, tag: str | None = None) -> str:
    """Return what a communication kernel does (``records.trace.COLLECTIVES``).

    Args:
        name: The kernel name.
        tag: The profiler's collective name for it (``args["Collective name"]``), which
            wins over the name: a ``SendRecv`` kernel tagged ``send`` is point-to-point.
    """
    if tag:
        kind = _kind_of(tag)
        if kind != "other":
            return kind
        if re.fullmatch(r"_?(send|recv|isend|irecv)\w*", tag, re.IGNORECASE):
            return "send_recv"
    return _kind_of(name)


def _kind_of(text: str) -> str:
    for kind, pattern in _KINDS:
        if pattern.search(text):
            return kind
    return "other"


def collective_tag(args: Any) -> str | None:
    """The profiler's collective name in a kernel's ``args`` (None when untagged)."""
    for key in _TAG_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


_PARALLELISM = (
    ("tensor_parallel", frozenset({"tp", "tensor", "tensorparallel"})),
    ("expert_parallel", frozenset({"ep", "expert", "moe", "experts"})),
    ("pipeline_parallel", frozenset({"pp", "pipeline", "pipe"})),
    ("context_parallel", frozenset({"cp", "context", "sp", "sequence"})),
    ("data_parallel", frozenset({"dp", "data", "ddp", "fsdp", "default_pg", "default", "hsdp"})),
)


def parallelism(group: str) -> str:
    """Which parallelism a process group serves, from its description (``unknown``).

    Descriptions are PyTorch's (``default_pg``, DeviceMesh's ``mesh_tp``/``mesh_dp``) or an
    engine's (vLLM/SGLang name their groups ``tp``, ``pp``, ``dp``, ``ep``).
    """
    low = group.lower()
    if low == "default_pg":
        return "data_parallel"
    tokens = set(re.split(r"[^a-z0-9]+", low))
    for label, words in _PARALLELISM:
        if tokens & words:
            return label
    return "unknown"
