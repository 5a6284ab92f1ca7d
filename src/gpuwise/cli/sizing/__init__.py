"""The sizing commands: ``gpuwise estimate``, ``gpuwise tune`` and ``gpuwise advise``.

Each is a subcommand module as in ``cli.main``; ``_model_args`` holds the flags they share
(the model, its input, precision, parallel layout) and turns them into a sized job.
"""
