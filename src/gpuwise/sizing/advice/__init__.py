"""What to do: which card to run on, which batch, whether bf16 pays, and how sure we are.

Imports every other ``sizing`` subpackage; nothing in ``sizing`` imports it.

- ``provenance``: which precision a card runs a job at, and which figures are estimates.
- ``advisor``: each card's (and this CPU's) time, cost and fit for a job (``advise``).
- ``real_step``: a real training step of a sizing job on a device.
- ``tune``: the largest and the fastest batch, found on the real device.
- ``bf16_check``: does bf16 autocast make the step faster on this device? Measured.
- ``tune_model``: ``gpuwise tune`` end to end: real step, batch search, bf16 check.
"""
