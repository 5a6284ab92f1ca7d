"""Step time: how long the traced step takes on a GPU, or on this machine's CPU.

Imports ``sizing.memory`` (the estimate and its operators) and ``sizing.hardware``.

- ``gemm_share``: the achieved share of the datasheet matrix rate, per card and precision.
- ``roofline``: step time on a GPU as a sum over the traced operators' rooflines.
- ``cpu_step``: the step's cost as a function of batch size, and its time on this CPU.
- ``paging``: the PCIe time of paged optimizer state that does not fit beside the step.
"""
