"""Energy, the device's and the host's.

The device's per step (``energy``: NVML's energy counter or integrated power samples) and
the host CPU's (``rapl``: Linux powercap).
"""
