"""``gpuwise monitor``: the subcommand (``command``) and its live terminal view.

``command`` declares the flags and runs the monitor; ``tables`` are what it prints once it
ends; ``live`` gathers and redraws the live view, ``keys`` turns key presses into view
changes, ``screen`` owns the terminal's alternate screen.
"""
