"""``gpuwise doctor``: can this machine's PyTorch use its GPUs, and if not, why.

``facts`` holds what is known (the frozen ``EnvFacts``); ``environment`` gathers them and
runs the checks; ``rules`` judges them, with ``cuda_compat``'s driver and build tables.
"""
