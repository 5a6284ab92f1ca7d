"""Peak memory of one training step, traced on fake tensors, and the measured peak.

Imports ``sizing.step``, ``sizing.job`` and ``sizing.hardware``. In reading order:

- ``traffic``, ``opcost``: the bytes each traced operator reads and writes (from its
  schema), its FLOPs and how CUDA runs it.
- ``cpu_workspace``: memory a CPU kernel allocates and frees inside itself.
- ``live``: live-bytes accounting of every tensor storage during the trace.
- ``shadow``: real values for small tensors, so ``.item()`` works on fake ones.
- ``trace_modes``: the function modes a traced (and a real) step runs under.
- ``tracer``: one traced step: zero_grad, forward, loss, backward, update.
- ``layer_scaling``: a deep stack of identical layers from two shallow traces.
- ``result``: the ``MemoryEstimate`` and its JSON form.
- ``summary``: a traced step's storage records summed into a ``MemoryEstimate``.
- ``estimate``: ``estimate`` and ``estimate_job``, driving all of the above.
- ``measured``: the real peak of a step on the CPU, from PyTorch's allocator record.
"""
