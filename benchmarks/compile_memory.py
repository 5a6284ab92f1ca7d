"""What ``torch.compile`` does to the activations a training step keeps for its backward.

Eager PyTorch keeps what each operator's backward needs. ``torch.compile`` traces the
forward and backward into one graph (AOTAutograd), decomposes it as Inductor does, and
splits it with the min-cut partitioner, which may recompute cheap elementwise chains in
the backward instead of keeping them. This script traces each built-in model both ways
on the meta device (no memory, no GPU), with a compiler that only records the forward
graph's saved tensors, and prints the bytes kept: eager (the default partition of the
undecomposed graph: one saved set per operator, as autograd keeps) and compiled (the
min-cut partition of the decomposed graph, as ``torch.compile`` keeps). Storages of the
parameters and inputs, and views of one storage, are counted once or not at all.

    python benchmarks/compile_memory.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

from gpuwise.sizing.job.inputs import input_spec
from gpuwise.sizing.job.model_source import make_batch, resolve_model

CASES = (
    ("vit_b_16", 16, None),
    ("bert_base", 8, 384),
    ("gpt2_small", 4, 1024),
    ("resnet50", 32, None),
)


def saved_bytes(gm: torch.fx.GraphModule) -> int:
    """Bytes of the new storages a forward graph returns for its backward."""
    inputs = {
        n.meta["val"].untyped_storage()._cdata
        for n in gm.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    }
    (out,) = (n for n in gm.graph.nodes if n.op == "output")
    seen: set[int] = set()
    total = 0
    for node in out.args[0]:
        value = getattr(node, "meta", {}).get("val")
        if not isinstance(value, torch.Tensor):
            continue
        key = value.untyped_storage()._cdata
        if key not in inputs and key not in seen:
            seen.add(key)
            total += value.untyped_storage().nbytes()
    return total


def kept(model: str, batch: int, seq: int | None, compiled: bool) -> tuple[int, float]:
    """Bytes kept for the backward by one forward of ``model``, and the trace's seconds."""
    import torch._inductor.lowering  # some decompositions look it up
    from torch._inductor.decomposition import select_decomp_table

    graphs: list[int] = []

    def forward_compiler(gm: torch.fx.GraphModule, _: Any) -> Callable[..., Any]:
        graphs.append(saved_bytes(gm))
        return gm

    partition = (
        functools.partial(min_cut_rematerialization_partition, compiler="inductor")
        if compiled
        else default_partition
    )
    backend = aot_autograd(
        fw_compiler=forward_compiler,
        bw_compiler=lambda gm, _: gm,
        partition_fn=partition,
        decompositions=select_decomp_table() if compiled else None,
    )
    torch._dynamo.reset()
    source = resolve_model(model)
    spec = input_spec(source, None, seq)
    with torch.device("meta"):
        net, x = source.build(), make_batch(spec, batch)
    start = time.perf_counter()
    torch.compile(net, backend=backend)(x)
    return sum(graphs), time.perf_counter() - start


def main() -> None:
    """Trace each built-in model both ways and print the bytes kept."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="BERT-base only")
    args = parser.parse_args()
    rows = []
    for model, batch, seq in CASES[1:2] if args.quick else CASES:
        row: dict[str, Any] = {"model": model, "batch": batch, "seq": seq}
        try:
            eager, _ = kept(model, batch, seq, compiled=False)
            compiled, seconds = kept(model, batch, seq, compiled=True)
            row |= {"eager_bytes": eager, "compiled_bytes": compiled,
                    "ratio": compiled / eager, "trace_s": seconds}  # fmt: skip
        except Exception as err:  # a model the tracer cannot take is reported
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        rows.append(row)
    if args.json:
        print(json.dumps({"benchmark": "compile_memory", "torch": torch.__version__,
                          "rows": rows}, indent=1))  # fmt: skip
        return
    print(f"torch {torch.__version__}: activations kept for the backward, eager vs compiled")
    for r in rows:
        name = f"{r['model']} b{r['batch']}" + (f" seq {r['seq']}" if r["seq"] else "")
        if "error" in r:
            print(f"  {name:<26} not traced: {r['error']}")
            continue
        print(
            f"  {name:<26} eager {r['eager_bytes'] / 2**20:9,.0f} MiB  compiled "
            f"{r['compiled_bytes'] / 2**20:9,.0f} MiB  ratio {r['ratio']:.3f}"
        )


if __name__ == "__main__":
    main()
