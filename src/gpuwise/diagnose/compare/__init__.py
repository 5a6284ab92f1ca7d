"""``gpuwise compare``: two diagnosed Runs, before and after a fix, judged side by side.

In the order a comparison is made:

- ``stats``: the step-time ratio's interval, regressions and bounds beaten by the noise;
- ``workload``: whether both Runs did the same work;
- ``attrib``: each finding's own part of the step, before and after;
- ``outcomes``: the verdict on each finding (fixed, moved, vanished, partly, worse, ...);
- ``comparison``: the ``Comparison`` (``gpuwise.compare/1``) and ``compare_runs`` /
  ``compare_files``, re-exported here.
"""

from gpuwise.diagnose.compare.comparison import (
    COMPARE_SCHEMA,
    Comparison,
    compare_files,
    compare_runs,
    step_series_s,
)
from gpuwise.diagnose.compare.outcomes import FindingOutcome

__all__ = [
    "COMPARE_SCHEMA",
    "Comparison",
    "FindingOutcome",
    "compare_files",
    "compare_runs",
    "step_series_s",
]
