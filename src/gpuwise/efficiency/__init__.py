"""What a profiled run achieved: its MFU, HFU, tokens/s and energy, added to the Run.

Not sizing (nothing here predicts): these read a measured ``Run`` against the GPU
catalog's datasheet rates (``sizing.hardware.catalog``) and the energy counters
(``telemetry``). Layer 4: imports ``records``, ``telemetry`` and ``sizing``; used by
``session``, ``integrations`` and ``cli``.

- ``mfu``: achieved FLOP/s and MFU of a Run from the estimate's FLOPs per step.
- ``model_mfu``: MFU, HFU and tokens/s from the FLOPs the processes counted as they ran.
- ``sections``: the energy and MFU sections of a Run, added in one call.
"""
