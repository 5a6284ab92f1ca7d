"""Engines and frameworks on top of the profiler, as the CLI is (Ray Train: ``ray``)."""
