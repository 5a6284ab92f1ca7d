"""gpuwise where users already work: Lightning, the Hugging Face Trainer, Prometheus.

Each integration is an optional extra (``pip install 'gpuwise[lightning]'``,
``[transformers]``, ``[prometheus]``); importing one without its package raises a
``MissingExtraError`` that names the extra.
"""
