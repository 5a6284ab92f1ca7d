"""What job the trace recorded and how it unfolds over time.

The job's kind (``kind``), the host spans that tell steps apart (``timeline``), the steps
and phases read from them (``phases``), and a serving engine's forward steps
(``engine_steps``) and batching (``serving``).
"""
