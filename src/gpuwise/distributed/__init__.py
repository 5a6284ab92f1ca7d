"""Distributed helpers: ranks, torchrun integration, per-rank aggregation."""
