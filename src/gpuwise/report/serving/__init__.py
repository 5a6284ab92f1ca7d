"""A serving run (``gpuwise serve-bench``) rendered.

``text`` for the terminal, ``html`` for the report, ``plots`` for its latency and stage
pictures.
"""
