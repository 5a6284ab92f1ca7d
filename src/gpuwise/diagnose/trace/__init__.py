"""Rules over one profiler trace.

The per-step rules, host work, graph capture, idle gaps and the premises a trace fix needs.
"""
