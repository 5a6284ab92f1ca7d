"""Inference and serving.

The Pipeline's serving findings, batching of inference traces, quantized decode weights.
"""
