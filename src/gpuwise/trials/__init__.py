"""``gpuwise try``: apply each fix to the user's unmodified job, measure it, hand over the change.

``plan`` picks the fixes from a diagnosed baseline and the captured setup; ``session`` runs
the interleaved schedule and measures each; ``outcome`` holds the statistics and verdicts;
``change`` writes the winning fixes as edits of the user's own source.
"""

from gpuwise.trials.session import TryConfig, TryResult, try_command

__all__ = ["TryConfig", "TryResult", "try_command"]
