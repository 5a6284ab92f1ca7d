"""Sizing a job on many GPUs: how a sharding stage divides memory, and what it sends.

``plan`` is the layout (GPUs, nodes, stage); ``memory`` each GPU's peak under it;
``comm`` the collectives each stage runs, timed at the interconnect's bandwidth and
overlapped with the step as the frameworks overlap them.
"""
