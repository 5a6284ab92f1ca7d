"""Many ranks in the reports: lines of text (``text``), the lateness heat map (``heatmap``)."""
