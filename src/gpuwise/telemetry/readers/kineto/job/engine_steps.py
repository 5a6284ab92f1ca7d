"""Forward steps of a serving engine, gathered while a trace is read.

Each host span whose name marks one forward of an engine is kept with its phase (when the
name tells) and the requests it names; each ``aten::embedding`` with recorded shapes gives
the tokens of the forward it belongs to. The markers, as the engines spell them:

- vLLM: the ``gpu_model_runner: forward`` annotation (v1) and the model runner's
  ``execute_model`` Python frame (``.../gpu_model_runner.py(N): execute_model``);
- SGLang: the model runner's ``forward_decode`` / ``forward_extend`` frames (extend is a
  prefill, or prefill and decode mixed when chunked prefill batches them together);
- TensorRT-LLM: ``_forward_step N: C ctx reqs, G gen reqs`` (context = prefill requests,
  generation = decode requests of the step).

``serving.batching`` reads how batches form from these steps.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import numpy as np

NONE, STEP, EMBED = 0, 1, 2
UNKNOWN, PHASE_PREFILL, PHASE_DECODE, PHASE_MIXED = 0, 1, 2, 3
PHASES = ("unknown", "prefill", "decode", "mixed")

_STEP = re.compile(
    r"^gpu_model_runner: forward$|model_runner\.py\(\d+\): "
    r"(?:execute_model|forward_decode|forward_extend)$|_forward_step\b"
)
_TRT_REQS = re.compile(r"(\d+) ctx reqs, (\d+) gen reqs")


def _name_phase(name: str) -> int:
    if name.endswith("forward_decode"):
        return PHASE_DECODE
    if name.endswith("forward_extend"):  # a prefill; mixed when its kernels decode too
        return PHASE_PREFILL
    m = _TRT_REQS.search(name)
    if m is not None:
        ctx, gen = int(m.group(1)), int(m.group(2))
        return PHASE_MIXED if ctx and gen else PHASE_PREFILL if ctx else PHASE_DECODE
    return UNKNOWN


class EngineSteps:
    """Forward-step spans and embedding token counts, gathered while reading."""

    def __init__(self) -> None:
        self._code: dict[str, int] = {}
        self.starts, self.ends = array("d"), array("d")
        self.phases = array("b")
        self.requests = array("l")
        self.embed_at, self.embed_tokens, self.embed_seq = array("d"), array("q"), array("q")

    def matters(self, name: str) -> bool:
        """True when ``host`` keeps spans of this name (a step, an embedding call)."""
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = _code_of(name)
        return code != NONE

    def host(self, name: str, start: float, end: float, ev: Any) -> None:
        """Take one host span (called for every ``cpu_op``/annotation/Python frame)."""
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = _code_of(name)
        if code == NONE:
            return
        if code == EMBED:
            shape = _indices_shape(ev.args)
            if shape is not None:
                self.embed_at.append(start)
                self.embed_tokens.append(shape[0])
                self.embed_seq.append(shape[1])
            return
        self.starts.append(start)
        self.ends.append(end)
        self.phases.append(_name_phase(name))
        m = _TRT_REQS.search(name)
        self.requests.append(int(m.group(1)) + int(m.group(2)) if m else -1)

    def spans(self) -> tuple[np.ndarray[Any, Any], ...]:
        """Outermost step spans in time order: ``(starts, ends, phases, requests)``."""
        s = np.frombuffer(self.starts, dtype=np.float64)
        e = np.frombuffer(self.ends, dtype=np.float64)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        keep = np.ones(s.shape, dtype=bool)
        if s.size > 1:  # a nested marker (annotation inside the runner's frame) is one step
            keep[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
        phases = np.frombuffer(self.phases, dtype=np.int8)[order]
        requests = np.frombuffer(self.requests, dtype=np.int64)[order]
        return s[keep], e[keep], phases[keep], requests[keep]


def _code_of(name: str) -> int:
    if name == "aten::embedding":
        return EMBED
    return STEP if _STEP.search(name) else NONE


def _indices_shape(args: Any) -> tuple[int, int] | None:
    """``(tokens, sequence length)`` of an ``aten::embedding`` call's indices (input 1).

    Engines that flatten the batch (vLLM, SGLang) pass 1-D indices: the sequence length is
    not told (-1). A ``[batch, sequence]`` input (a ``generate`` loop) tells it: 1 in
    decode steps, the prompt length in prefill.
    """
    dims = None if args is None else args.get("Input Dims")
    if not isinstance(dims, list) or len(dims) < 2 or not isinstance(dims[1], list):
        return None
    shape = dims[1]
    if not shape or not all(type(d) is int for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n, (shape[-1] if len(shape) == 2 else -1)
