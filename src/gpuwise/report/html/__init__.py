"""The HTML report: one self-contained page a browser opens from disk.

``run`` lays out the page for a Run; ``sections`` renders the Run's extra sections as
tables, ``tables`` the per-rank and per-device tables, ``trace`` an analyzed trace's
section. The plots they embed are in ``report.svg``, ``report.bars`` and ``report.timeline``.
"""
