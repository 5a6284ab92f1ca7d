"""The trace's calls by what they are, filled while the events stream by.

Device events (``device``), host runtime calls (``host``), memory copies (``copies``),
communication kernels (``collectives``) and GEMMs by weight format (``weights``); read once
the stream ends.
"""
