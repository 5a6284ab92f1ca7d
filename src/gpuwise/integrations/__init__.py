"""gpuwise where users already work: Lightning, the Hugging Face Trainer, Ray, Prometheus.

Each integration is an optional extra (``pip install 'gpuwise[lightning]'``,
``[transformers]``, ``[ray]``, ``[prometheus]``) and sits on top of the profiler as the CLI
does; importing one without its package raises a ``MissingExtraError`` that names the extra.
"""
