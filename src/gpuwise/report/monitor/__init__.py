"""The monitor's live view.

``view`` draws the frame, ``history`` keeps what each sparkline shows, ``procs`` builds the
process table's rows.
"""
